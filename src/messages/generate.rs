//! `Generate`: HTTP handler (or an embedding app) → `EngineActor`, once per
//! turn (a chat, a raw completion, an infill, or a tokenizer call that needs
//! its model loaded first). The engine admits it (loading or switching the
//! child as needed), and its relay streams the child's answer into `events`
//! beside the engine's mailbox (`actors::engine::relay`).

use actix::Message;
use bytes::Bytes;
use tokio::sync::mpsc;

use std::sync::Arc;

use crate::catalog::ModelEntry;
use crate::error::WardenError;
use crate::law::keep_alive::KeepAlive;
use crate::law::request_chat::{Capabilities, Needs};
use crate::law::route::Route;
use crate::messages::prefix::TurnKind;
use crate::queue::QueueTicket;

/// A turn to submit, as a face built it (`TurnRequest::new`, then the
/// setters): the one shape every dialect's request becomes, carried whole
/// to the engine inside `Generate`.
#[derive(Debug, Clone, Default)]
pub struct TurnRequest {
    /// The model id asked for (`None`: the default); `Warden::submit`
    /// resolves it once and the turn carries the entry, unless the face
    /// resolved it already (`resolved`).
    pub model: Option<String>,
    /// The model as the face resolved it (`Warden::resolve`), when it read
    /// the model's capabilities before the turn (Ollama's translation asks
    /// whether it has a chat template): `Warden::submit` takes it as it is
    /// instead of looking it up again.
    pub resolved: Option<Resolved>,
    /// The request body, validated by the face: its bound read once, its
    /// fields relayed as sent, the engine's own written over them for the
    /// child (`TurnBody::to_child`: the bound, `stream`, the slot, each
    /// engine's names).
    pub body: super::body::TurnBody,
    /// Whether the caller asked for a stream.
    pub stream: bool,
    /// How the caller wants notices handled.
    pub options: TurnOptions,
    /// The conversation the turn belongs to (its KV's key, and the MLX
    /// prefix cache's owner); `None` for a turn with no conversation.
    pub conversation: Option<String>,
    /// The turn's kind (an Arena or compaction turn resets the prefix cache).
    pub kind: TurnKind,
    /// The route to the child (chat unless said).
    pub route: Route,
    /// The keep-alive the request asked for (`law::keep_alive`).
    pub keep_alive: Option<KeepAlive>,
    /// The longest it waits for another model's memory before it is
    /// refused with a `Retry-After` (`Prefer: wait=N`); `None`: up to the
    /// load timeout.
    pub wait_at_most: Option<std::time::Duration>,
    /// What it needs of its model beyond text (an image read, an infill's
    /// tokens): `Warden::submit` refuses it on the model it resolved when
    /// the model cannot (`WardenError::Unmet`).
    pub needs: Needs,
}

impl TurnRequest {
    /// A turn on `route` with `body` (the default model, not streamed, no
    /// conversation); the setters below say the rest.
    pub fn new(route: Route, body: impl Into<super::body::TurnBody>) -> Self {
        Self {
            route,
            body: body.into(),
            ..Self::default()
        }
    }

    /// Waiting at most `wait` for another model's memory.
    pub fn wait_at_most(mut self, wait: Option<std::time::Duration>) -> Self {
        self.wait_at_most = wait;
        self
    }

    /// For `model` (`None`: the default).
    pub fn model(mut self, model: Option<String>) -> Self {
        self.model = model;
        self
    }

    /// For the model the face resolved (`Warden::resolve`).
    pub fn resolved(mut self, model: Resolved) -> Self {
        self.model = Some(model.entry.id.clone());
        self.resolved = Some(model);
        self
    }

    /// Streamed or whole.
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Of `conversation`.
    pub fn conversation(mut self, conversation: Option<String>) -> Self {
        self.conversation = conversation;
        self
    }

    /// With the notice switches `options`.
    pub fn options(mut self, options: TurnOptions) -> Self {
        self.options = options;
        self
    }

    /// Of kind `kind`.
    pub fn kind(mut self, kind: TurnKind) -> Self {
        self.kind = kind;
        self
    }

    /// Asking its model be kept for `keep_alive`.
    pub fn keep_alive(mut self, keep_alive: Option<KeepAlive>) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// Needing `needs` of its model.
    pub fn needs(mut self, needs: Needs) -> Self {
        self.needs = needs;
        self
    }
}

/// A model resolved once (`Warden::resolve`): its catalog entry (a
/// snapshot: a reload of the catalog does not change it under the turn)
/// and what its files let a request send it, its kind as served.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub entry: Arc<ModelEntry>,
    pub caps: Capabilities,
}

/// One turn, queued: the request whole, its model resolved once.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Generate {
    /// The request as the face built it.
    pub request: TurnRequest,
    /// Its model's catalog entry, resolved by `Warden::submit` (the engine
    /// does not look it up again).
    pub entry: Arc<ModelEntry>,
    /// Where the turn's events go. A closed receiver (the client went away)
    /// ends the turn and cancels the generation in the child.
    pub events: mpsc::Sender<TurnEvent>,
    /// Arrival number, assigned when the turn was queued (FIFO proof in tests).
    pub seq: u64,
    /// Holds this turn's place in the queue bound until the turn is done.
    pub ticket: Option<QueueTicket>,
    /// The caller's arbiter (an HTTP worker's), where a streamed answer is
    /// relayed: each event is then handed to the reader on its own thread
    /// instead of waking it from the engine's (`Outbox::home`). `None`
    /// (a caller on no arbiter): the engine's own.
    pub home: Option<actix_rt::ArbiterHandle>,
}

/// Per-turn switches of the spec's runner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnOptions {
    /// The conversation already has messages: an idle reap's reload is
    /// announced (`memory_reload`, reason `idle`).
    pub announce_idle_reload: bool,
    /// The turn belongs to a conversation (a stateful turn): it consumes the
    /// memory brake's notice at its end.
    pub stateful: bool,
}

/// What a turn tells its caller, in order.
#[derive(Debug, Clone)]
pub enum TurnEvent {
    /// A warden notice (loading, memory_reload, memory_warning).
    Notice(Notice),
    /// One SSE event from the child, exactly as it sent it (`data: {...}\n\n`).
    Chunk(Bytes),
    /// A non-streamed answer: the child's status and JSON body, unchanged.
    Body {
        /// HTTP status.
        status: u16,
        /// JSON body.
        body: Bytes,
    },
    /// The turn failed; nothing follows.
    Error(WardenError),
    /// The stream completed normally; nothing follows.
    Done,
}

pub use crate::status::Notice;
