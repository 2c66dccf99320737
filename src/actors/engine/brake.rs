//! The memory brake, the actor's part: a sample point asks the engine how
//! its child is sampled (`Backend::brake_input`: which gauge, which law),
//! paces it, reads it (the sensor's latest, the reading an idle
//! `BrakeSample` brought, or the engine's own gauge), and hands it to the
//! law's executor (`brake_act`). Part of `EngineCore`; runs inside an atomic handler (a turn, or the idle
//! `BrakeSample`), so it never meets a generation in flight. What the brake
//! keeps is the brake controller's (`brake_state`).

use super::core::EngineCore;
use crate::engines::hooks::{BrakeInput, Gauge};
use crate::law::brake::{self, Point, Readings};
use crate::sensors::view::Given;

impl EngineCore {
    /// Takes one brake sample at `point` and acts on it; `given`: the
    /// reading an idle `BrakeSample` brought (else the sensor's latest).
    pub(crate) async fn brake_point(&mut self, point: Point, given: Option<Given>) {
        // One action at a time: one held for the running turns is the
        // brake's answer until it is carried out.
        if self.brake.is_off() || self.intake.brake_held() {
            return;
        }
        let Some(c) = self.child.get() else { return };
        let Some(input) = self.backend.brake_input(c.view(), &c.engine, &self.cfg()) else {
            return;
        };
        let skip = brake::idle_sample_skip(self.cfg().brake_tick);
        if !self.brake.take_sample(point, self.usage.last().map(|u| u.at), skip) {
            return;
        }
        let tag = self.backend.kind().tag();
        match input {
            BrakeInput::Llama { facts, gauge } => {
                let sampled = match gauge {
                    Gauge::Sensor => self.brake.read(point, given, tag).map(|r| {
                        // A worker under pressure counts like this machine.
                        let (level, facts) = crate::law::workers::combine(r.level, facts, &self.worker_pressure());
                        (Readings { level, ..r }, facts)
                    }),
                    Gauge::Spill { healthy } => self.child.get_mut().and_then(|c| {
                        let pid = c.process.pid();
                        c.engine.read_own_gauge(pid, healthy).map(|r| (r, facts))
                    }),
                };
                if let Some((readings, facts)) = sampled {
                    self.llama_brake(point, readings, facts).await;
                }
            }
            BrakeInput::Mlx { facts, base_bytes } => {
                if let Some(readings) = self.brake.read(point, given, tag) {
                    self.mlx_brake(point, readings, facts, base_bytes).await;
                }
            }
        }
    }

    /// The brake's emergency unload of the live child (any engine): the
    /// carry first, since it is the live brake state the retirement drops,
    /// then the retirement. `false` without a child.
    pub(crate) async fn brake_unload_child(&mut self) -> bool {
        let Some(id) = self.child.model_id().map(str::to_string) else {
            return false;
        };
        self.brake.record_unload(&id);
        self.retire(super::retire::Retire::Brake).await;
        true
    }
}
