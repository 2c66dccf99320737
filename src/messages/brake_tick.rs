//! `BrakeTick`: `IdleTimer` → `EngineActor`, every `WARDEN_BRAKE_TICK_S`
//! (60 s): the memory brake's idle sample. Fire-and-forget; skipped by the
//! engine within 55 s of the previous sample or of the end of the last turn.

use actix::Message;

/// Take the memory brake's idle sample.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct BrakeTick;
