//! The memory brake, the actor's part: a sample point asks the engine how
//! its child is sampled (`Backend::brake_input`: which gauge, which law),
//! paces it, reads it (the sensor's latest, the reading an idle
//! `BrakeSample` brought, or the engine's own gauge), and hands it to the
//! law's executor (`brake_act`). Part of `EngineCore`; runs inside an atomic handler (a turn, or the idle
//! `BrakeSample`), so it never meets a generation in flight. What the brake
//! keeps, and its protocol, are the brake controller's (`brake_state`),
//! which reads no sensor and no clock: `sensors::view::BrakeSensor` does
//! both for it.

use super::core::EngineCore;
use crate::engines::hooks::{BrakeInput, Gauge};
use crate::law::brake::{self, Point, Readings};
use crate::sensors::view::{BrakeOff, Given};

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
        let last_used = self.usage.last().map(|u| self.sensor.ms(u.at));
        if !self.brake.take_sample(point, self.sensor.now_ms(), last_used, skip) {
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
                if let Some(readings) = self.read_sensor(point, given) {
                    self.mlx_brake(point, readings, facts, base_bytes).await;
                }
            }
        }
    }

    /// The reading at `point` (`given`, else the sensor's latest); `None`
    /// once the brake turned off because it cannot be read (said once).
    fn read_sensor(&mut self, point: Point, given: Option<Given>) -> Option<Readings> {
        match self.sensor.read(point, given) {
            Ok(r) => Some(r),
            Err(BrakeOff(why)) => {
                tracing::warn!("{}: the memory brake is off: {why}", self.backend.kind().tag());
                self.brake.turn_off(why);
                None
            }
        }
    }
}
