//! `IdleTimer`: the idle reap's clock, in its own actor (an `AtomicResponse`
//! in the engine freezes the engine's own `run_interval` timers, which would
//! then fire in a burst).
//!
//! Every `idle_tick` it reads the engine's status from the watch channel and
//! sends `Reap` only when a model is loaded, no turn runs and the idle clock
//! is past the timeout in force (the status's: a request's keep-alive, else
//! `WARDEN_IDLE_TIMEOUT_S`; none for a model kept forever): a tick with
//! nothing to reap never enters the mailbox (the spec's "returns before the
//! lock"). The engine re-checks when it handles it.
//!
//! The idle clock's other deadline is the KV save ahead's
//! (`WARDEN_KV_SAVE_AHEAD_S`): once the clock has stood still that long,
//! `SaveAhead` goes to the engine; a change of the clock (a turn, a load)
//! starts the wait again. The engine waits on no timer itself.
//!
//! This actor is the executor's clock in the sense of quinn-proto's
//! `poll_timeout`: what is due, and when, is the law's (`should_reap` over
//! the status; the save ahead's still clock), and only this actor sleeps
//! until then. A wait for an event (a load waiting for room, a turn waiting
//! for pool space, an unload waiting for running turns) is never a timer:
//! the event that frees it wakes it (`peers::Wake`, the intake at a
//! turn's end).

use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::law::reap::should_reap;
use crate::messages::{Reap, SaveAhead};
use crate::status::{EngineState, EngineStatus};

/// The timer actor.
pub struct IdleTimer {
    /// Where reaps go (the engine; a fake in tests).
    reap: Recipient<Reap>,
    /// The engine's status.
    status: watch::Receiver<EngineStatus>,
    /// The end of the engine's last turn, on the monotonic clock.
    last_used: watch::Receiver<Option<Instant>>,
    /// The tick period.
    idle_tick: Duration,
    /// Where `SaveAhead` goes, and after how long a still idle clock
    /// (`None`: saves ahead off).
    save_ahead: Option<(Recipient<SaveAhead>, Duration)>,
}

impl IdleTimer {
    /// A timer over the engine's status.
    pub fn new(
        reap: Recipient<Reap>,
        status: watch::Receiver<EngineStatus>,
        last_used: watch::Receiver<Option<Instant>>,
        idle_tick: Duration,
    ) -> Self {
        Self {
            reap,
            status,
            last_used,
            idle_tick,
            save_ahead: None,
        }
    }

    /// Also sends `SaveAhead` to `to` each time the idle clock stands still
    /// for `after` (nothing when `after` is zero).
    pub fn save_ahead(mut self, to: Recipient<SaveAhead>, after: Duration) -> Self {
        self.save_ahead = (!after.is_zero()).then_some((to, after));
        self
    }
}

/// Sends `SaveAhead` to `to` each time the idle clock `idle` stays
/// unchanged for `after`; ends when the engine (the clock's sender) is gone.
async fn save_ahead_when_still(mut idle: watch::Receiver<Option<Instant>>, after: Duration, to: Recipient<SaveAhead>) {
    loop {
        let last = *idle.borrow_and_update();
        if let Some(at) = last {
            tokio::select! {
                () = tokio::time::sleep_until(at + after) => to.do_send(SaveAhead { last_use: at }),
                changed = idle.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        if idle.changed().await.is_err() {
            return;
        }
    }
}

impl Actor for IdleTimer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some((to, after)) = self.save_ahead.take() {
            ctx.spawn(save_ahead_when_still(self.last_used.clone(), after, to).into_actor(self));
        }
        if self.idle_tick.is_zero() {
            return;
        }
        ctx.run_interval(self.idle_tick, |act, _| {
            let s = act.status.borrow();
            let idle_for = act.last_used.borrow().map(|t| t.elapsed()).unwrap_or_default();
            let busy = matches!(s.state, EngineState::Generating | EngineState::Loading);
            if let Some(timeout) = s.idle_timeout_s.map(Duration::from_secs_f64)
                && should_reap(s.model.is_some(), busy, idle_for, timeout)
            {
                act.reap.do_send(Reap);
            }
        });
    }
}
