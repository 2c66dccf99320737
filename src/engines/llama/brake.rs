//! The llama.cpp engines' memory brake (CPU over RAM, CUDA over the VRAM
//! spill): `law::brake::llama_step` on the engine's sample, and its action
//! carried out (respawn in place, defer, arm, unload), the window memory
//! written, the spec's log line. Part of `EngineCore`; runs inside an atomic
//! handler, so it never meets a generation in flight.

use tokio::time::Instant;

use crate::actors::engine::{EngineCore, LiveChild};
use crate::child::process;
use crate::law::brake::{self, Action, Point, Readings, WindowFacts};
use crate::law::window;
use crate::sensors::footprint;
use crate::status::WardenEvent;

impl EngineCore {
    /// Runs the law on a llama.cpp engine's sample (`None`: nothing sampled)
    /// and carries out its action.
    pub(crate) async fn llama_brake(&mut self, point: Point, sampled: Option<(Readings, WindowFacts)>) {
        let Some((readings, facts)) = sampled else {
            return;
        };
        self.brake.level = Some(readings.level);
        let (action, next) = brake::llama_step(point, &readings, &self.brake.state, &facts);
        // The footprint only feeds the log line: read once there is one.
        let mut readings = readings;
        if action != Action::None && readings.footprint_bytes.is_none() {
            readings.footprint_bytes = self.child.as_ref().and_then(|c| footprint::anon_bytes(c.process.pid()));
        }
        let before = self.brake.state;
        self.brake.state = next;
        match action {
            Action::None => {}
            Action::DeferShrink { cap } => self.log_brake(point, &readings, action, facts.allocated, cap, None),
            Action::ArmUnload => self.log_brake(point, &readings, action, facts.allocated, facts.allocated, None),
            Action::Shrink { cap } | Action::Grow { cap } => {
                self.brake_respawn(point, &readings, action, cap, facts).await
            }
            Action::Unload => self.brake_unload(point, &readings, facts.allocated).await,
        }
        if action != Action::None {
            self.brake.last_action = Some(action.log_name().to_string());
        }
        if (self.brake.state.cap, self.brake.state.hurt) != (before.cap, before.hurt)
            || self.brake.state.pending_cap != before.pending_cap
        {
            self.remember_window();
        }
        self.publish();
    }

    /// The law's view of a live child's window, `None` when the warden did
    /// not size it (no facts, or no window known): such a child is never
    /// sampled.
    pub(crate) fn window_facts(&self, c: &LiveChild) -> Option<WindowFacts> {
        let shape = c.plan.shape?;
        let allocated = c.allocated?;
        let ram_bytes = c.plan.ram?.bytes;
        Some(WindowFacts {
            allocated,
            // Over workers, this machine holds only its own layers' KV.
            kv_per_token: crate::engines::cpu::rpc::local_kv_per_token(&c.plan).unwrap_or(shape.kv_per_token),
            ram_bytes,
            uncapped: match &c.plan.rpc {
                Some(_) => crate::engines::cpu::rpc::uncapped(&c.plan),
                None => window::cpu(&shape, ram_bytes, None, None).ctx(),
            }
            .unwrap_or(allocated),
            pinned: self.cfg.ctx_pin.is_some(),
        })
    }

    /// The spec's log line for an action that did not respawn.
    /// `respawn_ms`: a respawn's stop-to-ready time, appended to the line.
    fn log_brake(&self, point: Point, r: &Readings, action: Action, from: u32, to: u32, respawn_ms: Option<u64>) {
        tracing::info!(
            "[{}] Memory brake: point={}, level={}, action={}, window={from}->{to}, footprint_mib={}{}",
            self.backend.kind().tag(),
            point.as_str(),
            r.level.as_str(),
            action.log_name(),
            footprint_mib(r),
            respawn_ms.map_or(String::new(), |ms| format!(", respawn_ms={ms}"))
        );
        self.emit(WardenEvent::Brake {
            point: point.as_str(),
            level: r.level.as_str(),
            action: action.log_name().into(),
            window_from: Some(from),
            window_to: Some(to),
        });
    }

    /// Respawn in place at `cap`: stop the child, start the same model with
    /// the cap handed to the spawn plan, readiness bounded by the respawn
    /// timeout. The model, the idle clock and the brake state are kept; a
    /// failed respawn degrades into an unload, recorded for the next spawn.
    async fn brake_respawn(&mut self, point: Point, r: &Readings, action: Action, cap: u32, facts: WindowFacts) {
        self.save_slot("memory brake").await;
        let Some(mut old) = self.child.take() else { return };
        let started = Instant::now();
        process::terminate(&mut old.process, self.cfg.stop_grace).await;
        let entry = old.plan.entry.clone();
        let plan = self.backend.respawn_plan(&self.cfg, &old.plan, cap);
        let plan = match old.plan.rpc {
            // Over workers the split is planned again, from the watch.
            Some(_) => self.replan_from_views(plan),
            None => Ok(plan),
        };
        drop(old); // frees its port lease for the new child
        let tag = self.backend.kind().tag();
        let spawned = match plan {
            Ok(plan) => self.spawn_ready(plan, self.cfg.respawn_timeout, true).await,
            Err(e) => Err(e),
        };
        match spawned {
            Ok(child) => {
                let to = child.allocated.unwrap_or(cap);
                self.brake.state = brake::after_respawn(&self.brake.state, action, cap, true, facts.pinned);
                // The idle clock is kept: a respawn is not a use.
                self.child = Some(child);
                let ms = started.elapsed().as_millis() as u64;
                self.log_brake(point, r, action, facts.allocated, to, Some(ms));
            }
            Err(e) => {
                self.brake.state = brake::after_respawn(&self.brake.state, action, cap, false, facts.pinned);
                tracing::warn!(
                    "[{tag}] Memory brake: point={}, level={}, action=respawn-failed ({}), window={}->{cap}, footprint_mib={}; the model reloads at the next message",
                    point.as_str(),
                    r.level.as_str(),
                    e.code(),
                    facts.allocated,
                    footprint_mib(r)
                );
                self.record_unload(&entry.id);
                self.emit(WardenEvent::Unloaded {
                    model: entry.id.clone(),
                    reason: "brake",
                });
                self.emit(WardenEvent::Brake {
                    point: point.as_str(),
                    level: r.level.as_str(),
                    action: "respawn-failed".into(),
                    window_from: Some(facts.allocated),
                    window_to: None,
                });
            }
        }
    }

    /// The emergency unload: the child stops; its episode and cap are
    /// carried to the model's next spawn.
    async fn brake_unload(&mut self, point: Point, r: &Readings, allocated: u32) {
        if !self.brake_unload_child().await {
            return;
        }
        tracing::warn!(
            "[{}] Memory brake: point={}, level={}, action=unload, window={allocated}->0, footprint_mib={}; lasting critical memory pressure while idle: the model reloads at the next message",
            self.backend.kind().tag(),
            point.as_str(),
            r.level.as_str(),
            footprint_mib(r)
        );
        self.emit(WardenEvent::Brake {
            point: point.as_str(),
            level: r.level.as_str(),
            action: "unload".into(),
            window_from: Some(allocated),
            window_to: None,
        });
    }
}

fn footprint_mib(r: &Readings) -> String {
    r.footprint_bytes.map_or("unknown".into(), |b| (b >> 20).to_string())
}
