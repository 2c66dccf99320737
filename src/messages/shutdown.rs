//! `Shutdown`: `Warden::shutdown` → `EngineActor`, once, when the application
//! stops: the child is terminated (SIGTERM, grace, SIGKILL) before the reply,
//! so nothing outlives the warden.

use actix::Message;

/// Stop the child and refuse further work.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Shutdown;
