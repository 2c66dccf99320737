//! `SaveAhead`: `IdleTimer` → `EngineActor`, once the engine's idle clock
//! has stood still for `WARDEN_KV_SAVE_AHEAD_S`. Fire-and-forget: the
//! engine checks, in its own mailbox, that nothing ran since
//! (`actors::engine::ahead`).

use actix::Message;
use tokio::time::Instant;

/// Save ahead what a new conversation's turn would move: the engine has
/// been idle since `last_use`.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct SaveAhead {
    /// The idle clock's value the timer waited from.
    pub last_use: Instant,
}
