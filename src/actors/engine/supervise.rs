//! Supervision of the engine's handlers. Each atomic handler runs over a
//! `CoreGuard`, not the bare core: when the handler returns, the guard
//! hands the core back; when it panics, the unwound future drops the guard
//! and the guard's `Drop` puts the core back home all the same. The actor
//! then logs one ERROR with the panic's message, answers the message in
//! flight with its panic reply (a turn gets `engine_panicked`), and sends
//! itself `Recover`, which retires the child the panic left behind (no
//! orphan, its slot not trusted), so the next message finds a clean engine.
//!
//! Why a guard and not a fresh core: the core holds the channels the
//! warden and its readers hold the other ends of (status, events, door),
//! the brake's window memory and the KV store: a rebuilt core would cut
//! them all. What a panic may have left half-done in the core is the
//! child and the activity, and `recover` resets exactly those.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::rc::Rc;

use super::core::{Activity, EngineCore};
use super::leaving::Retire;

/// Where the core lives between handlers.
pub(crate) type Home = Rc<RefCell<Option<EngineCore>>>;

/// The core while a handler holds it; home again when dropped.
pub struct CoreGuard {
    core: Option<EngineCore>,
    home: Home,
}

impl CoreGuard {
    /// Takes the core out of `home` (it is there between handlers: each
    /// guard puts it back before the next message is handled).
    pub(crate) fn take(home: &Home) -> Self {
        let core = home
            .borrow_mut()
            .take()
            .expect("the engine core is home between atomic handlers");
        Self {
            core: Some(core),
            home: home.clone(),
        }
    }
}

impl Deref for CoreGuard {
    type Target = EngineCore;

    fn deref(&self) -> &EngineCore {
        // Present from `take` until `drop`.
        self.core.as_ref().expect("the guard holds the core until dropped")
    }
}

impl DerefMut for CoreGuard {
    fn deref_mut(&mut self) -> &mut EngineCore {
        // Present from `take` until `drop`.
        self.core.as_mut().expect("the guard holds the core until dropped")
    }
}

impl Drop for CoreGuard {
    fn drop(&mut self) {
        if let Some(core) = self.core.take() {
            // Nothing else borrows the home while a handler runs.
            if let Ok(mut home) = self.home.try_borrow_mut() {
                *home = Some(core);
            }
        }
    }
}

/// A panic's message, from its payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

impl EngineCore {
    /// After a handler panicked: the child it left is retired and the
    /// engine is at rest, its status published.
    pub(crate) async fn recover(&mut self, why: &str) {
        self.child.set_activity(Activity::Resting);
        // A load that panicked after its admission gives its reservation back.
        self.settle_admission();
        if let Some(c) = self.child.get() {
            tracing::warn!(
                engine = %self.backend.kind().name(),
                model = c.model_id(),
                "stopping the model server after the engine's panic ({why})"
            );
            self.retire(Retire::Panicked).await;
        }
    }
}
