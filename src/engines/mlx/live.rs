//! The MLX engine's part of `EngineCore`: the memory bound applied right
//! after a load and the MLX memory brake (release, and shrink/grow through
//! the bound). The prefix cache's resets are in `prefix`.
//!
//! Every failure here is one record (a WARNING naming the HTTP status or the
//! error's kind, never the key or a body) and never fails a load or a turn.

use std::time::Duration;

use tokio::time::Instant;

use crate::actors::engine::{EngineCore, LiveChild};
use crate::engines::mlx::{self, BoundAnswer, MlxChild};
use crate::law::brake::Point;
use crate::law::caps::WINDOW_FLOOR_TOKENS;
use crate::law::mlx::{self as mlx_law, MemoryBudget, MlxAction, MlxFacts, MlxReadings};
use crate::sensors::footprint;
use crate::status::WardenEvent;

/// How long a release's footprint is watched at idle (the lowest reading
/// counts: the kernel reports the freed memory a moment after the clear).
const RELEASE_SETTLE: Duration = Duration::from_secs(2);

impl EngineCore {
    /// Right after an MLX child is ready: measure its base footprint, compute
    /// the memory ceiling, and send `kv_bound(trained, min(ceiling, cap))`.
    pub(crate) async fn mlx_bound_at_load(&self, child: &mut LiveChild, cap: Option<u32>) {
        let mut state = MlxChild::default();
        self.mlx_measure_and_bound(child, cap, &mut state).await;
        if let Some(s) = child.engine.mlx_mut() {
            *s = state;
        }
    }

    async fn mlx_measure_and_bound(&self, child: &mut LiveChild, cap: Option<u32>, state: &mut MlxChild) {
        let (Some(facts), Some(ram)) = (child.plan.mlx, child.plan.ram) else {
            return;
        };
        let Some(base) = footprint::anon_bytes(child.process.pid()) else {
            tracing::info!("[MLX_Engine] the child's base footprint is unreadable; no memory bound");
            return;
        };
        state.base_bytes = Some(base);
        let ceiling = mlx_law::tokens_at_ceiling(MemoryBudget {
            base_bytes: base,
            total_bytes: ram.bytes,
            kv_per_token: facts.kv_per_token,
        });
        state.ceiling = Some(ceiling);
        if facts.trained <= WINDOW_FLOOR_TOKENS {
            // The child enforces it since its spawn; recorded all the same.
            state.memory_bound = Some(facts.trained);
            return;
        }
        let Some(bound) = mlx_law::memory_bound(facts.trained, ceiling, cap) else {
            return;
        };
        let cap_note = cap.map_or(String::new(), |c| format!(", brake_cap={c}"));
        match mlx::apply_bound(&child.client, bound).await {
            Ok(BoundAnswer::Applied(b)) => {
                tracing::info!(
                    "[MLX_Engine] Window bounded by memory: trained={}, ceiling={ceiling}, bound={b}{cap_note}",
                    facts.trained
                );
                child.allocated = Some(b);
                state.memory_bound = Some(b);
            }
            Ok(BoundAnswer::Enforces(n)) if n == bound => {
                tracing::warn!(
                    "[MLX_Engine] the memory bound's answer was lost; the child's settings show it applied: trained={}, ceiling={ceiling}, bound={n}{cap_note}",
                    facts.trained
                );
                child.allocated = Some(n);
                state.memory_bound = Some(n);
            }
            Ok(BoundAnswer::Enforces(n)) => {
                tracing::warn!("[MLX_Engine] the child did not apply the memory bound {bound}; it enforces {n}");
                child.allocated = Some(n);
            }
            Err(why) => tracing::warn!("[MLX_Engine] could not apply the memory bound {bound} ({why})"),
        }
    }

    /// One MLX brake sample (the caller checked the pacing and the child).
    pub(crate) async fn mlx_brake_point(&mut self, point: Point, given: Option<crate::actors::engine::brake::Given>) {
        let Some(c) = self.child.as_ref() else { return };
        let (Some(f), Some(ram), Some(base)) = (c.plan.mlx, c.plan.ram, c.engine.base_bytes()) else {
            return; // the base was never measured: no bound, no brake
        };
        let pid = c.process.pid();
        let window = c.allocated.unwrap_or(f.trained);
        let Some(readings) = self.mlx_readings(point, pid, given) else {
            return;
        };
        self.brake.level = Some(readings.level);
        let r = MlxReadings {
            level: readings.level,
            paging: readings.paging,
            above_base: readings.footprint_bytes.map(|b| b.saturating_sub(base)),
        };
        let facts = MlxFacts {
            window,
            trained: f.trained,
            kv_per_token: f.kv_per_token,
            ram_bytes: ram.bytes,
            last_request_tokens: self.brake.last_request_tokens,
            threshold: mlx_law::DEFAULT_COMPACTION_THRESHOLD,
            pinned: self.cfg.ctx_pin.is_some(),
        };
        let before = self.brake.state;
        let (action, decided) = mlx_law::mlx_step(point, &r, &self.brake.state, &facts);
        self.brake.state = decided;
        let excess = |b: Option<u64>| b.map_or("unknown".into(), |b| (b.saturating_sub(base) >> 20).to_string());
        let log = |action: &str, to: u32, excess_mib: String| {
            tracing::info!(
                "[MLX_Engine] Memory brake: point={}, level={}, action={action}, window={window}->{to}, excess_mib={excess_mib}",
                point.as_str(),
                r.level.as_str()
            );
        };
        match action {
            MlxAction::None => {}
            MlxAction::ArmUnload => log("arm-unload", window, excess(readings.footprint_bytes)),
            MlxAction::Release => {
                let before_mib = excess(readings.footprint_bytes);
                match self.mlx_release(point, pid).await {
                    Ok(after) => log("release", window, format!("{before_mib}->{}", excess(after))),
                    Err(why) => {
                        tracing::warn!("[MLX_Engine] the memory release is incomplete ({why})");
                        // A failed release records nothing: the next sample retries.
                        self.brake.state = before;
                    }
                }
            }
            MlxAction::Shrink { cap } | MlxAction::Grow { cap } => {
                if let Some(b) = self.mlx_apply_bound(action, cap, f.trained, &before).await {
                    log(action.log_name(), b, excess(readings.footprint_bytes));
                }
            }
            MlxAction::Unload => self.mlx_unload(point, r.level.as_str(), window).await,
        }
        if action != MlxAction::None {
            self.brake.last_action = Some(action.log_name().to_string());
            self.emit(WardenEvent::Brake {
                point: point.as_str(),
                level: r.level.as_str(),
                action: action.log_name().into(),
                window_from: Some(window),
                window_to: self.child.as_ref().and_then(|c| c.allocated),
            });
        }
        if (self.brake.state.cap, self.brake.state.hurt) != (before.cap, before.hurt) {
            self.remember_window();
        }
        self.publish();
    }

    /// A brake sample's readings with the child's footprint (the MLX
    /// brake decides on it); `None` once the brake is off.
    fn mlx_readings(
        &mut self,
        point: Point,
        pid: u32,
        given: Option<crate::actors::engine::brake::Given>,
    ) -> Option<crate::law::brake::Readings> {
        let mut r = self.read_sensor(point, given)?;
        if r.footprint_bytes.is_none() {
            r.footprint_bytes = footprint::anon_bytes(pid);
        }
        Some(r)
    }

    /// Sends a shrink's or growth's bound to the child (capped by the memory
    /// ceiling, floored, never above the trained window); the bound applied,
    /// or `None` when the child did not take it (one WARNING; the brake
    /// state records the failure either way).
    async fn mlx_apply_bound(
        &mut self,
        action: MlxAction,
        cap: u32,
        trained: u32,
        before: &crate::law::brake::BrakeState,
    ) -> Option<u32> {
        let ceiling = c_ceiling(self.child.as_ref()).unwrap_or(u32::MAX);
        let bound = crate::law::window::kv_bound(trained, cap.min(ceiling));
        let applied = match self.child.as_ref() {
            Some(c) => mlx::apply_bound(&c.client, bound).await,
            None => Err("no child".into()),
        };
        match applied {
            Ok(BoundAnswer::Applied(b)) | Ok(BoundAnswer::Enforces(b)) if b == bound => {
                self.brake.state = mlx_law::after_bound(before, &self.brake.state, action, true);
                if let Some(c) = self.child.as_mut() {
                    c.allocated = Some(b);
                    if let Some(m) = c.engine.mlx_mut() {
                        m.memory_bound = Some(b);
                    }
                }
                Some(b)
            }
            other => {
                let why = match other {
                    Ok(BoundAnswer::Enforces(n)) => format!("it enforces {n}"),
                    Err(why) => why,
                    Ok(_) => "an unexpected answer".into(),
                };
                tracing::warn!("[MLX_Engine] the child did not apply the bound {bound} ({why})");
                self.brake.state = mlx_law::after_bound(before, &self.brake.state, action, false);
                None
            }
        }
    }

    /// The release: the cache reset (a barrier first after an abandoned
    /// turn) and a one-token request, then the footprint it left (at idle
    /// the lowest over 2 s; at a turn's end one read, so the turn's last
    /// events do not wait).
    async fn mlx_release(&mut self, point: Point, pid: u32) -> Result<Option<u64>, String> {
        self.release_cache().await?;
        if point != Point::Idle {
            return Ok(footprint::anon_bytes(pid));
        }
        let until = Instant::now() + RELEASE_SETTLE;
        let mut lowest = footprint::anon_bytes(pid);
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(200)).await;
            lowest = match (lowest, footprint::anon_bytes(pid)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(lowest)
    }

    /// The MLX emergency unload (the CPU engine's carry and records).
    async fn mlx_unload(&mut self, point: Point, level: &str, window: u32) {
        if !self.brake_unload_child().await {
            return;
        }
        tracing::warn!(
            "[MLX_Engine] Memory brake: point={}, level={level}, action=unload, window={window}->0; lasting critical memory pressure while idle: the model reloads at the next message",
            point.as_str()
        );
    }
}

fn c_ceiling(c: Option<&LiveChild>) -> Option<u32> {
    c?.engine.mlx()?.ceiling
}
