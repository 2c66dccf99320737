//! The MLX engine's hooks over its child: the memory bound applied right
//! after a load, the MLX brake's sample plan, and the brake's actions that
//! stay inside the child (release, and shrink/grow through the bound; the
//! unload is the actor's). The prefix cache's resets are in `prefix`.
//!
//! Every failure here is one record (a WARNING naming the HTTP status or the
//! error's kind, never the key or a body) and never fails a load or a turn.

use std::time::Duration;

use tokio::time::Instant;

use super::{BoundAnswer, MlxChild};
use crate::config::WardenConfig;
use crate::engines::hooks::BrakeInput;
use crate::engines::live::ChildView;
use crate::law::brake::Point;
use crate::law::caps::WINDOW_FLOOR_TOKENS;
use crate::law::mlx::{self as mlx_law, MemoryBudget, MlxAction, MlxFacts};
use crate::sensors::footprint;

/// How long a release's footprint is watched at idle (the lowest reading
/// counts: the kernel reports the freed memory a moment after the clear).
const RELEASE_SETTLE: Duration = Duration::from_secs(2);

/// Right after an MLX child is ready: measure its base footprint, compute
/// the memory ceiling, and send `kv_bound(trained, min(ceiling, cap))`.
/// The engine's state of the child, and the window it enforces now when
/// the bound changed it.
pub(crate) async fn state_at_load(child: ChildView<'_>) -> (MlxChild, Option<u32>) {
    let mut state = MlxChild::default();
    let allocated = measure_and_bound(child, child.plan.cap, &mut state).await;
    (state, allocated)
}

async fn measure_and_bound(child: ChildView<'_>, cap: Option<u32>, state: &mut MlxChild) -> Option<u32> {
    let (Some(facts), Some(ram)) = (child.plan.mlx(), child.plan.ram) else {
        return None;
    };
    let Some(base) = footprint::anon_bytes(child.pid) else {
        tracing::info!("[MLX_Engine] the child's base footprint is unreadable; no memory bound");
        return None;
    };
    state.base_bytes = Some(base);
    let ceiling = mlx_law::tokens_at_ceiling(MemoryBudget {
        base_bytes: base,
        working_set: working_set(ram.bytes),
        kv_per_token: facts.kv_per_token,
    });
    state.ceiling = Some(ceiling);
    if let Some(t) = facts.trained.filter(|&t| t <= WINDOW_FLOOR_TOKENS) {
        // The child enforces it since its spawn; recorded all the same.
        state.memory_bound = Some(t);
        return None;
    }
    let bound = mlx_law::memory_bound(facts.trained, ceiling, cap)?;
    let cap_note = cap.map_or(String::new(), |c| format!(", brake_cap={c}"));
    let trained = facts.trained.map_or_else(|| "unknown".to_string(), |t| t.to_string());
    match super::apply_bound(child.client, bound).await {
        Ok(BoundAnswer::Applied(b)) => {
            tracing::info!(
                "[MLX_Engine] Window bounded by memory: trained={trained}, ceiling={ceiling}, bound={b}{cap_note}"
            );
            state.memory_bound = Some(b);
            Some(b)
        }
        Ok(BoundAnswer::Enforces(n)) if n == bound => {
            tracing::warn!(
                "[MLX_Engine] the memory bound's answer was lost; the child's settings show it applied: trained={trained}, ceiling={ceiling}, bound={n}{cap_note}"
            );
            state.memory_bound = Some(n);
            Some(n)
        }
        Ok(BoundAnswer::Enforces(n)) => {
            tracing::warn!("[MLX_Engine] the child did not apply the memory bound {bound}; it enforces {n}");
            Some(n)
        }
        Err(why) => {
            tracing::warn!("[MLX_Engine] could not apply the memory bound {bound} ({why})");
            None
        }
    }
}

/// Where the MLX budget comes from here: Metal's recommended working set
/// when the system has a Metal device (Apple Silicon), else `ram_bytes`
/// (`law::mlx::WorkingSet`).
fn working_set(ram_bytes: u64) -> mlx_law::WorkingSet {
    match metal_working_set() {
        Some(b) => mlx_law::WorkingSet::Metal(b),
        None => mlx_law::WorkingSet::Ram(ram_bytes),
    }
}

/// Metal's `recommendedMaxWorkingSetSize` of the system's default device.
#[cfg(target_os = "macos")]
fn metal_working_set() -> Option<u64> {
    use objc2_metal::MTLDevice;
    let device = objc2_metal::MTLCreateSystemDefaultDevice()?;
    Some(device.recommendedMaxWorkingSetSize()).filter(|&b| b > 0)
}

/// No Metal off macOS.
#[cfg(not(target_os = "macos"))]
fn metal_working_set() -> Option<u64> {
    None
}

/// The MLX brake's sample plan: `None` when the base footprint was never
/// measured (no bound, no brake). It plans against the working window,
/// `min(allocated, ceiling)`: a bound the child did not take still leaves
/// the ceiling to plan against. Growth stops at the trained window, or at
/// the ceiling for a model without one (it keeps its last bound).
pub(crate) fn brake_input(c: ChildView<'_>, state: &MlxChild, cfg: &WardenConfig) -> Option<BrakeInput> {
    let (f, ram, base_bytes) = (c.plan.mlx()?, c.plan.ram?, state.base_bytes?);
    let allocated = c.allocated.or(f.trained);
    let window = crate::law::window::working_window(allocated, state.ceiling)?;
    let uncapped = f.trained.or(state.ceiling)?;
    Some(BrakeInput::Mlx {
        facts: MlxFacts {
            window,
            uncapped,
            kv_per_token: f.kv_per_token,
            ram_bytes: ram.bytes,
            last_request_tokens: state.last_request_tokens,
            threshold: mlx_law::DEFAULT_COMPACTION_THRESHOLD,
            pinned: cfg.ctx_pin_for(&c.plan.entry.id).is_some(),
        },
        base_bytes,
    })
}

/// What an MLX brake action did inside the child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acted {
    /// The cache was reset (a barrier request first when `barrier`); then
    /// the one-token request's outcome: the footprint it left (when
    /// readable), or why the request failed.
    Released {
        /// A barrier request ran before the reset.
        barrier: bool,
        /// The footprint after the release, or the request's failure.
        after: Result<Option<u64>, String>,
    },
    /// The reset itself failed: the cache's contents are unknown.
    ResetFailed(String),
    /// The child enforces this bound now.
    Bounded(u32),
    /// The child did not take `bound`.
    NotBounded {
        /// The bound sent.
        bound: u32,
        /// Why it did not apply.
        why: String,
    },
}

impl MlxChild {
    /// Carries out a release, shrink or growth inside the child (the actor
    /// unloads; `None` and `Unload` do nothing here).
    pub(crate) async fn act(
        &mut self,
        child: ChildView<'_>,
        action: MlxAction,
        point: Point,
        cfg: &WardenConfig,
    ) -> Option<Acted> {
        match action {
            MlxAction::None | MlxAction::ArmUnload | MlxAction::Unload => None,
            MlxAction::Release => Some(self.release(child, point, cfg).await),
            MlxAction::Shrink { cap } | MlxAction::Grow { cap } => Some(self.bound(child, cap).await),
        }
    }

    /// Sends a shrink's or growth's bound to the child (capped by the memory
    /// ceiling, floored, never above the trained window). Once memory no
    /// longer binds (the trained window sent back) no memory bound is
    /// recorded; a model without a trained window is bounded by memory
    /// always (its growth stops at the ceiling), so its bound stays one.
    async fn bound(&mut self, child: ChildView<'_>, cap: u32) -> Acted {
        let trained = child.plan.mlx().and_then(|f| f.trained);
        let bound = crate::law::window::kv_bound(trained, cap.min(self.ceiling.unwrap_or(u32::MAX)));
        let why = match super::apply_bound(child.client, bound).await {
            Ok(BoundAnswer::Applied(b)) | Ok(BoundAnswer::Enforces(b)) if b == bound => {
                self.memory_bound = recorded_bound(trained, b);
                return Acted::Bounded(b);
            }
            Ok(BoundAnswer::Enforces(n)) => format!("it enforces {n}"),
            Ok(_) => "an unexpected answer".into(),
            Err(why) => why,
        };
        Acted::NotBounded { bound, why }
    }

    /// The release: the cache reset (a barrier first after an abandoned
    /// turn) and a one-token request, then the footprint it left (at idle
    /// the lowest over 2 s; at a turn's end one read, so the turn's last
    /// events do not wait).
    async fn release(&mut self, child: ChildView<'_>, point: Point, cfg: &WardenConfig) -> Acted {
        let barrier = self.cache.abandoned;
        if let Err(why) = self.reset_cache(child, barrier, cfg.first_token_timeout).await {
            return Acted::ResetFailed(why);
        }
        // mlx-vlm clears its buffer cache after a non-streamed request.
        let model = super::model_arg(&child.plan.entry.path);
        let after = match super::one_token(child.client, &model, cfg.first_token_timeout).await {
            Err(why) => Err(format!("request: {why}")),
            Ok(()) if point == Point::Idle => Ok(lowest_footprint(child.pid).await),
            Ok(()) => Ok(footprint::anon_bytes(child.pid)),
        };
        Acted::Released { barrier, after }
    }
}

/// The memory bound recorded for an applied bound `b`: none once it is the
/// trained window again (memory no longer binds), unless that window is at
/// the floor (recorded all the same, as at load).
fn recorded_bound(trained: Option<u32>, b: u32) -> Option<u32> {
    match trained {
        Some(t) if b >= t && t > WINDOW_FLOOR_TOKENS => None,
        _ => Some(b),
    }
}

/// The lowest footprint over `RELEASE_SETTLE`.
async fn lowest_footprint(pid: u32) -> Option<u64> {
    let until = Instant::now() + RELEASE_SETTLE;
    let mut lowest = footprint::anon_bytes(pid);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(200)).await;
        lowest = match (lowest, footprint::anon_bytes(pid)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    lowest
}

#[cfg(test)]
mod tests {
    use super::recorded_bound;

    #[test]
    fn the_trained_window_sent_back_is_no_memory_bound() {
        let rows = [
            // (trained, applied, recorded, why)
            (Some(8192), 6000, Some(6000)), // why: under the trained window: memory binds
            (Some(8192), 8192, None),       // why: the trained window back: memory no longer binds
            (Some(4096), 4096, Some(4096)), // why: a trained window at the floor: recorded, as at load
            (None, 20_000, Some(20_000)),   // why: no trained window: the ceiling always binds
        ];
        for (i, (trained, b, want)) in rows.into_iter().enumerate() {
            assert_eq!(recorded_bound(trained, b), want, "row {i}");
        }
    }
}
