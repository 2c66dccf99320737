//! `Unload`: `/warden/unload` (or an embedder) → `EngineActor`: stop the
//! child now. Replies whether a model was loaded.

use actix::Message;

use crate::error::WardenError;

/// Unload the current model.
#[derive(Debug, Message)]
#[rtype(result = "Result<bool, WardenError>")]
pub struct Unload;
