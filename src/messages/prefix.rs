//! The prefix cache's messages (MLX engine only; the llama.cpp engines send
//! turns straight to the engine).
//!
//! - `ClaimPrefix`: `Warden::submit` → `PrefixCacheActor`, once per turn, in
//!   arrival order. The actor decides whether the turn's conversation takes
//!   the cache over (`law::prefix::plan_claim`), queues a `Reset` into the
//!   engine when it does, then forwards the turn itself, so the engine's
//!   mailbox holds the reset just ahead of the turn.
//! - `ResetFailed`: `EngineActor` → `PrefixCacheActor` (fire-and-forget), after a
//!   reset or a memory release that did not complete: the owner is unknown,
//!   so the next claim resets.

use actix::Message;

use super::Generate;

pub use crate::law::prefix::TurnKind;

/// A turn on its way to the engine, through the cache's owner.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ClaimPrefix(pub Generate);

/// A reset or release did not complete: the cache's owner is unknown.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct ResetFailed;
