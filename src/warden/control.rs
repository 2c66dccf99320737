//! The door's control of the model: load and unload, each one message
//! to the engine, acted on once the turns before it ended (never inside
//! one: `messages::Reply`). With the `testing` feature, also the clocks' messages, so a test
//! chooses the moment of a reap or an idle brake sample.

use super::Warden;
use crate::error::WardenError;
use crate::law::keep_alive::KeepAlive;
use crate::messages::{Load, Unload};
use crate::status::EngineStatus;

impl Warden {
    /// Loads `model` (`None`: the default) now, without a turn, with the
    /// keep-alive to hold it for; the status after the load. Beside other
    /// residents when memory allows (`law::residents`), as a turn's load.
    pub async fn load(
        &self,
        model: Option<String>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<EngineStatus, WardenError> {
        let Some(slot) = self.inner.residency.engine(model.as_deref()) else {
            return Err(match model {
                Some(id) => WardenError::ModelNotFound(id),
                None => WardenError::NoModel,
            });
        };
        let r = match slot.engine.send(Load { model, keep_alive }).await {
            Ok(reply) => reply.settle().await.and_then(|r| r),
            Err(_) => Err(crate::actors::engine::shutting_down()),
        };
        // The engine's own snapshot, with every resident beside it.
        r.map(|mut s| {
            s.residents = self.inner.residency.views();
            s
        })
    }

    /// Stops every resident's child now; whether a model was loaded.
    pub async fn unload(&self) -> Result<bool, WardenError> {
        let mut any = false;
        for slot in self.inner.residency.engines().iter() {
            any |= unload_one(&slot.engine).await?;
        }
        Ok(any)
    }

    /// Stops `model`'s child now (`None`: the default's); whether it was loaded.
    pub async fn unload_model(&self, model: Option<&str>) -> Result<bool, WardenError> {
        let Some(slot) = self.inner.residency.engine(model) else {
            return Ok(false);
        };
        unload_one(&slot.engine).await
    }

    /// Queues the idle timer's `Reap` now in every engine, fire-and-forget
    /// as the timer sends it (behind a running turn; each engine still
    /// checks idleness, and says `ReapChecked`).
    #[cfg(feature = "testing")]
    pub fn queue_reap(&self) {
        for slot in self.inner.residency.engines().iter() {
            slot.engine.do_send(crate::messages::Reap);
        }
    }

    /// The sensor's idle `BrakeSample` with `reading`, now, to every engine
    /// (one without a child ignores it), and back once they handled it.
    #[cfg(feature = "testing")]
    pub async fn brake_sample_now(&self, reading: Result<crate::law::brake::Readings, crate::sensors::view::BrakeOff>) {
        for slot in self.inner.residency.engines().iter() {
            let reading = reading.clone();
            let _ = slot.engine.send(crate::messages::BrakeSample { reading }).await;
        }
    }

    /// Makes each engine's next turn panic once its model is loaded (the
    /// supervision tests' hook).
    #[cfg(feature = "testing")]
    pub fn panic_next_turn(&self) {
        for slot in self.inner.residency.engines().iter() {
            slot.engine.do_send(crate::messages::recover::PanicNextTurn);
        }
    }

    /// Stops the default model's engine's own arbiter now, as if the engine
    /// died under a turn (the supervision tests' hook); `false` on the
    /// caller's arbiter.
    #[cfg(feature = "testing")]
    pub fn stop_engine_now(&self) -> bool {
        let slot = self.inner.residency.engine(None);
        slot.and_then(|s| s.arbiter.clone()).is_some_and(|a| a.stop())
    }
}

/// One engine's unload, waited for through running turns.
pub(super) async fn unload_one(engine: &actix::Addr<crate::actors::engine::EngineActor>) -> Result<bool, WardenError> {
    match engine.send(Unload).await {
        Ok(reply) => reply.settle().await.and_then(|r| r),
        Err(_) => Err(crate::actors::engine::shutting_down()),
    }
}
