//! The KV save ahead: once a model has been idle `WARDEN_KV_SAVE_AHEAD_S`
//! (its idle clock unchanged that long), the idle conversations the law
//! would move to disk before a new conversation's turn, and the one whose
//! slot that turn would take, are saved while nobody waits (`Kv::ahead`,
//! `Kv::save_ahead`). They stay in their slots, marked as on disk: when
//! that turn comes, moving them is an erase, and its first token no longer
//! waits for their writes (measured here at ~100 ms for SmolLM2's three
//! idle conversations of 2,000 tokens, seconds for a large model's
//! window). A turn on a saved slot makes its save stale again.
//!
//! The deadline is the `IdleTimer`'s, the actor that keeps the idle
//! clock's deadlines (the reap's too): it sends `SaveAhead` once the clock
//! has stood still for the delay, and a change of the clock (a turn, a
//! load) starts its wait again. The engine itself waits on no timer; it
//! checks, in its own mailbox, that nothing ran since.

use tokio::time::Instant;

use super::core::EngineCore;
use super::moves::{Move, Moves};

impl EngineCore {
    /// Saves ahead what a new conversation's turn would move, when nothing
    /// ran or waits since the timer's `last_use`.
    pub(crate) async fn save_ahead(&mut self, last_use: Instant) {
        if !self.intake.idle() || self.usage.last().map(|u| u.at) != Some(last_use) {
            return;
        }
        let Some(c) = self.child.get_mut() else {
            return;
        };
        let moves = self.kv.ahead(c, Instant::now()).into_iter().map(Move::Ahead);
        let moves = moves.fold(self.kv.moves(c), Moves::then);
        self.kv.carry(c, moves).await;
    }
}
