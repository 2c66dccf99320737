//! `ReapTick`: `IdleTimer` → `EngineActor`, every `WARDEN_IDLE_TICK_S` (30 s)
//! while a model looks idle. Fire-and-forget (`do_send`): a tick queued behind
//! a turn is handled after it, when the idle clock has moved to the turn's
//! end, and the engine re-checks idleness before it reaps.

use actix::Message;

/// Reap the model if it has been idle past the timeout.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct ReapTick;
