//! The prefix cache's messages: `EngineActor` → `PrefixCacheActor` (MLX
//! engine only; the llama.cpp engines never send them).
//!
//! - `ClaimPrefix`: before a turn's request reaches the child, awaited inside
//!   the turn's atomic handler, so a reset it issues completes before any
//!   later message touches the child, whatever the client does.
//! - `PrefixAbandoned`: a turn was abandoned (the next claim sends a barrier
//!   first).
//! - `PrefixChildChanged`: a new child (an empty cache, nobody owns it).
//! - `ReleaseCache`: the memory brake's release (a reset, then a one-token
//!   non-streamed request).

use std::time::Duration;

use actix::Message;

use crate::child::client::ChildClient;

/// Why a turn needs the cache reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TurnKind {
    /// A conversation's turn: reset only when the owner changes.
    #[default]
    Chat,
    /// An Arena turn: always reset (two models, one conversation each).
    Arena,
    /// A compaction turn: always reset (the history was rewritten).
    Compaction,
}

/// Claim the child's KV for `conversation`.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ClaimPrefix {
    /// The conversation's key.
    pub conversation: String,
    /// The turn's kind.
    pub kind: TurnKind,
    /// The child's client (its key included).
    pub client: ChildClient,
    /// The `model` string the child expects.
    pub model: String,
    /// The barrier's bound (the first-chunk ceiling).
    pub barrier_timeout: Duration,
}

/// The last turn was abandoned mid-request.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct PrefixAbandoned;

/// A new child: its cache is empty and unowned.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct PrefixChildChanged;

/// The brake's release: reset, then a one-token non-streamed request.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), String>")]
pub struct ReleaseCache {
    /// The child's client.
    pub client: ChildClient,
    /// The `model` string the child expects.
    pub model: String,
    /// The request's bound.
    pub timeout: Duration,
}
