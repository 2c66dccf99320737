//! The door's control of the model: load and unload, each one atomic
//! message in the engine's mailbox (behind any running turn, never inside
//! one). With the `testing` feature, also the clocks' messages, so a test
//! chooses the moment of a reap or an idle brake sample.

use super::Warden;
use crate::error::WardenError;
use crate::law::keep_alive::KeepAlive;
use crate::messages::{Load, Unload};
use crate::status::EngineStatus;

impl Warden {
    /// Loads (or switches to) `model` (`None`: the default) now, without a
    /// turn, with the keep-alive to hold it for; the status after the load.
    pub async fn load(
        &self,
        model: Option<String>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<EngineStatus, WardenError> {
        let r = self.inner.engine.send(Load { model, keep_alive }).await;
        r.unwrap_or_else(|_| Err(crate::actors::engine::shutting_down()))
    }

    /// Stops the child now; whether a model was loaded.
    pub async fn unload(&self) -> Result<bool, WardenError> {
        let r = self.inner.engine.send(Unload).await;
        r.unwrap_or_else(|_| Err(crate::actors::engine::shutting_down()))
    }

    /// Queues the idle timer's `Reap` now, fire-and-forget as the timer
    /// sends it (behind a running turn; the engine still checks idleness,
    /// and says `ReapChecked`).
    #[cfg(feature = "testing")]
    pub fn queue_reap(&self) {
        self.inner.engine.do_send(crate::messages::Reap);
    }

    /// The sensor's idle `BrakeSample` with `reading`, now, and back once
    /// the engine handled it.
    #[cfg(feature = "testing")]
    pub async fn brake_sample_now(&self, reading: Result<crate::law::brake::Readings, crate::sensors::view::BrakeOff>) {
        let _ = self.inner.engine.send(crate::messages::BrakeSample { reading }).await;
    }

    /// Makes the engine's next turn panic once its model is loaded (the
    /// supervision tests' hook).
    #[cfg(feature = "testing")]
    pub fn panic_next_turn(&self) {
        self.inner.engine.do_send(crate::messages::recover::PanicNextTurn);
    }

    /// Stops the engine's own arbiter now, as if the engine died under a
    /// turn (the supervision tests' hook); `false` on the caller's arbiter.
    #[cfg(feature = "testing")]
    pub fn stop_engine_now(&self) -> bool {
        self.inner.arbiter.as_ref().is_some_and(|a| a.stop())
    }
}
