//! `Reset`: `PrefixCacheActor` → `EngineActor` (MLX engine only), queued
//! just ahead of the turn that needs it: a turn of another conversation, an
//! Arena or a compaction turn, or the first turn after a failed reset. The
//! mailbox's order makes the reset happen before that turn's request and
//! after every earlier turn. The engine carries it out on its own child (a
//! barrier first when its last turn was abandoned) and skips it when the
//! child's cache holds no conversation (a fresh child, a child just reset or
//! released, or a turn that switches to another model). A failure is one
//! WARNING and a `ResetFailed` back; it never fails the turn.

use actix::Message;

/// Reset the live child's prefix cache before the next turn.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct Reset {
    /// The log's and the event's reason (`conversation_change`, `arena`,
    /// `compaction`).
    pub reason: &'static str,
    /// The next turn's model (resolved): a turn that switches models starts
    /// a fresh child, with nothing to reset.
    pub model: String,
}
