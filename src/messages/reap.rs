//! `Reap`: `IdleTimer` → `EngineActor`, every `WARDEN_IDLE_TICK_S` (30 s)
//! while a model looks idle. Fire-and-forget (`do_send`): a reap queued
//! behind a turn is handled after it, when the idle clock has moved to the
//! turn's end, and the engine re-checks idleness before it unloads.

use actix::Message;

/// Unload the model if it has been idle past its timeout.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Reap;
