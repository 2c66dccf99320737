//! The window law: how many tokens of context a child gets.
//!
//! - CPU (`cpu`): llama-server allocates and touches the KV of its whole
//!   window at load, so the window is what the child costs for its life:
//!   `budget = 0.75 × RAM − weights − 256 MiB`,
//!   `window = min(trained, budget / (KV per token + 1 KiB))`.
//! - CUDA (`cuda`): `ceiling = min(0.9 × total, free) − 1 GiB`,
//!   `budget = ceiling − weights − 256 MiB − 512 MiB`,
//!   `window = min(trained, budget / (KV per token + slope))`, the slope being
//!   1 KiB when Flash Attention is proven for the model, else the non-FA
//!   scores `n_ubatch × n_head_max × 4 B`.
//!
//! Both round down to 256 tokens, never go under the 4096 floor (a model
//! whose floor does not fit still loads at the floor: the catalog is never
//! gated on memory) and fold in the brake's cap. Two rules the spec leaves
//! implicit, decided here: the floor never lifts a window above the model's
//! trained window (a 2048-token model runs at 2048, not at a window it was
//! never trained for), and a model without a trained window is sized by
//! memory alone.
//!
//! Pure: RAM, VRAM and the facts come in as arguments.

use serde::Serialize;

use super::caps::{self, WINDOW_FLOOR_TOKENS};

/// One MiB.
pub const MIB: u64 = 1024 * 1024;
/// One GiB.
pub const GIB: u64 = 1024 * MIB;
/// The share of RAM the CPU budget may use: the rest is the OS, the app and
/// the page cache (the spec's 0.75; it does not subtract other processes).
pub const CPU_RAM_FRACTION: f64 = 0.75;
/// The compute buffer's intercept, budgeted for wide models (26 MiB measured
/// at embedding 1024, 64 MiB at 2048; 256 MiB covers wider ones).
pub const COMPUTE_INTERCEPT_BYTES: u64 = 256 * MIB;
/// The Flash-Attention compute buffer per window token: one f16 buffer of
/// n_ctx × n_ubatch (512) = 1 KiB per token, measured exactly on b10883.
pub const FA_COMPUTE_BYTES_PER_TOKEN: u64 = 1024;
/// The share of VRAM the CUDA sizing may use.
pub const CUDA_VRAM_FRACTION: f64 = 0.9;
/// Room for the CUDA pool, which grows during a generation.
pub const CUDA_FREE_MARGIN_BYTES: u64 = GIB;
/// The CUDA context's own memory.
pub const CUDA_CONTEXT_BYTES: u64 = 512 * MIB;
/// llama.cpp's default micro-batch, which sets the non-FA scores' size.
pub const N_UBATCH: u64 = 512;
/// K/V head sizes the b10883 CUDA Flash-Attention kernels accept (fattn.cu).
pub const FA_HEAD_SIZES: &[u32] = &[40, 64, 72, 80, 96, 112, 128, 256];

/// What a window decision is made from (the model's side).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelShape {
    /// KV bytes per token (full-attention formula).
    pub kv_per_token: u64,
    /// Weights on disk: every GGUF part plus the mmproj when loaded.
    pub weights_bytes: u64,
    /// The trained window, when the GGUF has one.
    pub trained: Option<u32>,
    /// The formula over-estimates the model's KV (a sliding window kept
    /// small, `kv::is_over_estimated`): sized by it, never memory-bound.
    pub sliding: bool,
    /// An MLA model: no `-c` at all.
    pub mla: bool,
}

/// The window chosen for a spawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Window {
    /// Sized by the law: pass `-c ctx`.
    Sized {
        /// The window.
        ctx: u32,
        /// Memory, not the trained window, bounds it (never for sliding models).
        memory_bound: bool,
        /// The budget the window was sized against (bytes, may be negative).
        budget_bytes: i64,
    },
    /// Pinned by the user (`WARDEN_CTX`): pass `-c ctx`, never resized.
    Pinned {
        /// The window.
        ctx: u32,
    },
    /// No `-c`: the model's shape is not modelled (MLA) or unknown.
    Unsized,
}

impl Window {
    /// The `-c` to pass, if any.
    pub fn ctx(self) -> Option<u32> {
        match self {
            Self::Sized { ctx, .. } | Self::Pinned { ctx } => Some(ctx),
            Self::Unsized => None,
        }
    }

    /// The memory bound this window reports, if any.
    pub fn memory_bound(self) -> Option<u32> {
        match self {
            Self::Sized {
                ctx,
                memory_bound: true,
                ..
            } => Some(ctx),
            _ => None,
        }
    }
}

/// Tokens `budget` holds at `per_token` bytes each, 0 when the budget is gone.
fn tokens_in(budget: i64, per_token: u64) -> u64 {
    if budget <= 0 || per_token == 0 {
        return if per_token == 0 && budget > 0 { u64::MAX } else { 0 };
    }
    budget as u64 / per_token
}

/// The shared tail of both laws: trained bound, grid, floor, cap.
fn fold(by_memory: u64, shape: &ModelShape, cap: Option<u32>, budget: i64) -> Window {
    let trained = shape.trained.map(u64::from);
    let raw = trained.map_or(by_memory, |t| t.min(by_memory));
    let memory_binds = trained.is_none_or(|t| by_memory < t);
    let mut ctx = caps::round_down(raw.min(u32::MAX as u64) as u32);
    if let Some(cap) = cap {
        ctx = ctx.min(cap);
    }
    ctx = ctx.max(WINDOW_FLOOR_TOKENS);
    if let Some(t) = shape.trained {
        ctx = ctx.min(t.max(1));
    }
    Window::Sized {
        ctx,
        memory_bound: memory_binds && !shape.sliding && trained.is_some(),
        budget_bytes: budget,
    }
}

/// The CPU engine's window for a model on a machine with `ram_bytes`.
pub fn cpu(shape: &ModelShape, ram_bytes: u64, cap: Option<u32>, pin: Option<u32>) -> Window {
    if let Some(ctx) = pin {
        return Window::Pinned { ctx };
    }
    if shape.mla {
        return Window::Unsized;
    }
    let budget = cpu_budget(ram_bytes, shape.weights_bytes);
    fold(
        tokens_in(budget, shape.kv_per_token + FA_COMPUTE_BYTES_PER_TOKEN),
        shape,
        cap,
        budget,
    )
}

/// `0.75 × RAM − weights − 256 MiB`, in bytes (negative when nothing fits).
pub fn cpu_budget(ram_bytes: u64, weights_bytes: u64) -> i64 {
    (ram_bytes as f64 * CPU_RAM_FRACTION) as i64 - weights_bytes as i64 - COMPUTE_INTERCEPT_BYTES as i64
}

/// What the CUDA law needs to know of the GPU at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vram {
    /// The device's total memory.
    pub total_bytes: u64,
    /// Its free memory now.
    pub free_bytes: u64,
}

/// Whether b10883's CUDA Flash Attention runs for this head shape.
pub fn fa_proven(key_length: u32, value_length: u32, alibi: bool) -> bool {
    key_length == value_length && FA_HEAD_SIZES.contains(&key_length) && !alibi
}

/// The CUDA compute slope per token: 1 KiB with FA, the non-FA scores without.
pub fn cuda_slope(fa: bool, n_head_max: u32) -> u64 {
    if fa {
        FA_COMPUTE_BYTES_PER_TOKEN
    } else {
        N_UBATCH * n_head_max as u64 * 4
    }
}

/// The CUDA engine's window for a full offload on one GPU.
pub fn cuda(shape: &ModelShape, vram: Vram, slope: u64, cap: Option<u32>, pin: Option<u32>) -> Window {
    if let Some(ctx) = pin {
        return Window::Pinned { ctx };
    }
    if shape.mla {
        return Window::Unsized;
    }
    let budget = cuda_budget(vram, shape.weights_bytes);
    fold(tokens_in(budget, shape.kv_per_token + slope), shape, cap, budget)
}

/// `min(0.9 × total, free) − 1 GiB − weights − 256 MiB − 512 MiB`.
pub fn cuda_budget(vram: Vram, weights_bytes: u64) -> i64 {
    let ceiling = ((vram.total_bytes as f64 * CUDA_VRAM_FRACTION) as i64).min(vram.free_bytes as i64)
        - CUDA_FREE_MARGIN_BYTES as i64;
    ceiling - weights_bytes as i64 - COMPUTE_INTERCEPT_BYTES as i64 - CUDA_CONTEXT_BYTES as i64
}

/// The child's predicted allocation when memory bounds the window: KV and
/// compute for the window plus one weights copy (the amber notice's figure).
pub fn footprint_bytes(shape: &ModelShape, window: u32) -> u64 {
    window as u64 * (shape.kv_per_token + FA_COMPUTE_BYTES_PER_TOKEN) + shape.weights_bytes
}

/// The measured intercept of the CPU child's anonymous memory.
pub const POSTLOAD_INTERCEPT_BYTES: u64 = 64 * MIB;
/// Tolerance of the post-load check (×1.1 plus 256 MiB).
pub const POSTLOAD_HEADROOM_BYTES: u64 = 256 * MIB;

/// The post-load check's limit: above it, llama-server allocated more than
/// the window budget predicted (one WARNING, never an action).
pub fn postload_limit_bytes(shape: &ModelShape, window: u32) -> u64 {
    let predicted = window as u64 * (shape.kv_per_token + FA_COMPUTE_BYTES_PER_TOKEN)
        + POSTLOAD_INTERCEPT_BYTES
        + shape.weights_bytes;
    (predicted as f64 * 1.1) as u64 + POSTLOAD_HEADROOM_BYTES
}

/// A child holding more memory than its window allows (a post-load
/// check's one WARNING; never an action).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Excess {
    /// What the child holds, bytes.
    pub held_bytes: u64,
    /// What its window allows, bytes.
    pub limit_bytes: u64,
}

/// The CPU post-load check: the child's anonymous memory against
/// `postload_limit_bytes`; `None` within it or without a reading.
pub fn postload_excess(shape: &ModelShape, window: u32, anon_bytes: Option<u64>) -> Option<Excess> {
    let held = anon_bytes?;
    let limit = postload_limit_bytes(shape, window);
    (held > limit).then_some(Excess {
        held_bytes: held,
        limit_bytes: limit,
    })
}

/// A pinned window (`WARDEN_CTX`, a model's `ctx`) beyond the model's
/// trained window: `Some((pin, trained))`, which the load warns of (the
/// child is given the pin, as asked: answers past the trained window are
/// the model's guess, and its KV costs the pin's memory). `None` for a
/// window the law sized (never above the trained one) or a model with no
/// trained window in its header.
pub fn pinned_beyond_trained(window: Window, trained: Option<u32>) -> Option<(u32, u32)> {
    match (window, trained) {
        (Window::Pinned { ctx }, Some(t)) if ctx > t => Some((ctx, t)),
        _ => None,
    }
}

/// The working window (MLX): `min(allocated, memory ceiling)`, the window a
/// conversation plans against (turn admission, the brake's facts). Either
/// side may be unknown: an unmeasured base leaves the allocated window, a
/// model without a trained window (and no bound applied) the ceiling.
pub fn working_window(allocated: Option<u32>, ceiling: Option<u32>) -> Option<u32> {
    match (allocated, ceiling) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}

/// The bound sent to an MLX child: `limit` never below the 4096 floor and
/// never above the trained window (`None`: a model whose `config.json`
/// names none, bounded by the floor alone).
pub fn kv_bound(trained: Option<u32>, limit: u32) -> u32 {
    limit.max(WINDOW_FLOOR_TOKENS).min(trained.unwrap_or(u32::MAX))
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;

/// The law's view of a model, from its facts and the projector it loads with.
pub fn shape_of(facts: &crate::gguf::ModelFacts, mmproj_bytes: u64) -> ModelShape {
    ModelShape {
        kv_per_token: super::kv::kv_bytes_per_token(facts),
        weights_bytes: facts.weights_bytes + mmproj_bytes,
        trained: facts.trained_window.map(|t| t.min(u32::MAX as u64) as u32),
        sliding: super::kv::is_over_estimated(facts),
        mla: super::kv::is_mla(facts),
    }
}
