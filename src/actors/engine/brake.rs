//! The memory brake, the actor's part: a sample point asks the engine how
//! its child is sampled (`Backend::brake_input`: which gauge, which law),
//! paces it, reads it (the sensor's latest, the reading an idle
//! `BrakeSample` brought, or the engine's own gauge), and hands it to the
//! law's executor (`brake_act`). Also what outlives a child: an unload's
//! carry, the per-model window memory, the seed of the next spawn. Part of
//! `EngineCore`; runs inside an atomic handler (a turn, or the idle
//! `BrakeSample`), so it never meets a generation in flight.


use super::core::EngineCore;
use crate::engines::hooks::{BrakeInput, Gauge};
use crate::law::brake::{self, BrakeReload, BrakeState, Point, Readings, Remembered};
use crate::sensors::view::{BrakeOff, Given};

impl EngineCore {
    /// Takes one brake sample at `point` and acts on it; `given`: the
    /// reading an idle `BrakeSample` brought (else the sensor's latest).
    pub(crate) async fn brake_point(&mut self, point: Point, given: Option<Given>) {
        if self.brake.off.is_some() {
            return;
        }
        let Some(c) = self.child.as_ref() else { return };
        let Some(input) = self.backend.brake_input(c.view(), &c.engine, &self.cfg) else {
            return;
        };
        if !self.take_sample(point) {
            return;
        }
        match input {
            BrakeInput::Llama { facts, gauge } => {
                let sampled = match gauge {
                    Gauge::Sensor => self.read_sensor(point, given).map(|r| {
                        // A worker under pressure counts like this machine.
                        let (level, facts) = crate::law::workers::combine(r.level, facts, &self.worker_pressure());
                        (Readings { level, ..r }, facts)
                    }),
                    Gauge::Spill { healthy } => self.child.as_mut().and_then(|c| {
                        let pid = c.process.pid();
                        c.engine.read_own_gauge(pid, healthy).map(|r| (r, facts))
                    }),
                };
                if let Some((readings, facts)) = sampled {
                    self.llama_brake(point, readings, facts).await;
                }
            }
            BrakeInput::Mlx { facts, base_bytes } => {
                if let Some(readings) = self.read_sensor(point, given) {
                    self.mlx_brake(point, readings, facts, base_bytes).await;
                }
            }
        }
    }

    /// The reading at `point` (`given`, else the sensor's latest); `None`
    /// once the brake turned off because it cannot be read (said once).
    pub(crate) fn read_sensor(&mut self, point: Point, given: Option<Given>) -> Option<Readings> {
        match given.unwrap_or_else(|| self.sensor.read(point)) {
            Ok(r) => Some(r),
            Err(BrakeOff(why)) => {
                tracing::warn!("{}: the memory brake is off: {why}", self.backend.kind().tag());
                self.brake.off = Some(why);
                None
            }
        }
    }

    /// Whether a sample at `point` is taken (an idle one only past the
    /// 55-of-60 s pacing); a taken one is recorded for the next idle one.
    pub(crate) fn take_sample(&mut self, point: Point) -> bool {
        let now_ms = self.brake.now_ms();
        let due = point != Point::Idle
            || brake::idle_sample_due(
                now_ms,
                self.brake.last_sample_ms,
                self.last_used.map(|u| self.brake.ms(u.at)),
                brake::idle_sample_skip(self.cfg.brake_tick),
            );
        if due {
            self.brake.last_sample_ms = Some(now_ms);
        }
        due
    }

    /// The brake's emergency unload of the live child (any engine): the
    /// carry first, since it is the live brake state the retirement drops,
    /// then the retirement. `false` without a child.
    pub(crate) async fn brake_unload_child(&mut self) -> bool {
        let Some(id) = self.child.as_ref().map(|c| c.model_id().to_string()) else {
            return false;
        };
        self.record_unload(&id);
        self.retire(super::retire::Retire::Brake).await;
        true
    }

    /// Records the carry of an unload and clears the live brake state.
    pub(crate) fn record_unload(&mut self, model: &str) {
        self.brake.reload = Some(BrakeReload {
            model: model.to_string(),
            cap: self.brake.state.cap,
            hurt: self.brake.state.hurt,
            episode: self.brake.state.episode,
            at_ms: Some(self.brake.now_ms()),
        });
        self.remember_window();
        self.brake.state = BrakeState::default();
    }

    /// Writes the live child's cap and hurt window through to the window
    /// memory (an entry with neither is deleted).
    pub(crate) fn remember_window(&mut self) {
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
                    written_ms: self.brake.now_ms(),
                },
            );
        }
    }

    /// The brake state and cap a new child of `model` starts with (the carry
    /// first, then the window memory), dropping expired records.
    pub(crate) fn brake_seed(&mut self, model: &str) -> BrakeState {
        let now = self.brake.now_ms();
        self.brake
            .memory
            .retain(|_, m| brake::alive(m.written_ms, now, brake::WINDOW_MEMORY_TTL));
        let carry = self.brake.reload.as_ref().filter(|c| c.model == model);
        brake::seed(carry, self.brake.memory.get(model), now)
    }

    /// Whether the turn for `model` must announce a brake reload: its unload
    /// carry waits (nothing loaded), or a brake respawn no turn announced yet.
    pub(crate) fn brake_reload_pending(&self, model: &str) -> bool {
        let now = self.brake.now_ms();
        let carried = self.child.is_none()
            && self.brake.reload.as_ref().is_some_and(|c| {
                c.model == model && c.at_ms.is_some_and(|at| brake::alive(at, now, brake::BRAKE_RELOAD_TTL))
            });
        let respawned = self.child.as_ref().is_some_and(|c| c.model_id() == model) && self.brake.state.respawned;
        carried || respawned
    }
}
