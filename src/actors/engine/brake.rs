//! Carrying out the memory brake (CPU engine): gather the readings, run
//! `law::brake::llama_step`, execute its action (respawn in place, defer,
//! arm, unload), write the window memory and the carry, log the spec's line.
//! Part of `EngineCore`; runs inside an atomic handler (a turn, or the idle
//! `BrakeSample`), so it never meets a generation in flight.

use tokio::time::Instant;

use super::core::{EngineCore, LiveChild};
use crate::child::process;
use crate::engines::BrakeKind;
use crate::law::brake::{self, Action, BrakeReload, BrakeState, Point, Readings, Remembered, WindowFacts};
use crate::law::window;
use crate::sensors::footprint;
use crate::sensors::view::BrakeOff;
use crate::status::WardenEvent;

/// A reading a message brought with it.
pub(super) type Given = Result<Readings, BrakeOff>;

impl EngineCore {
    /// Takes one brake sample at `point` and acts on it; `given`: the
    /// reading an idle `BrakeSample` brought (else the sensor's latest).
    pub(super) async fn brake_point(&mut self, point: Point, given: Option<Given>) {
        if self.brake.off.is_some() || !self.backend.brake_capable() {
            return;
        }
        if self.backend.brake_kind() == Some(BrakeKind::Mlx) {
            if point == Point::Idle && !self.idle_due() {
                return;
            }
            if self.child.is_some() {
                self.brake.last_sample = Some(Instant::now());
                self.mlx_brake_point(point, given).await;
            }
            return;
        }
        let readings_and_facts = match self.backend.brake_kind() {
            Some(BrakeKind::CudaSpill) => self.spill_sample(point),
            _ => self.ram_sample(point, given),
        };
        let Some((readings, facts)) = readings_and_facts else {
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

    /// The CPU engine's sample: RAM pressure and paging (the footprint is
    /// read once the law acts). `None` when nothing is sampled (no sized
    /// child, not due, brake off).
    fn ram_sample(&mut self, point: Point, given: Option<Given>) -> Option<(Readings, WindowFacts)> {
        let facts = self.child.as_ref().and_then(|c| self.window_facts(c))?;
        if point == Point::Idle && !self.idle_due() {
            return None;
        }
        self.brake.last_sample = Some(Instant::now());
        let r = self.read_sensor(point, given)?;
        // A worker under pressure counts like this machine.
        let (level, facts) = crate::law::workers::combine(r.level, facts, &self.worker_pressure());
        Some((Readings { level, ..r }, facts))
    }

    /// The reading at `point` (`given`, else the sensor's latest); `None`
    /// once the brake turned off because it cannot be read (said once).
    pub(super) fn read_sensor(&mut self, point: Point, given: Option<Given>) -> Option<Readings> {
        match given.unwrap_or_else(|| self.sensor.read(point)) {
            Ok(r) => Some(r),
            Err(BrakeOff(why)) => {
                tracing::warn!("{}: the memory brake is off: {why}", self.backend.kind().tag());
                self.brake.off = Some(why);
                self.publish();
                None
            }
        }
    }

    /// Whether an idle sample is due (the 55-of-60 s pacing).
    pub(super) fn idle_due(&self) -> bool {
        brake::idle_sample_due(
            Instant::now().into_std(),
            self.brake.last_sample.map(Instant::into_std),
            self.last_used.map(Instant::into_std),
            brake::idle_sample_skip(self.cfg.brake_tick),
        )
    }

    /// The law's view of a live child's window, `None` when the warden did
    /// not size it (no facts, or no window known): such a child is never
    /// sampled.
    fn window_facts(&self, c: &LiveChild) -> Option<WindowFacts> {
        let shape = c.plan.shape?;
        let allocated = c.allocated?;
        let ram_bytes = c.plan.ram?.bytes;
        Some(WindowFacts {
            allocated,
            // Over workers, this machine holds only its own layers' KV.
            kv_per_token: crate::engines::rpc::local_kv_per_token(&c.plan).unwrap_or(shape.kv_per_token),
            ram_bytes,
            uncapped: match &c.plan.rpc {
                Some(_) => crate::engines::rpc::uncapped(&c.plan),
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
        let Some(id) = self.child.as_ref().map(|c| c.model_id().to_string()) else {
            return;
        };
        // The carry first: it is the live brake state the retirement drops.
        self.record_unload(&id);
        self.retire(super::retire::Retire::Brake).await;
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

    /// Records the carry of an unload and clears the live brake state.
    pub(super) fn record_unload(&mut self, model: &str) {
        self.brake.reload = Some(BrakeReload {
            model: model.to_string(),
            cap: self.brake.state.cap,
            hurt: self.brake.state.hurt,
            episode: self.brake.state.episode,
            at: Some(Instant::now().into_std()),
        });
        self.remember_window();
        self.brake.state = BrakeState::default();
    }

    /// Writes the live child's cap and hurt window through to the window
    /// memory (an entry with neither is deleted).
    pub(super) fn remember_window(&mut self) {
        let Some(model) = self
            .child
            .as_ref()
            .map(|c| c.model_id().to_string())
            .or_else(|| self.brake.reload.as_ref().map(|r| r.model.clone()))
        else {
            return;
        };
        let cap = self.brake.state.cap.or(self.brake.reload.as_ref().and_then(|r| r.cap));
        let hurt = self
            .brake
            .state
            .hurt
            .or(self.brake.reload.as_ref().and_then(|r| r.hurt));
        if cap.is_none() && hurt.is_none() {
            self.brake.memory.remove(&model);
        } else {
            self.brake.memory.insert(
                model,
                Remembered {
                    cap,
                    hurt,
                    written: Instant::now().into_std(),
                },
            );
        }
    }

    /// The brake state and cap a new child of `model` starts with (the carry
    /// first, then the window memory), dropping expired records.
    pub(super) fn brake_seed(&mut self, model: &str) -> BrakeState {
        let now = Instant::now().into_std();
        self.brake
            .memory
            .retain(|_, m| brake::alive(m.written, now, brake::WINDOW_MEMORY_TTL));
        let carry = self.brake.reload.as_ref().filter(|c| c.model == model);
        brake::seed(carry, self.brake.memory.get(model), now)
    }

    /// Whether the turn for `model` must announce a brake reload: its unload
    /// carry waits (nothing loaded), or a brake respawn no turn announced yet.
    pub(super) fn brake_reload_pending(&self, model: &str) -> bool {
        let carried = self.child.is_none()
            && self.brake.reload.as_ref().is_some_and(|c| {
                c.model == model
                    && c.at
                        .is_some_and(|at| brake::alive(at, Instant::now().into_std(), brake::BRAKE_RELOAD_TTL))
            });
        let respawned = self.child.as_ref().is_some_and(|c| c.model_id() == model) && self.brake.state.respawned;
        carried || respawned
    }
}

fn footprint_mib(r: &Readings) -> String {
    r.footprint_bytes.map_or("unknown".into(), |b| (b >> 20).to_string())
}
