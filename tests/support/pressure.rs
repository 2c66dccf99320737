//! A scripted pressure view: the brake's readings taken in order, one per
//! sample, calm once the script runs out (the engine's window on the
//! sensor, driven by a test).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use llm_warden::law::brake::{Level, Point, Readings};
use llm_warden::sensors::view::{BrakeOff, PressureView};

/// Scripted readings, shared between the test and the engine.
#[derive(Clone, Default, Debug)]
pub struct Script(Arc<Mutex<VecDeque<Readings>>>);

impl Script {
    /// Queues one reading.
    pub fn push(&self, level: Level, paging: bool) {
        self.0.lock().unwrap().push_back(Readings {
            level,
            paging: Some(paging),
            footprint_bytes: Some(100 << 20),
        });
    }

    /// The next reading (calm when none is queued).
    pub fn next(&self) -> Readings {
        self.0.lock().unwrap().pop_front().unwrap_or(Readings {
            level: Level::Calm,
            paging: Some(false),
            footprint_bytes: None,
        })
    }

    /// Readings not yet taken.
    pub fn left(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Turn starts and ends read the script like the sensor's latest reading.
impl PressureView for Script {
    fn read(&mut self, _point: Point) -> Result<Readings, BrakeOff> {
        Ok(self.next())
    }
}
