//! `SensorActor`: samples the OS's RAM readings on its own clock (every
//! `sensor_period`, 250 ms) and publishes the latest into a watch the engine
//! reads without a round trip (`sensors::view`). Every `brake_tick` (60 s)
//! while a model is loaded it refreshes the reading and sends it into the
//! engine as a `BrakeSample`: the brake's idle cadence (to each resident's
//! engine). It applies the QA seam
//! (`WARDEN_FORCE_MEMORY_PRESSURE`, RAM tiers) and says once when the paging
//! counter is missing. A sample is a few small `/proc` reads (tens of
//! microseconds); it runs on the engine's arbiter (and stops with it), off
//! the HTTP workers.

use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;

use crate::config::ForcedPressure;
use crate::law::brake::Level;
use crate::messages::BrakeSample;
use crate::sensors::pressure::PressureProvider;
use crate::sensors::view::{BrakeOff, Latest, SensorView};

/// The engines an idle brake sample goes to now: each with a model loaded
/// (several residents: each judges the sample over all of them).
pub type BrakeTargets = Box<dyn Fn() -> Vec<Recipient<BrakeSample>> + Send>;

/// Where the idle brake samples go, and when.
struct BrakeClock {
    targets: BrakeTargets,
    every: Duration,
}

/// The sensor actor.
pub struct SensorActor {
    /// The OS provider; `None` on a platform without one.
    provider: Option<Box<dyn PressureProvider>>,
    /// The QA seam's forced level (RAM tiers only).
    forced: Option<ForcedPressure>,
    /// Where the latest sample goes.
    latest: watch::Sender<Latest>,
    period: Duration,
    brake: Option<BrakeClock>,
    /// The missing-paging WARNING was given.
    warned_paging: bool,
}

impl SensorActor {
    /// A sensor over `provider`, sampling every `period`, and the engine's
    /// view of it, which already holds a first sample.
    pub fn new(
        provider: Option<Box<dyn PressureProvider>>,
        forced: Option<ForcedPressure>,
        period: Duration,
    ) -> (Self, SensorView) {
        match &provider {
            Some(p) => tracing::debug!(provider = p.name(), "memory pressure read from {}", p.name()),
            None => tracing::debug!("no memory pressure provider on this platform"),
        }
        let mut sensor = Self {
            provider,
            forced,
            latest: watch::Sender::new(unread()),
            period,
            brake: None,
            warned_paging: false,
        };
        sensor.refresh();
        let view = SensorView::new(sensor.subscribe());
        (sensor, view)
    }

    /// Its latest reading, as it changes (the dashboard's history reads it).
    pub fn subscribe(&self) -> watch::Receiver<Latest> {
        self.latest.subscribe()
    }

    /// Sends the brake's idle samples every `every` (zero: never) to each
    /// engine `targets` names then (those with a model loaded).
    pub fn brake_samples_to(mut self, targets: BrakeTargets, every: Duration) -> Self {
        self.brake = (!every.is_zero()).then_some(BrakeClock { targets, every });
        self
    }

    /// One reading of the OS (or of the seam).
    fn sample(&mut self) -> Latest {
        let reading = self.provider.as_mut().map(|p| p.sample());
        let available_bytes = reading.as_ref().and_then(|r| r.available_bytes);
        // The QA seam forces the level and the paging evidence on every RAM
        // sample (the available memory stays the OS's); the VRAM tiers are
        // the CUDA engine's and do nothing here.
        let forced = match self.forced {
            Some(ForcedPressure::Warning) => Some(Level::Warning),
            Some(ForcedPressure::Critical) => Some(Level::Critical),
            _ => None,
        };
        if let Some(level) = forced {
            return Latest {
                level: Ok(level),
                swapout_bytes: None,
                available_bytes,
                forced: true,
            };
        }
        let Some(sample) = reading else {
            return unread();
        };
        if sample.swapout_bytes.is_none() && !self.warned_paging {
            self.warned_paging = true;
            tracing::warn!("the paging counter is unreadable; the memory pressure level decides alone");
        }
        Latest {
            level: sample.level.map_err(BrakeOff),
            swapout_bytes: sample.swapout_bytes,
            available_bytes,
            forced: false,
        }
    }

    fn refresh(&mut self) {
        let latest = self.sample();
        self.latest.send_replace(latest);
    }
}

/// The reading of a platform without a provider.
fn unread() -> Latest {
    Latest {
        level: Err(BrakeOff(format!(
            "no memory pressure provider for this platform ({})",
            std::env::consts::OS
        ))),
        swapout_bytes: None,
        available_bytes: None,
        forced: false,
    }
}

impl Actor for SensorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if !self.period.is_zero() {
            ctx.run_interval(self.period, |act, _| act.refresh());
        }
        if let Some(every) = self.brake.as_ref().map(|b| b.every) {
            ctx.run_interval(every, |act, _| {
                act.refresh();
                if let Some(b) = &act.brake {
                    for engine in (b.targets)() {
                        let reading = act.latest.borrow().idle_readings();
                        engine.do_send(BrakeSample { reading });
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The QA seam's RAM tiers are the sensor's level (the brake's and the
    /// dashboard's alike); its VRAM tiers say nothing of RAM.
    #[test]
    fn forced_pressure_reads_as_the_brake_sees_it() {
        let level = |forced| {
            let (sensor, _) = SensorActor::new(None, forced, Duration::ZERO);
            sensor.subscribe().borrow().level.clone().ok()
        };
        assert_eq!(level(Some(ForcedPressure::Critical)), Some(Level::Critical));
        assert_eq!(level(Some(ForcedPressure::Warning)), Some(Level::Warning));
        // why: a forced VRAM level says nothing of RAM: the sensor decides
        assert_eq!(level(Some(ForcedPressure::VramCritical)), None);
        assert_eq!(level(None), None);
    }
}
