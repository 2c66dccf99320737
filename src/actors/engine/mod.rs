//! `EngineActor`: the one owner of the child. Its mailbox is the spec's
//! generation lock: every operation on the child is a message, and every
//! handler that awaits the child returns `AtomicResponse`, which keeps the
//! mailbox closed until the await finishes (actix's `ResponseActFuture` and
//! `ctx.spawn` would interleave other messages into it: the very race the
//! lock prevented).
//!
//! The state lives in `EngineCore`, moved into each handler's future and put
//! back when it completes; between handlers it is always home.
//! Correspondents (the design card's flow): `Warden::submit` and the
//! `PrefixCacheActor` (`Generate`, and `Reset` ahead of a turn that takes
//! the MLX cache over), the `SensorActor` (`BrakeSample`, the idle cadence),
//! the `IdleTimer` (`Reap`), `Warden` (`Load`, `Unload`, `Shutdown`), the
//! worker watch (`WorkerCheck`). No handler awaits another actor: the brake
//! reads the sensor's latest reading from a watch, and replies to other
//! actors are fire-and-forget.

pub(crate) mod brake;
mod core;
mod counts;
mod door;
mod kv;
mod load;
pub(crate) mod outbox;
mod publish;
mod reap;
mod relay;
pub(crate) mod retire;
mod spawn;
mod turn;

use std::future::Future;

use actix::prelude::*;
use actix::{ActorFutureExt, WrapFuture};

pub use self::core::{EngineCore, LiveChild, Wiring};
pub use crate::engines::cpu::workers::workers_link;
pub use door::{Door, DoorError};
pub use turn::shutting_down;

use crate::error::ApiError;
use crate::messages::{BrakeSample, Generate, Load, Reap, Reset, Shutdown, Unload, WorkerCheck};
use crate::status::EngineStatus;

/// Mailbox capacity. The queue bound is `WARDEN_MAX_QUEUE`, enforced before
/// a turn is sent; the mailbox itself must never refuse or block a sender.
const MAILBOX_CAPACITY: usize = 1 << 20;

/// The engine actor.
pub struct EngineActor {
    /// `None` only while an atomic handler holds it.
    core: Option<EngineCore>,
}

impl EngineActor {
    /// An actor around `core`.
    pub fn new(core: EngineCore) -> Self {
        Self { core: Some(core) }
    }

    /// Runs `f` over the core as one atomic handler.
    fn atomic<R, F, Fut>(&mut self, f: F) -> AtomicResponse<Self, R>
    where
        R: 'static,
        F: FnOnce(EngineCore) -> Fut,
        Fut: Future<Output = (EngineCore, R)> + 'static,
    {
        // Atomic handlers never overlap, and each puts the core back before
        // the next message is handled, so it is always home here.
        let core = self
            .core
            .take()
            .expect("the engine core is home between atomic handlers");
        AtomicResponse::new(Box::pin(f(core).into_actor(self).map(|(core, r), act, _ctx| {
            act.core = Some(core);
            r
        })))
    }
}

impl Actor for EngineActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

impl Handler<Generate> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Generate, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(|mut core| async move {
            core.run_turn(msg).await;
            (core, ())
        })
    }
}

impl Handler<Load> for EngineActor {
    type Result = AtomicResponse<Self, Result<EngineStatus, ApiError>>;

    fn handle(&mut self, msg: Load, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(|mut core| async move {
            let r = core.load_request(msg.model.as_deref(), msg.keep_alive).await;
            (core, r)
        })
    }
}

impl Handler<Unload> for EngineActor {
    type Result = AtomicResponse<Self, Result<bool, ApiError>>;

    fn handle(&mut self, _msg: Unload, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(|mut core| async move {
            let was = core.retire(retire::Retire::Request).await.is_some();
            (core, Ok(was))
        })
    }
}

impl Handler<Reset> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Reset, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(|mut core| async move {
            core.reset_prefix(msg).await;
            (core, ())
        })
    }
}

impl Handler<Reap> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _msg: Reap, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(|mut core| async move {
            core.reap().await;
            (core, ())
        })
    }
}

impl Handler<BrakeSample> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: BrakeSample, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(|mut core| async move {
            core.brake_idle_sample(msg.reading).await;
            (core, ())
        })
    }
}

impl Handler<Shutdown> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _msg: Shutdown, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(|mut core| async move {
            core.shutdown().await;
            (core, ())
        })
    }
}

impl Handler<WorkerCheck> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _msg: WorkerCheck, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(|mut core| async move {
            core.worker_check().await;
            (core, ())
        })
    }
}
