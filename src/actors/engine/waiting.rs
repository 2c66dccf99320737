//! What the engine's intake holds for the engine itself (`intake::Held`
//! for `Live`): a turn with its caller's channel, a load or an unload with
//! the answer its caller waits on. The intake orders and counts them; the
//! engine's handlers use what they carry.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::intake::Held;
use super::outbox::Outbox;
use crate::catalog::ModelEntry;
use crate::error::WardenError;
use crate::law::keep_alive::KeepAlive;
use crate::messages::{Reset, TurnRequest};
use crate::queue::QueueTicket;
use crate::status::EngineStatus;

/// The engine's own: what its handlers put in the intake.
#[derive(Debug)]
pub struct Live;

impl Held for Live {
    /// Boxed: a turn is most of what waits, and the control items beside
    /// it are a tenth of its size.
    type Turn = Box<Waiting>;
    type Reset = Reset;
    type Load = LoadAsk;
    type Unload = oneshot::Sender<Result<bool, WardenError>>;
}

/// A turn not yet admitted.
#[derive(Debug)]
pub struct Waiting {
    /// The request, whole.
    pub request: TurnRequest,
    /// Its model, resolved by `Warden::submit`.
    pub entry: Arc<ModelEntry>,
    /// Its caller's channel.
    pub out: Outbox,
    /// Its arrival number.
    pub seq: u64,
    /// When it arrived (a wait for another model's memory counts from it).
    pub arrived: tokio::time::Instant,
    /// Its place in the queue's bound.
    pub ticket: Option<QueueTicket>,
    /// `TurnStarted` was said (a turn sent back to wait after its start
    /// sample says it once).
    pub started: bool,
    /// A turn whose child died under it: what it carries to the next
    /// (`resume`); `None` for a new turn.
    pub carry: Option<Box<super::carry::Carry>>,
}

/// `Load`, waiting to be carried out and answered.
#[derive(Debug)]
pub struct LoadAsk {
    /// The model (`None`: the default).
    pub model: Option<String>,
    /// The keep-alive to set.
    pub keep_alive: Option<KeepAlive>,
    /// When it arrived.
    pub arrived: tokio::time::Instant,
    /// Where the answer goes.
    pub reply: oneshot::Sender<Result<EngineStatus, WardenError>>,
}
