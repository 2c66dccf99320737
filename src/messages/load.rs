//! `Load`: `/warden/load` (or an embedder) → `EngineActor`: load a model now,
//! without a turn. Atomic like a turn; replies with the status after it.

use actix::Message;

use crate::error::WardenError;
use crate::status::EngineStatus;

/// Load (or switch to) a model.
#[derive(Debug, Default, Message)]
#[rtype(result = "super::Reply<Result<EngineStatus, WardenError>>")]
pub struct Load {
    /// The catalog id; `None` means the default model.
    pub model: Option<String>,
    /// The keep-alive to set for it (`law::keep_alive`).
    pub keep_alive: Option<crate::law::keep_alive::KeepAlive>,
}
