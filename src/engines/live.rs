//! What an engine sees of a live child and what it keeps about it.
//!
//! `ChildView` is the read-only face of a child the actor lends an engine's
//! hook for one call: its pid, plan, allocated window, client and output.
//! The engine never holds the child itself: the actor alone spawns,
//! respawns, retires and unloads it (`actors::engine`).
//!
//! `ChildState` is the engine's own per-child state, one type per engine in
//! its home. The core holds it whole beside the child and asks it only
//! engine-neutral questions (is the brake off for this child, what bound
//! does it enforce, what did a turn leave in its cache); each engine's code
//! reaches its own part.

use std::sync::Arc;

use crate::child::client::ChildClient;
use crate::child::output::OutputLog;
use crate::engines::SpawnPlan;
use crate::engines::cpu::CpuChild;
use crate::engines::cpu::rpc::Given;
use crate::engines::cuda::CudaChild;
use crate::engines::mlx::MlxChild;
use std::time::Duration;

pub use crate::engines::mlx::live::Acted;
use crate::config::WardenConfig;
use crate::law::brake::{Point, Readings};
use crate::law::mlx::MlxAction;
use crate::law::prefix::ChildCache;
use crate::law::cuda::Offload;
use crate::law::types::EngineKind;

/// A live child as an engine's hook sees it, lent for one call.
#[derive(Debug, Clone, Copy)]
pub struct ChildView<'a> {
    /// The process id.
    pub pid: u32,
    /// How it was planned (model, facts, window).
    pub plan: &'a SpawnPlan,
    /// The allocated window, when known.
    pub allocated: Option<u32>,
    /// The HTTP client to it (holds its key; never logged).
    pub client: &'a ChildClient,
    /// Its captured output.
    pub output: &'a Arc<OutputLog>,
}

impl ChildView<'_> {
    /// The model id.
    pub fn model_id(&self) -> &str {
        &self.plan.entry.id
    }
}

/// A live child's engine state.
#[derive(Debug)]
pub enum ChildState {
    /// CPU llama-server.
    Cpu(CpuChild),
    /// CUDA llama-server.
    Cuda(CudaChild),
    /// mlx_vlm.server.
    Mlx(MlxChild),
}

impl ChildState {
    /// A new child's state on `kind`'s engine (before its after-load hook
    /// fills it in).
    pub fn new(kind: EngineKind) -> Self {
        match kind {
            EngineKind::Cpu => Self::Cpu(CpuChild::default()),
            EngineKind::Cuda => Self::Cuda(CudaChild::default()),
            EngineKind::Mlx => Self::Mlx(MlxChild::default()),
        }
    }

    /// The CUDA engine's part.
    pub fn cuda(&self) -> Option<&CudaChild> {
        match self {
            Self::Cuda(c) => Some(c),
            _ => None,
        }
    }

    /// The MLX engine's part.
    pub fn mlx(&self) -> Option<&MlxChild> {
        match self {
            Self::Mlx(c) => Some(c),
            _ => None,
        }
    }

    /// Why the brake never samples this child (CUDA: partial, unsized).
    pub fn brake_off(&self) -> Option<&str> {
        self.cuda().and_then(|c| c.brake_off.as_deref())
    }

    /// The window bound the child itself enforces (MLX), when memory bounds it.
    pub fn memory_bound(&self) -> Option<u32> {
        self.mlx().and_then(|m| m.memory_bound)
    }

    /// The child's footprint right after its load (MLX).
    pub fn base_bytes(&self) -> Option<u64> {
        self.mlx().and_then(|m| m.base_bytes)
    }

    /// What fit did with the layers (CUDA).
    pub fn offload(&self) -> Option<Offload> {
        self.cuda().and_then(|c| c.offload)
    }

    /// Over RPC workers: what each device was given (CPU).
    pub fn given(&self) -> &[Given] {
        match self {
            Self::Cpu(c) => &c.given,
            _ => &[],
        }
    }

    /// A turn's request is about to go to the child: its size, estimated
    /// (body bytes / 4 plus its own bound), kept as the in-flight estimate.
    pub fn note_request(&mut self, tokens: u32) {
        if let Self::Mlx(m) = self {
            m.in_flight_tokens = tokens;
        }
    }

    /// What a generating turn left in the child: on MLX, a conversation's
    /// KV in the prefix cache, whether its request may still be in the
    /// batch (abandoned) or has proved the batch empty (completed), and the
    /// request's size for the brake's useful-shrink test: `measured`, the
    /// tokens the child counted (`timings`), else the in-flight estimate
    /// (an abandoned, failed or uncounted turn). The llama.cpp engines keep
    /// nothing here (their slot is `kv`'s).
    pub fn after_turn(&mut self, abandoned: bool, completed: bool, measured: Option<u32>) {
        if let Self::Mlx(m) = self {
            m.last_request_tokens = measured.unwrap_or(m.in_flight_tokens);
            m.cache.fresh = false;
            if abandoned {
                m.cache.abandoned = true;
            } else if completed {
                m.cache.abandoned = false;
            }
        }
    }

    /// A sample's reading from the child's own gauge (CUDA's spill, whose
    /// healthy amount is `healthy`); `None` when the gauge gave nothing this
    /// time (said once per episode) or the engine has no gauge of its own.
    pub fn read_own_gauge(&mut self, pid: u32, healthy: u64) -> Option<Readings> {
        match self {
            Self::Cuda(c) => c.read_spill(pid, healthy),
            _ => None,
        }
    }

    /// Carries out inside the child what the MLX law decided (a release, a
    /// shrink or a growth through the bound); `None` when nothing was done
    /// there (no action, an unload, which is the actor's, or an engine
    /// whose brake acts by respawning).
    pub async fn act_in_child(
        &mut self,
        child: ChildView<'_>,
        action: MlxAction,
        point: Point,
        cfg: &WardenConfig,
    ) -> Option<Acted> {
        match self {
            Self::Mlx(m) => m.act(child, action, point, cfg).await,
            _ => None,
        }
    }

    /// What the child's prefix cache holds (MLX), `None` on an engine
    /// without one.
    pub fn prefix_cache(&self) -> Option<ChildCache> {
        self.mlx().map(|m| m.cache)
    }

    /// Resets the child's prefix cache (a barrier request first when
    /// `barrier`); an error on an engine without one.
    pub async fn reset_prefix_cache(&mut self, child: ChildView<'_>, barrier: bool, timeout: Duration) -> Result<(), String> {
        match self {
            Self::Mlx(m) => m.reset_cache(child, barrier, timeout).await,
            _ => Err("reset: no prefix cache".into()),
        }
    }

    /// The footprint the child holds at the window `bound`, bytes: the
    /// header's law over the plan's shape (llama.cpp), else the base
    /// footprint measured at load plus the KV per token (MLX).
    pub fn footprint_at(&self, plan: &SpawnPlan, bound: u32) -> Option<u64> {
        match (plan.shape, plan.mlx(), self.base_bytes()) {
            (Some(s), _, _) => Some(crate::law::window::footprint_bytes(&s, bound)),
            (None, Some(m), Some(base)) => Some(base + u64::from(bound) * m.kv_per_token),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The brake's request size: measured when the child counted the turn,
    /// else the estimate sent with it; each turn replaces the last.
    #[test]
    fn a_turns_size_is_measured_else_its_in_flight_estimate() {
        let mut s = ChildState::new(EngineKind::Mlx);
        let size = |s: &ChildState| s.mlx().unwrap().last_request_tokens;
        // (estimate at send, abandoned, completed, measured, size after, why)
        let rows = [
            (900, false, true, Some(1200), 1200), // why: counted by the child: its count
            (700, true, false, None, 700),        // why: abandoned, uncounted: the estimate
            (500, false, false, None, 500),       // why: failed: the estimate
            (800, false, true, None, 800),        // why: completed without timings: the estimate
            (300, false, true, Some(40), 40),     // why: a measured size replaces a larger estimate
        ];
        for (i, (sent, abandoned, completed, measured, want)) in rows.into_iter().enumerate() {
            s.note_request(sent);
            s.after_turn(abandoned, completed, measured);
            assert_eq!(size(&s), want, "row {i}");
        }
        // why: the llama.cpp engines keep no size (nothing panics either)
        let mut cpu = ChildState::new(EngineKind::Cpu);
        cpu.note_request(10);
        cpu.after_turn(false, true, Some(10));
        assert!(cpu.mlx().is_none());
    }
}
