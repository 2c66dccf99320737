//! The CUDA engine's law: which GPU, the spawn matrix, the out-of-memory
//! retry, the placement, the post-load device check, the VRAM spill, and the
//! pre-flight. Pure: NVML's readings and the child's output come in.
//!
//! # The spawn matrix (the spec lists it as a table that is missing here)
//!
//! | `CUDA_VISIBLE_DEVICES` (the user's) | GPU sized on | `-c` | child's `CUDA_VISIBLE_DEVICES` | brake |
//! |---|---|---|---|---|
//! | unset or empty, devices seen | the largest card | law::window::cuda | `GPU-<uuid>` (pinned) | spill brake |
//! | names exactly one device | that device | law::window::cuda | the user's value, untouched | spill brake |
//! | names several devices | none | no `-c` (fit sizes it) | the user's value | off |
//! | names no device NVML sees | - | - | - | the pre-flight falls back to CPU |
//!
//! `WARDEN_CTX` pins `-c` in every row. A brake respawn reuses the live
//! child's static window folded with the cap (never a new NVML reading), so a
//! series of respawns is deterministic; a fresh sizing happens only at a load.

use serde::Serialize;

use super::brake::Level;
use super::kv;
use super::window::{self, Excess, MIB};
use crate::gguf::ModelFacts;

/// One GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuDevice {
    /// NVML's index.
    pub index: u32,
    /// `GPU-xxxxxxxx-...`.
    pub uuid: String,
    /// The product name.
    pub name: String,
    /// Total memory, bytes.
    pub total_bytes: u64,
    /// Free memory now, bytes.
    pub free_bytes: u64,
}

/// The devices a user's `CUDA_VISIBLE_DEVICES` lets the child see (UUIDs by
/// prefix, integers as NVML indexes; unset or empty: all). Entries that
/// match nothing are skipped; CUDA stops at the first invalid entry, and so
/// does this.
pub fn visible<'a>(devices: &'a [GpuDevice], cuda_visible: Option<&str>) -> Vec<&'a GpuDevice> {
    let Some(spec) = cuda_visible.map(str::trim).filter(|s| !s.is_empty()) else {
        return devices.iter().collect();
    };
    let mut out: Vec<&GpuDevice> = Vec::new();
    for item in spec.split(',').map(str::trim) {
        let found = if let Ok(i) = item.parse::<u32>() {
            devices.iter().find(|d| d.index == i)
        } else {
            let want = item.to_ascii_lowercase();
            devices.iter().find(|d| {
                d.uuid.to_ascii_lowercase().starts_with(&want)
                    || d.uuid.to_ascii_lowercase().starts_with(&format!("gpu-{want}"))
            })
        };
        match found {
            Some(d) if !out.iter().any(|o| o.index == d.index) => out.push(d),
            Some(_) => {}
            None => break,
        }
    }
    out
}

/// The spawn decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "shape", rename_all = "snake_case")]
pub enum CudaPlacement {
    /// One GPU: size the window on it; pin the child to it unless the user
    /// already restricted the devices.
    Sized {
        /// The GPU.
        device: GpuDevice,
        /// The child's `CUDA_VISIBLE_DEVICES`, when the warden sets it.
        pin: Option<String>,
    },
    /// Several devices named by the user: no sizing, the brake off.
    Unsized,
    /// No device the child may see.
    NoDevice,
}

/// The CUDA part of a spawn plan (`law::plan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaSpawn {
    /// Where the child runs.
    pub placement: CudaPlacement,
    /// The window the law gave at load, before any cap: brake respawns fold
    /// their cap into it and never read NVML again.
    pub static_window: Option<u32>,
    /// Flash Attention proven for the model (the slope the window assumed).
    pub flash_attention: bool,
    /// `-ngl -2` (all layers, no fit) instead of `-ngl -1`: the spill brake's
    /// respawns, which must spill rather than drop layers.
    pub all_layers: bool,
}

/// Applies the matrix.
pub fn place(devices: &[GpuDevice], cuda_visible: Option<&str>) -> CudaPlacement {
    let user_set = cuda_visible.is_some_and(|s| !s.trim().is_empty());
    let seen = visible(devices, cuda_visible);
    match (seen.len(), user_set) {
        (0, _) => CudaPlacement::NoDevice,
        (1, true) => CudaPlacement::Sized {
            device: seen[0].clone(),
            pin: None,
        },
        (_, true) => CudaPlacement::Unsized,
        (_, false) => {
            // The largest card; on a tie the lower index (NVML's order).
            let best = seen
                .iter()
                .max_by_key(|d| (d.total_bytes, std::cmp::Reverse(d.index)))
                .expect("at least one device");
            CudaPlacement::Sized {
                device: (*best).clone(),
                pin: Some(best.uuid.clone()),
            }
        }
    }
}

/// The free VRAM the sizing uses: `WARDEN_VRAM_OVERRIDE_GB` (QA) stands in
/// for the free memory, and the total is then the larger of it and the real
/// total; it never invents a GPU (the caller only asks with a device).
pub fn vram_for_sizing(device: &GpuDevice, override_bytes: Option<u64>) -> super::window::Vram {
    match override_bytes {
        Some(o) => super::window::Vram {
            total_bytes: device.total_bytes.max(o),
            free_bytes: o,
        },
        None => super::window::Vram {
            total_bytes: device.total_bytes,
            free_bytes: device.free_bytes,
        },
    }
}

/// Whether the child's output shows a CUDA allocation failure at load.
pub fn cuda_oom(tail: &[String]) -> bool {
    tail.iter().any(|l| {
        l.contains("CUDA_OUT_OF_MEMORY") || l.contains("cudaMalloc failed") || l.contains("CUDA error: out of memory")
    })
}

/// Whether a failed load is retried once at the 4096 floor: a sized load
/// (not fit-sized, not pinned, not a brake respawn) that died of a CUDA
/// allocation failure, not already at the floor.
pub fn retry_at_floor(sized: bool, pinned: bool, respawn: bool, window: Option<u32>, oom: bool) -> bool {
    oom && sized && !pinned && !respawn && window.is_some_and(|w| w > super::caps::WINDOW_FLOOR_TOKENS)
}

/// What fit did with the layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Offload {
    /// Every layer and its KV on the GPU: the brake can run.
    Full,
    /// Some KV is not on the device: the brake is off (the window memory
    /// keeps its cap, so it re-arms at the next load).
    Partial,
}

/// llama.cpp's `offloaded N/M layers to GPU` line, the last one printed
/// (fit's probe prints a first).
pub fn offloaded_line(tail: &[String]) -> Option<(u32, u32)> {
    tail.iter().rev().find_map(|l| {
        let rest = &l[l.find("offloaded ")? + "offloaded ".len()..];
        let (n, rest) = rest.split_once('/')?;
        let m = rest.split_whitespace().next()?;
        if !rest.contains("layers to GPU") {
            return None;
        }
        Some((n.trim().parse().ok()?, m.parse().ok()?))
    })
}

/// The floor of what a full offload certainly holds on the device: the
/// weights without the input embedding and the MoE experts, plus the KV the
/// child really allocates (none counted for a sliding-window model whose
/// mix is unknown).
pub fn full_offload_floor(weights: u64, token_embd: u64, experts: u64, kv_allocated: Option<u64>) -> u64 {
    weights.saturating_sub(token_embd).saturating_sub(experts) + kv_allocated.unwrap_or(0)
}

/// Slack under the floor before a missing layer counts.
pub const PLACEMENT_SLACK_BYTES: u64 = 64 * MIB;

/// The placement: the offloaded line decides when present; else the child's
/// device bytes against the floor (partial when more than one layer's worth,
/// net of 64 MiB, is missing); no signal at all is assumed full.
pub fn classify_placement(
    line: Option<(u32, u32)>,
    device_bytes: Option<u64>,
    floor: u64,
    layer_bytes: u64,
) -> (Offload, &'static str) {
    if let Some((n, m)) = line {
        return (
            if n >= m { Offload::Full } else { Offload::Partial },
            "the offloaded-layers line",
        );
    }
    match device_bytes {
        Some(b) if b + layer_bytes + PLACEMENT_SLACK_BYTES < floor => (Offload::Partial, "the device memory (NVML)"),
        Some(_) => (Offload::Full, "the device memory (NVML)"),
        None => (Offload::Full, "no signal (assumed full)"),
    }
}

/// The child's device bytes where only Dedicated and Shared Usage are known
/// (Windows): Dedicated plus the Shared above `healthy`, the amount a sound
/// child of its window holds there (the spec's "Dedicated + (Shared − the
/// healthy level)", so a spill at load does not read as a partial offload).
pub fn device_bytes_on_spill(dedicated: u64, shared: u64, healthy: u64) -> u64 {
    dedicated + shared.saturating_sub(healthy)
}

/// The post-load device check's limit: 1.1 x (KV + compute + CUDA context +
/// weights) + 256 MiB; above it, one WARNING.
pub fn device_check_limit(kv: u64, compute: u64, context: u64, weights: u64) -> u64 {
    ((kv + compute + context + weights) as f64 * 1.1) as u64 + 256 * MIB
}

/// The post-load device check: the child's memory on its GPU (NVML)
/// against what its window, compute, CUDA context and weights allow;
/// `None` within the limit or without a reading.
pub fn device_excess(facts: &ModelFacts, allocated: u32, fa: bool, device_bytes: Option<u64>) -> Option<Excess> {
    let held = device_bytes?;
    let tokens = allocated as u64;
    let kv = kv::kv_bytes_allocated(facts, tokens).unwrap_or(kv::kv_bytes_per_token(facts) * tokens);
    let compute = tokens * window::cuda_slope(fa, facts.head_count_max()) + window::COMPUTE_INTERCEPT_BYTES;
    let limit = device_check_limit(kv, compute, window::CUDA_CONTEXT_BYTES, facts.weights_bytes);
    (held > limit).then_some(Excess {
        held_bytes: held,
        limit_bytes: limit,
    })
}

/// Flash Attention after a load, as llama.cpp resolved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashAttention {
    /// Whether it runs: the last line llama.cpp logged about it (`Flash
    /// Attention enabled`, or `... not supported, set to disabled`; fit's
    /// probe pass logs one too), else, with no such line, the static proof.
    pub runs: bool,
    /// The window was sized on the Flash-Attention slope and llama.cpp
    /// disabled it (one WARNING).
    pub wrong_slope: bool,
}

/// Resolves Flash Attention from the static proof and the child's output.
pub fn flash_attention(proven: bool, tail: &[String]) -> FlashAttention {
    let said = tail
        .iter()
        .rev()
        .find(|l| l.contains("Flash Attention"))
        .map(|l| !l.contains("not supported"));
    let runs = said.unwrap_or(proven);
    FlashAttention {
        runs,
        wrong_slope: proven && !runs,
    }
}

/// The healthy Shared GPU memory of a child (Windows): its pinned host
/// buffers, 128 MiB plus 1 KiB per window token with Flash Attention, 2 KiB
/// without (derived from #661's measurements).
pub fn healthy_shared_bytes(window: u32, flash_attention: bool) -> u64 {
    128 * MIB + window as u64 * if flash_attention { 1024 } else { 2048 }
}

/// The child's spill baseline: its reading right after load, bounded by the
/// healthy level (the healthy level itself without a reading; never 0).
pub fn spill_baseline(reading_at_load: Option<u64>, healthy: u64) -> u64 {
    reading_at_load.map_or(healthy, |r| r.min(healthy)).max(1)
}

/// A reading right after load above the healthy level (said: the budget was
/// too large or the card crowded), `None` when healthy or unread.
pub fn spill_at_load_excess(reading_at_load: Option<u64>, healthy: u64) -> Option<u64> {
    reading_at_load.filter(|&r| r > healthy)
}

/// Spill tiers: the Shared Usage above the baseline.
pub const SPILL_WARNING_BYTES: u64 = 256 * MIB;
/// Critical spill.
pub const SPILL_CRITICAL_BYTES: u64 = 1024 * MIB;

/// The level a spill reading means.
pub fn spill_level(shared_bytes: u64, baseline: u64) -> Level {
    let spill = shared_bytes.saturating_sub(baseline);
    if spill >= SPILL_CRITICAL_BYTES {
        Level::Critical
    } else if spill >= SPILL_WARNING_BYTES {
        Level::Warning
    } else {
        Level::Calm
    }
}

/// Why a machine cannot run the CUDA engine, when it cannot (one notice,
/// then the CPU engine).
pub fn preflight(
    device_count: u32,
    driver_cuda: Option<(u32, u32)>,
    build_cuda: Option<(u32, u32)>,
    cuda_build_present: bool,
) -> Option<String> {
    if device_count == 0 {
        return Some("no NVIDIA device is visible (NVML reports none)".into());
    }
    if !cuda_build_present {
        return Some("no CUDA build of llama-server (run ./build-llama.sh cuda)".into());
    }
    match (driver_cuda, build_cuda) {
        (Some(d), Some(b)) if d < b => Some(format!(
            "the NVIDIA driver supports CUDA {}.{}, older than the CUDA {}.{} llama-server was built with: update the driver",
            d.0, d.1, b.0, b.1
        )),
        _ => None,
    }
}

#[cfg(test)]
#[path = "cuda_tests.rs"]
mod tests;
