//! `Unload`: `/warden/unload` (or an embedder) → `EngineActor`: stop the
//! child once no turn runs on it (at once when none does). Replies whether
//! a model was loaded.

use actix::Message;

use crate::error::WardenError;

/// Unload the current model.
#[derive(Debug, Message)]
#[rtype(result = "super::Reply<Result<bool, WardenError>>")]
pub struct Unload;
