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
//! Waiting is an event: a watcher task sleeps until the idle clock's last
//! value plus the delay, and a change of the clock (a turn, a load) starts
//! it again; the engine checks, in its own mailbox, that nothing ran since.

use std::time::Duration;

use actix::{Message, Recipient};
use tokio::sync::watch;
use tokio::time::Instant;

use super::core::EngineCore;

/// The engine has been idle since `last_use` for the save ahead's delay.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SaveAhead {
    /// The idle clock's value the watcher waited from.
    pub last_use: Instant,
}

/// Sends `SaveAhead` to `to` each time the idle clock `idle` stays
/// unchanged for `after`; ends when the engine (the clock's sender) is gone.
pub(super) async fn watch(mut idle: watch::Receiver<Option<Instant>>, after: Duration, to: Recipient<SaveAhead>) {
    loop {
        let last = *idle.borrow_and_update();
        if let Some(at) = last {
            tokio::select! {
                () = tokio::time::sleep_until(at + after) => to.do_send(SaveAhead { last_use: at }),
                changed = idle.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        if idle.changed().await.is_err() {
            return;
        }
    }
}

impl EngineCore {
    /// Saves ahead what a new conversation's turn would move, when nothing
    /// ran or waits since the watcher's `last_use`.
    pub(crate) async fn save_ahead(&mut self, last_use: Instant) {
        if !self.intake.idle() || self.usage.last().map(|u| u.at) != Some(last_use) {
            return;
        }
        let Some(c) = self.child.get_mut() else {
            return;
        };
        for slot in self.kv.ahead(c, Instant::now()) {
            self.kv.save_ahead(c, slot).await;
        }
    }
}
