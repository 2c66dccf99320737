//! `Generate`: HTTP handler (or an embedding app) → `EngineActor`, once per
//! turn (a chat, a raw completion, an infill, or a tokenizer call that needs
//! its model loaded first). The engine resolves the model (loading or switching the child
//! as needed), streams the child's answer into `events`, and only then
//! completes, so the mailbox stays closed for the whole turn.

use actix::Message;
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::error::WardenError;
use crate::queue::QueueTicket;

/// One chat turn.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Generate {
    /// The catalog id; `None` means the default model.
    pub model: Option<String>,
    /// The OpenAI request body, validated by the caller; the engine adapts
    /// it for its child (`repetition_penalty` → `repeat_penalty`, ...).
    pub body: serde_json::Map<String, serde_json::Value>,
    /// Whether the caller asked for a stream.
    pub stream: bool,
    /// Where the turn's events go. A closed receiver (the client went away)
    /// ends the turn and cancels the generation in the child.
    pub events: mpsc::Sender<TurnEvent>,
    /// How the caller wants notices handled.
    pub options: TurnOptions,
    /// The conversation the turn belongs to (the MLX prefix cache's owner
    /// key); `None` for a turn with no conversation.
    pub conversation: Option<String>,
    /// The turn's kind (an Arena or compaction turn resets the prefix cache).
    pub kind: crate::messages::prefix::TurnKind,
    /// The route to the child.
    pub route: crate::law::route::Route,
    /// The keep-alive the request asked for (`law::keep_alive`).
    pub keep_alive: Option<crate::law::keep_alive::KeepAlive>,
    /// Arrival number, assigned when the turn was queued (FIFO proof in tests).
    pub seq: u64,
    /// Holds this turn's place in the queue bound until the turn is done.
    pub ticket: Option<QueueTicket>,
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
