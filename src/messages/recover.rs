//! `Recover`: `EngineActor` → itself, right after one of its handlers
//! panicked (`actors::engine::supervise`): the core came home from the
//! unwound handler, and this retires the child the panic left in an unknown
//! state, so the next message finds a clean engine. With the `testing`
//! feature, `PanicNextTurn` (a test → `EngineActor`) makes the next turn
//! panic once its model is loaded, to prove it.

use actix::Message;

/// Retire the child after a handler panicked.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct Recover {
    /// The panic's message, for the log.
    pub why: String,
}

/// Make the next turn panic after its load (tests only).
#[cfg(feature = "testing")]
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct PanicNextTurn;
