//! The one plan of a spawn: the window and, on the CUDA engine, the
//! placement, from what the shell read (`Readings`), the model's header
//! facts, the memory brake's cap and the user's pin (`WARDEN_CTX`). A load
//! (`engines::Backend::plan`), `llm-warden inspect` and `GET /v1/models` all
//! call `plan`, so what they show is what a load does; the reading shell is
//! `engines::plan`.
//!
//! | engine | window | placement |
//! |---|---|---|
//! | CPU | `window::cpu` over the RAM total (a sliding model: the full or the small sliding cache, `sliding_cpu`) | - |
//! | CUDA | `window::cuda` over the GPU `cuda::place` picks, on the FA or non-FA slope | `cuda::place` |
//! | MLX | none at spawn: memory bounds it after the load (`law::mlx`) | - |
//!
//! A header that could not be read leaves the window to the child (no `-c`)
//! unless the user pinned one. A brake respawn on the CUDA engine never
//! plans again: `cuda_respawn_window` folds the cap into the live child's
//! static window (the spec: no new free-VRAM reading).

use super::caps;
use super::kv::{self, SwaCache};
use super::residents;
use super::cuda::{self, CudaPlacement, CudaSpawn, GpuDevice};
use super::types::RamTotal;
use super::window::{self, ModelShape, Vram, Window};
use crate::gguf::ModelFacts;

/// What the shell read for one plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readings {
    /// The RAM total (the CPU window is sized on it; every engine records it).
    pub ram: RamTotal,
    /// The vision projector's file, bytes (0 without one): it loads beside
    /// the weights.
    pub mmproj_bytes: u64,
    /// What the other residents that stay hold, bytes (weights, allocated
    /// KV and compute; 0 alone): the window is sized beside them
    /// (`residents::shape_beside`, `residents::vram_beside`), while the
    /// plan's `shape` stays the model's own.
    pub beside_bytes: u64,
    /// The slots the child will run over one KV pool (`law::slots`): a
    /// small sliding cache holds a window for each.
    pub slots: u32,
    /// The engine's own readings, which also say which law plans.
    pub engine: EngineReadings,
}

/// Which engine plans, with what it alone reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineReadings {
    /// llama-server on the CPU: the RAM total is all it needs.
    Cpu,
    /// llama-server on one NVIDIA GPU.
    Cuda(GpuReadings),
    /// mlx_vlm.server: nothing is sized at spawn.
    Mlx,
}

/// The CUDA engine's readings at a load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuReadings {
    /// NVML's devices now (free memory read fresh), or why NVML answered nothing.
    pub devices: Result<Vec<GpuDevice>, String>,
    /// The user's `CUDA_VISIBLE_DEVICES`.
    pub user_visible: Option<String>,
    /// `WARDEN_VRAM_OVERRIDE_GB`, standing in for the free memory.
    pub vram_override_bytes: Option<u64>,
}

/// What `plan` decides.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The law's view of the model, when its header was read.
    pub shape: Option<ModelShape>,
    pub window: Window,
    /// The budget the engine's law sizes against (bytes, negative when
    /// nothing fits), also when a pin or MLA set the window; `None` where
    /// nothing was sized on memory (no header, no GPU to size on, MLX).
    pub budget_bytes: Option<i64>,
    /// The CUDA engine's placement and static window.
    pub cuda: Option<CudaSpawn>,
    /// How a sliding model's child keeps its sliding layers (`Full` for
    /// every other model): see `sliding_cpu`.
    pub swa: SwaCache,
}

/// The plan of a load (a brake respawn on the CPU engine plans again with
/// its cap; on CUDA see `cuda_respawn_window`).
pub fn plan(facts: Option<&ModelFacts>, readings: &Readings, cap: Option<u32>, pin: Option<u32>) -> Plan {
    let shape = facts.map(|f| window::shape_of(f, readings.mmproj_bytes));
    match &readings.engine {
        EngineReadings::Cpu => {
            let sized = shape.map(|s| residents::shape_beside(&s, readings.beside_bytes));
            let full = Plan {
                shape,
                window: sized.map_or(pin_or_none(pin), |s| window::cpu(&s, readings.ram.bytes, cap, pin)),
                budget_bytes: sized.map(|s| window::cpu_budget(readings.ram.bytes, s.weights_bytes)),
                cuda: None,
                swa: SwaCache::Full,
            };
            match facts.and_then(kv::sliding_kv).filter(|_| facts.is_some_and(super::kv_keep::swa_full)) {
                Some(small) => sliding_cpu(full, small, readings, cap, pin),
                None => full,
            }
        }
        EngineReadings::Cuda(gpus) => cuda_plan(facts, shape, gpus, cap, pin, readings.beside_bytes),
        // The bound needs the child's measured base footprint.
        EngineReadings::Mlx => Plan {
            shape,
            window: Window::Unsized,
            budget_bytes: None,
            cuda: None,
            swa: SwaCache::Full,
        },
    }
}

/// A sliding model on the CPU, decided by memory: the full-size sliding
/// cache (`--swa-full`, its conversations kept across unloads) where it
/// costs no window, i.e. the full formula's window is not memory-bound;
/// otherwise the small cache (`kv::SlidingKv`: the full layers grow with
/// the window, the sliding ones hold their `swa_cells`), sized on its own
/// exact formula, when that gives a larger window. A pinned window is the
/// user's: it keeps the full cache. The plan's shape is then the small
/// cache's (its footprint is what the child holds).
fn sliding_cpu(full: Plan, small: kv::SlidingKv, readings: &Readings, cap: Option<u32>, pin: Option<u32>) -> Plan {
    let (Some(shape), true) = (full.shape, full.window.memory_bound().is_some()) else {
        return full;
    };
    if pin.is_some() {
        return full;
    }
    let own = ModelShape {
        kv_per_token: small.full_per_token,
        weights_bytes: shape.weights_bytes + small.fixed_bytes(u64::from(readings.slots)),
        sliding: false,
        ..shape
    };
    let sized = residents::shape_beside(&own, readings.beside_bytes);
    let window = window::cpu(&sized, readings.ram.bytes, cap, pin);
    if window.ctx() <= full.window.ctx() {
        return full;
    }
    Plan {
        shape: Some(own),
        window,
        budget_bytes: Some(window::cpu_budget(readings.ram.bytes, sized.weights_bytes)),
        cuda: None,
        swa: SwaCache::Window,
    }
}

/// The CUDA engine's plan: the matrix's placement, then the window on its
/// GPU at the slope the header proves (no GPU to size on: fit sizes it).
fn cuda_plan(
    facts: Option<&ModelFacts>,
    shape: Option<ModelShape>,
    gpus: &GpuReadings,
    cap: Option<u32>,
    pin: Option<u32>,
    beside: u64,
) -> Plan {
    let placement = match &gpus.devices {
        Ok(devices) => cuda::place(devices, gpus.user_visible.as_deref()),
        Err(_) => CudaPlacement::Unsized,
    };
    let fa = facts
        .is_some_and(|f| window::fa_proven(f.key_length, f.value_length, f.max_alibi_bias.is_some_and(|b| b > 0.0)));
    let slope = window::cuda_slope(fa, facts.map_or(0, |f| f.head_count_max()));
    let sized_on: Option<(Vram, ModelShape)> = match &placement {
        CudaPlacement::Sized { device, .. } => {
            shape.map(|s| {
                let vram = cuda::vram_for_sizing(device, gpus.vram_override_bytes);
                (residents::vram_beside(vram, beside), residents::shape_beside(&s, beside))
            })
        }
        _ => None,
    };
    let window_at = |cap| match &sized_on {
        Some((vram, s)) => window::cuda(s, *vram, slope, cap, pin),
        None => pin_or_none(pin),
    };
    // The CUDA engine keeps the full-size sliding cache: its placement
    // (`cuda::place`, fit's probe) is measured and tested with it, and no
    // GPU was at hand to measure the small one against.
    Plan {
        swa: SwaCache::Full,
        shape,
        window: window_at(cap),
        budget_bytes: sized_on.map(|(vram, s)| window::cuda_budget(vram, s.weights_bytes)),
        cuda: Some(CudaSpawn {
            static_window: window_at(None).ctx(),
            placement,
            flash_attention: fa,
            all_layers: false,
        }),
    }
}

/// No window the law sized: the user's pin, else none (no `-c`).
fn pin_or_none(pin: Option<u32>) -> Window {
    pin.map_or(Window::Unsized, |ctx| Window::Pinned { ctx })
}

/// A CUDA brake respawn's window: the static window the load sized, folded
/// with the cap on the grid; `None` (the window stays as it was) when the
/// user pinned it or the load did not size it.
pub fn cuda_respawn_window(static_window: Option<u32>, cap: u32, pin: Option<u32>) -> Option<Window> {
    match (static_window, pin) {
        (Some(st), None) => Some(Window::Sized {
            ctx: caps::cap(st.min(cap)),
            memory_bound: false,
            budget_bytes: 0,
        }),
        _ => None,
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
