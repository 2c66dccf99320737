//! `Reply`: the answer to a control message (`Load`, `Unload`) that may
//! have to wait for running turns. The engine's mailbox never waits (turns
//! on several slots end through it), so a control message that cannot act
//! now is queued in the engine in arrival order, behind the turns before
//! it, and its answer comes later on a channel the caller awaits.

use tokio::sync::oneshot;

use crate::error::WardenError;

/// Now, or later on a channel.
#[derive(Debug)]
pub enum Reply<T> {
    /// Acted on at once.
    Now(T),
    /// Queued behind running turns: the answer comes when it acts.
    Later(oneshot::Receiver<T>),
}

impl<T> Reply<T> {
    /// The answer, waited for when it comes later.
    pub async fn settle(self) -> Result<T, WardenError> {
        match self {
            Self::Now(v) => Ok(v),
            // A dropped sender: the engine stopped before it acted.
            Self::Later(rx) => rx.await.map_err(|_| WardenError::EngineUnavailable),
        }
    }
}
