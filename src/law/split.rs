//! The window law over several devices: the local machine plus the devices
//! of llama.cpp RPC workers (`--rpc`). It chooses the window and how many
//! layers each device runs so that on every device
//!
//! `weights share + KV share + compute ≤ limit`
//!
//! - limit: the device's own rule: `0.75 × RAM` for host memory (the local
//!   CPU rule, over the worker's cgroup-bounded RAM), and the CUDA ceiling
//!   `min(0.9 × total, free) − 1 GiB − 512 MiB` for a GPU;
//! - weights share: its layers × one layer's weights, plus the input layer
//!   (`token_embd`, which llama.cpp always keeps on the local CPU) and the
//!   output layer on the device that runs it;
//! - KV share: its layers × the window × one layer's KV per token (llama.cpp
//!   keeps a layer's KV on the layer's device);
//! - compute: 256 MiB plus 1 KiB per window token (the CPU rule's
//!   intercept and Flash-Attention slope), on every device.
//!
//! How llama.cpp places layers, read in b10883's `llama-model.cpp`: the
//! first `n_layer + 1 − ngl` layers stay on the CPU, the rest (the output
//! layer last) go to the devices of `model->devices`, RPC devices first in
//! `--rpc` order, by the cumulative `--tensor-split` fractions. So the local
//! share is set by `-ngl` and each worker device's by its split value, and
//! the output layer always lands on the last device that gets any layer.
//!
//! Rules decided here, where the issue is silent:
//! - Every reachable worker is used: a user who names workers asked for the
//!   split. Layers go to the devices in proportion to how many each could
//!   hold at the chosen window, so every device keeps the same share of
//!   headroom (llama.cpp's own default splits by free memory the same way).
//! - The output layer goes to the last worker that can hold it; a worker
//!   after it gets nothing and is left out of `--rpc`.
//! - The local device's weights count only its own layers and the input
//!   layer: the layers llama.cpp copies to a worker are read once from the
//!   mapped file and become reclaimable page cache here.
//! - A tied model (no `output.weight`) costs nothing for its output layer
//!   on the CPU (it reuses `token_embd`), and a copy of `token_embd` on the
//!   worker that runs it (measured: 28.7 MiB on SmolLM2's last worker).
//! - Unlike the one-machine law, a plan whose floor does not fit says so
//!   (`fits: false`): with workers, the caller refuses it with an error
//!   rather than load a model the devices cannot hold.
//!
//! Pure: every device's limit comes in as an argument.

use serde::Serialize;

use super::caps::{self, WINDOW_FLOOR_TOKENS};
use super::window::{COMPUTE_INTERCEPT_BYTES, FA_COMPUTE_BYTES_PER_TOKEN, Window};
use crate::gguf::ModelFacts;

/// The largest window the search considers for a model without a trained
/// window (tokens).
const MAX_SEARCH_TOKENS: u32 = 1 << 20;

/// What one layer of a model costs, from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LayerCosts {
    /// Repeating layers (`block_count`).
    pub layers: u32,
    /// Weights of one repeating layer (the rest of the file over the layers).
    pub layer_bytes: u64,
    /// The input layer (`token_embd.weight`), always on the local CPU.
    pub input_bytes: u64,
    /// The output layer on a worker: `output.weight`, or for a tied model the
    /// copy of `token_embd.weight` made there.
    pub output_remote_bytes: u64,
    /// The output layer on the local CPU (0 for a tied model).
    pub output_local_bytes: u64,
    /// KV bytes per window token of one layer.
    pub kv_per_token_layer: u64,
}

/// The per-layer costs of a model. `kv_per_token` is the whole model's.
pub fn layer_costs(facts: &ModelFacts, kv_per_token: u64) -> LayerCosts {
    let layers = facts.block_count.max(1);
    let output_remote_bytes = if facts.output_bytes > 0 {
        facts.output_bytes
    } else {
        facts.token_embd_bytes
    };
    let repeating = facts
        .weights_bytes
        .saturating_sub(facts.token_embd_bytes)
        .saturating_sub(facts.output_bytes);
    LayerCosts {
        layers,
        layer_bytes: repeating / layers as u64,
        input_bytes: facts.token_embd_bytes,
        output_remote_bytes,
        output_local_bytes: facts.output_bytes,
        kv_per_token_layer: kv_per_token / layers as u64,
    }
}

/// One device the law may place layers on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Device {
    /// Its name in logs and status (`local`, `10.0.0.2:50053/CPU`).
    pub name: String,
    /// What its rule lets the model use (bytes).
    pub limit_bytes: i64,
}

/// `0.75 × RAM`: a host-memory device's limit (the CPU rule's share).
pub fn ram_limit(total_bytes: u64) -> i64 {
    (total_bytes as f64 * super::window::CPU_RAM_FRACTION) as i64
}

/// A GPU's limit: the CUDA ceiling less the CUDA context.
pub fn vram_limit(total_bytes: u64, free_bytes: u64) -> i64 {
    let ceiling = ((total_bytes as f64 * super::window::CUDA_VRAM_FRACTION) as i64).min(free_bytes as i64)
        - super::window::CUDA_FREE_MARGIN_BYTES as i64;
    ceiling - super::window::CUDA_CONTEXT_BYTES as i64
}

/// What one device was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Share {
    /// The device.
    pub name: String,
    /// Repeating layers it runs.
    pub layers: u32,
    /// Whether it runs the output layer.
    pub output: bool,
    /// Its weights (bytes).
    pub weights_bytes: u64,
    /// Its KV cache at the window (bytes).
    pub kv_bytes: u64,
    /// Its compute buffer, budgeted (bytes).
    pub compute_bytes: u64,
    /// Its limit (bytes).
    pub limit_bytes: i64,
}

impl Share {
    /// What the device is planned to hold.
    pub fn total_bytes(&self) -> u64 {
        self.weights_bytes + self.kv_bytes + self.compute_bytes
    }
}

/// The plan over several devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SplitPlan {
    /// The window.
    pub window: Window,
    /// One share per device, in the order given (the local device first).
    pub shares: Vec<Share>,
    /// Whether every device's share fits its limit.
    pub fits: bool,
}

impl SplitPlan {
    /// llama-server's `-ngl`: every layer not on the local CPU, the output
    /// layer included.
    pub fn gpu_layers(&self) -> u32 {
        self.shares.iter().skip(1).map(|s| s.layers + u32::from(s.output)).sum()
    }
}

/// The window and the layer split for `devices` (`devices[0]` is the local
/// machine). `trained`: the model's window; `cap`: the brake's; `pin`: the
/// user's `WARDEN_CTX`. A model whose shape the law cannot size (`sized:
/// false`, MLA) is split at a zero window and runs `Unsized`.
pub fn split(
    c: &LayerCosts,
    trained: Option<u32>,
    devices: &[Device],
    cap: Option<u32>,
    pin: Option<u32>,
    sized: bool,
) -> SplitPlan {
    if devices.is_empty() {
        return SplitPlan {
            window: Window::Unsized,
            shares: Vec::new(),
            fits: false,
        };
    }
    if !sized {
        return finish(c, devices, 0, Window::Unsized);
    }
    if let Some(ctx) = pin {
        return finish(c, devices, ctx, Window::Pinned { ctx });
    }
    let floor = trained.map_or(WINDOW_FLOOR_TOKENS, |t| t.clamp(1, WINDOW_FLOOR_TOKENS));
    let mut top = trained.unwrap_or(MAX_SEARCH_TOKENS);
    if let Some(cap) = cap {
        top = top.min(cap);
    }
    let top = caps::round_down(top).max(floor);
    // Feasibility falls as the window grows: search the 256-token grid.
    let (mut lo, mut hi) = (0u32, (top - floor) / caps::WINDOW_GRID_TOKENS);
    if layout(c, devices, floor).is_none() {
        return finish(c, devices, floor, sized_window(floor, trained, 0));
    }
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if layout(c, devices, floor + mid * caps::WINDOW_GRID_TOKENS).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let ctx = floor + lo * caps::WINDOW_GRID_TOKENS;
    let total: i64 = devices.iter().map(|d| d.limit_bytes).sum();
    finish(c, devices, ctx, sized_window(ctx, trained, total))
}

fn sized_window(ctx: u32, trained: Option<u32>, limit: i64) -> Window {
    Window::Sized {
        ctx,
        memory_bound: trained.is_some_and(|t| ctx < t),
        budget_bytes: limit,
    }
}

/// The shares at `ctx` under `window`: the fitting layout, else a best
/// effort in proportion to the devices' limits (`fits: false`).
fn finish(c: &LayerCosts, devices: &[Device], ctx: u32, window: Window) -> SplitPlan {
    let (layers, fits) = match layout(c, devices, ctx) {
        Some(l) => (l, true),
        None => (fallback(c, devices), false),
    };
    let shares = devices
        .iter()
        .zip(&layers)
        .enumerate()
        .map(|(i, (d, &(n, output)))| share(c, d, i == 0, n, output, ctx))
        .collect();
    SplitPlan { window, shares, fits }
}

fn share(c: &LayerCosts, d: &Device, local: bool, layers: u32, output: bool, ctx: u32) -> Share {
    let mut weights = layers as u64 * c.layer_bytes;
    if local {
        weights += c.input_bytes;
    }
    if output {
        weights += if local {
            c.output_local_bytes
        } else {
            c.output_remote_bytes
        };
    }
    Share {
        name: d.name.clone(),
        layers,
        output,
        weights_bytes: weights,
        kv_bytes: layers as u64 * ctx as u64 * c.kv_per_token_layer,
        // A worker device given nothing holds no buffer (a worker with no
        // layers at all is left out of `--rpc`).
        compute_bytes: if local || layers > 0 || output {
            compute_bytes(ctx)
        } else {
            0
        },
        limit_bytes: d.limit_bytes,
    }
}

/// A device's compute budget at `ctx`.
pub fn compute_bytes(ctx: u32) -> u64 {
    COMPUTE_INTERCEPT_BYTES + ctx as u64 * FA_COMPUTE_BYTES_PER_TOKEN
}

/// Layers each device holds at most at `ctx` with `fixed` bytes of its own.
fn capacity(c: &LayerCosts, limit: i64, fixed: u64, ctx: u32) -> Option<u32> {
    let room = limit - compute_bytes(ctx) as i64 - fixed as i64;
    if room < 0 {
        return None;
    }
    let per_layer = c.layer_bytes + ctx as u64 * c.kv_per_token_layer;
    Some(
        (room as u64)
            .checked_div(per_layer)
            .map_or(c.layers, |n| n.min(c.layers as u64) as u32),
    )
}

/// `(layers, runs the output)` per device when every share fits at `ctx`.
fn layout(c: &LayerCosts, devices: &[Device], ctx: u32) -> Option<Vec<(u32, bool)>> {
    let local = capacity(c, devices[0].limit_bytes, c.input_bytes, ctx)?;
    for holder in (1..devices.len()).rev() {
        let Some(held) = capacity(c, devices[holder].limit_bytes, c.output_remote_bytes, ctx) else {
            continue;
        };
        let mut caps = vec![local];
        caps.extend((1..holder).map(|i| capacity(c, devices[i].limit_bytes, 0, ctx).unwrap_or(0)));
        caps.push(held);
        if caps.iter().map(|&n| n as u64).sum::<u64>() < c.layers as u64 {
            continue;
        }
        let mut out: Vec<(u32, bool)> = proportional(c.layers, &caps).into_iter().map(|n| (n, false)).collect();
        out[holder].1 = true;
        out.resize(devices.len(), (0, false));
        return Some(out);
    }
    let alone = capacity(c, devices[0].limit_bytes, c.input_bytes + c.output_local_bytes, ctx)?;
    (alone >= c.layers).then(|| {
        let mut out = vec![(0, false); devices.len()];
        out[0] = (c.layers, true);
        out
    })
}

/// A layout that does not fit: layers in proportion to the positive limits,
/// the output on the last device (what the log and the error show).
fn fallback(c: &LayerCosts, devices: &[Device]) -> Vec<(u32, bool)> {
    let weights: Vec<u32> = devices
        .iter()
        .map(|d| (d.limit_bytes.max(0) >> 20).min(u32::MAX as i64) as u32)
        .collect();
    let weights = if weights.iter().all(|&w| w == 0) {
        vec![1; devices.len()]
    } else {
        weights
    };
    let mut out: Vec<(u32, bool)> = proportional_to(c.layers, &weights)
        .into_iter()
        .map(|n| (n, false))
        .collect();
    let last = out.len() - 1;
    out[last].1 = true;
    out
}

/// `n` split over `caps` in proportion to them, never above one (`Σ caps ≥ n`).
fn proportional(n: u32, caps: &[u32]) -> Vec<u32> {
    let shares = proportional_to(n, caps);
    debug_assert!(shares.iter().zip(caps).all(|(s, c)| s <= c));
    shares
}

/// `n` split in proportion to `weights` by the largest remainder.
fn proportional_to(n: u32, weights: &[u32]) -> Vec<u32> {
    let sum: u64 = weights.iter().map(|&w| w as u64).sum();
    if sum == 0 {
        let mut v = vec![0; weights.len()];
        v[0] = n;
        return v;
    }
    let exact: Vec<(u64, u64)> = weights
        .iter()
        .map(|&w| (n as u64 * w as u64 / sum, n as u64 * w as u64 % sum))
        .collect();
    let mut out: Vec<u32> = exact.iter().map(|&(q, _)| q as u32).collect();
    let mut left = n - out.iter().sum::<u32>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // Largest remainder first; ties to the earlier device (the local one).
    order.sort_by(|&a, &b| exact[b].1.cmp(&exact[a].1).then(a.cmp(&b)));
    // Within the weights while they have room (a capacity is a bound), then
    // past them (a fallback's weights are only proportions).
    for bounded in [true, false] {
        while left > 0 {
            let before = left;
            for &i in &order {
                if left > 0 && (!bounded || out[i] < weights[i]) {
                    out[i] += 1;
                    left -= 1;
                }
            }
            if left == before {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
