//! `BrakeSample`: `SensorActor` → `EngineActor`, every `WARDEN_BRAKE_TICK_S`
//! (60 s) while a model is loaded, with the reading the sensor has just
//! taken: the memory brake's idle sample. Fire-and-forget; the engine skips
//! it within 55 s of the previous sample or of the end of the last turn.

use actix::Message;

use crate::law::brake::Readings;
use crate::sensors::view::BrakeOff;

/// Take the memory brake's idle sample on `reading`.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct BrakeSample {
    /// The idle readings (no paging window: a turn's own), or why the
    /// pressure cannot be read (the brake turns off).
    pub reading: Result<Readings, BrakeOff>,
}
