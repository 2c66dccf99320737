//! What an engine's load asks of the residency beside it (`Peers`), and
//! what it keeps while it waits for room (`RoomWait`, `Patience`, `Wake`).
//! A leaf: `room` carries the decisions out on the core; this holds the
//! types the core and the intake keep.

use std::sync::Arc;
use std::time::Duration;

use actix::{Message, Recipient};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::law::residents::Resident;
use crate::law::schedule::{Holder, Next, Policy};
use crate::messages::Evict;
use crate::warden::arbiter::{LoadAsk, LoadStep};

/// What an engine asks of the residency beside it (`warden::residency`
/// answers; no lock is held across an await).
pub trait Peers: Send + Sync + std::fmt::Debug {
    /// The arbiter's step for a load (`warden::arbiter::Arbiter::load_step`)
    /// beside every other resident as published: it goes (its memory
    /// reserved until `settled`, so that a load deciding meanwhile counts
    /// it), waits in the line, or is refused.
    fn load_step(&self, ask: &LoadAsk) -> LoadStep;
    /// The engine of a resident `model`, to evict it.
    fn engine_of(&self, model: &str) -> Option<Recipient<Evict>>;
    /// Every resident but `me`, as the law sees it from its published state.
    fn others(&self, me: &str) -> Vec<Resident>;
    /// The load of `me` ended (its child is published, or it failed).
    fn settled(&self, me: &str);
    /// `me`'s load left the line: it loads, or it was refused.
    fn leave_line(&self, me: &str);
    /// Whether `holder`, about to start a turn, yields to a load waiting on
    /// it: the model it yields to and why (the arbiter's `holder_step`).
    fn yields_to(&self, holder: &Holder, policy: Policy, limit: Duration) -> Option<(String, Next)>;
    /// `me` yielded to `to`: its next load lets `to`'s go first.
    fn yielded(&self, me: &str, to: &str);
    /// The scheduler's last estimate of how long `me`'s load still waits,
    /// ms (`None`: none yet).
    fn estimate(&self, me: &str) -> Option<u64>;
    /// Changes whenever what the residents' law reads changes (a resident
    /// came, went, began or ended a turn; the line moved; the settings were
    /// reloaded): what a waiting load is woken by.
    fn changes(&self) -> watch::Receiver<u64>;
    /// A load took `ms`: the time every model spent loading over the last
    /// `law::schedule::THRASH_WINDOW_MS`, ms.
    fn loaded(&self, ms: u64) -> u64;
}

/// A load waiting for room, kept between handlers: the engine's mailbox
/// stays open while it waits (an unload, an eviction, a status or another
/// turn is served meanwhile), and the change that may free room, its
/// deadline, or its client leaving wakes the engine (`Wake`). Its place in
/// the line is given up when it is dropped (it loads, it was refused, or no
/// request wants it any more).
#[derive(Debug)]
pub(crate) struct RoomWait {
    pub(super) model: String,
    /// When this load began to wait: the scheduler weighs its wait from
    /// here (a request's own deadline counts from its arrival, `Patience`).
    pub(super) began: Instant,
    /// Why it waits was said once.
    pub(super) said: bool,
    /// The load's plan alone, read once as it began to wait: a wake reads
    /// no header and no machine again (`load`).
    pub(super) alone: Option<crate::engines::SpawnPlan>,
    pub(super) peers: Arc<dyn Peers>,
    pub(super) watcher: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for RoomWait {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.take() {
            w.abort();
        }
        self.peers.leave_line(&self.model);
    }
}

/// Wakes an engine whose load waits for room: it decides again.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Wake;

/// How long a request waits for another model's memory: from its
/// arrival, at most its own bound (`Prefer: wait=N`) or the load timeout.
/// Each request's deadline is its own: when the head of the line is refused
/// at its deadline, the requests queued behind it are refused at theirs,
/// not one full timeout after another.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    pub since: Instant,
    pub at_most: Option<Duration>,
}

/// Whether a load may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Room {
    /// Room was made: what the residents that stay hold, bytes.
    Made(u64),
    /// It waits (`RoomWait`); the engine is woken when it may go on.
    Waits,
}

