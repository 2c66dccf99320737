//! `ReadSensors`: `EngineActor` → `SensorActor`, at every memory brake sample
//! (`turn_start`, `turn_end`, `idle`). The reply is the sample's readings, or
//! why the brake must turn off. A test hands the engine a fake recipient that
//! replies with scripted readings.

use actix::Message;

use crate::law::brake::{Point, Readings};

/// Read the RAM pressure, paging and the child's footprint.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Result<Readings, BrakeOff>")]
pub struct ReadSensors {
    /// The sample point (`turn_start` starts the paging window, `turn_end`
    /// closes it).
    pub point: Point,
    /// The child whose anonymous memory to read.
    pub child_pid: Option<u32>,
    /// Read that memory now. `/proc/<pid>/smaps_rollup` walks the child's
    /// page tables (5-6 ms for SmolLM2, measured by the bench: most of the
    /// time a turn_start sample cost). The MLX brake decides on it; the CPU
    /// brake only logs it, so it reads it after deciding, when it acts.
    pub footprint: bool,
}

/// The pressure level cannot be read: the brake turns off, with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BrakeOff(pub String);
