//! `SensorActor`: owns the OS's RAM readings and answers the engine's
//! `ReadSensors` at each brake sample. It keeps the swap-out counter at a
//! turn's start so the turn's end can tell its paging, applies the QA seam
//! (`WARDEN_FORCE_MEMORY_PRESSURE`), and says once when a reading is missing.
//! Blocking work is a few small `/proc` reads: it runs on its own arbiter so
//! it never delays the HTTP workers.

use actix::prelude::*;

use crate::config::ForcedPressure;
use crate::law::brake::{Level, Point, Readings};
use crate::law::pressure;
use crate::messages::ReadVram;
use crate::messages::read_sensors::{BrakeOff, ReadSensors};
use crate::sensors::footprint;
use crate::sensors::pressure::PressureProvider;
use crate::sensors::vram::VramProvider;

/// The sensor actor.
pub struct SensorActor {
    /// The OS provider; `None` on a platform without one.
    provider: Option<Box<dyn PressureProvider>>,
    /// The GPU spill gauge (Windows); `None` elsewhere.
    vram: Option<Box<dyn VramProvider>>,
    /// The QA seam's forced level (RAM tiers only).
    forced: Option<ForcedPressure>,
    /// Swap-outs at the current turn's start.
    turn_start_swapout: Option<u64>,
    /// The missing-paging WARNING was given.
    warned_paging: bool,
}

impl SensorActor {
    /// A sensor over `provider`.
    pub fn new(provider: Option<Box<dyn PressureProvider>>, forced: Option<ForcedPressure>) -> Self {
        Self {
            provider,
            vram: crate::sensors::vram::default_provider(),
            forced,
            turn_start_swapout: None,
            warned_paging: false,
        }
    }
}

impl Actor for SensorActor {
    type Context = Context<Self>;
}

impl Handler<ReadSensors> for SensorActor {
    type Result = Result<Readings, BrakeOff>;

    fn handle(&mut self, msg: ReadSensors, _ctx: &mut Self::Context) -> Self::Result {
        let footprint_bytes = if msg.footprint {
            msg.child_pid.and_then(footprint::anon_bytes)
        } else {
            None
        };
        // The QA seam forces the level and the paging evidence on every RAM
        // sample; the VRAM tiers are the CUDA engine's and do nothing here.
        match self.forced {
            Some(ForcedPressure::Warning) => {
                return Ok(Readings {
                    level: Level::Warning,
                    paging: Some(true),
                    footprint_bytes,
                });
            }
            Some(ForcedPressure::Critical) => {
                return Ok(Readings {
                    level: Level::Critical,
                    paging: Some(true),
                    footprint_bytes,
                });
            }
            _ => {}
        }
        let Some(provider) = self.provider.as_mut() else {
            return Err(BrakeOff(format!(
                "no memory pressure provider for this platform ({})",
                std::env::consts::OS
            )));
        };
        let sample = provider.sample();
        let level = sample.level.map_err(BrakeOff)?;
        if sample.swapout_bytes.is_none() && !self.warned_paging {
            self.warned_paging = true;
            tracing::warn!("the paging counter is unreadable; the memory pressure level decides alone");
        }
        let paging = match msg.point {
            Point::TurnStart => {
                self.turn_start_swapout = sample.swapout_bytes;
                Some(false)
            }
            Point::TurnEnd => {
                let delta = match (self.turn_start_swapout.take(), sample.swapout_bytes) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                    // A turn whose start was not sampled (its model was not
                    // loaded yet) has no paging window: no evidence.
                    (None, Some(_)) => Some(0),
                    _ => None,
                };
                pressure::paging(delta)
            }
            Point::Idle => Some(false),
        };
        Ok(Readings {
            level,
            paging,
            footprint_bytes,
        })
    }
}

impl Handler<ReadVram> for SensorActor {
    type Result = Result<u64, String>;

    fn handle(&mut self, msg: ReadVram, _ctx: &mut Self::Context) -> Self::Result {
        // The QA seam: the Shared Usage sits at the healthy level plus the
        // tier, so the spill is exactly at the tier at any window.
        match self.forced {
            Some(ForcedPressure::VramWarning) => return Ok(msg.healthy_bytes + crate::law::cuda::SPILL_WARNING_BYTES),
            Some(ForcedPressure::VramCritical) => return Ok(msg.healthy_bytes + crate::law::cuda::SPILL_CRITICAL_BYTES),
            _ => {}
        }
        match self.vram.as_mut() {
            Some(p) => p.shared_bytes(msg.child_pid),
            None => Err("no GPU spill gauge on this platform".into()),
        }
    }
}
