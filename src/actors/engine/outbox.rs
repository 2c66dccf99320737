//! Handing a turn's events to its caller, bounded: the engine never waits on
//! a client without a bound.
//!
//! Between the relay and a client sit a per-turn channel of
//! `TURN_EVENTS_BUFFER` events, then (over HTTP) actix's write buffer and the
//! socket's send buffer (`http::stall::CLIENT_SEND_BUFFER_BYTES`). While all of it
//! is full the relay *pauses*: it stops reading the child, whose own socket
//! then fills (llama-server keeps the tokens it made meanwhile), and nothing
//! is buffered without a bound. A pause longer than
//! `WARDEN_CLIENT_STALL_TIMEOUT_S` ends the turn as a disconnect would: the
//! upstream request is dropped (llama-server cancels the slot), a WARNING
//! names the turn, `/warden/events` says `client_stalled`, and the next turn
//! runs. Pausing was chosen over reading ahead into a larger buffer because a
//! stalled reader then costs a bounded, small amount of memory whatever the
//! answer's length, and a slow but live reader loses nothing.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::messages::TurnEvent;

/// Why an event was not handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The caller dropped its receiver (the client went away).
    Gone,
    /// The caller took nothing for the whole stall bound.
    Stalled {
        /// How long the engine waited.
        waited: Duration,
    },
}

/// One turn's side of its caller's channel.
#[derive(Debug)]
pub struct Outbox {
    tx: mpsc::Sender<TurnEvent>,
    bound: Duration,
    /// Set once an event stalled: nothing more is offered to this caller.
    stalled: Option<Duration>,
    /// The arbiter its caller reads on, when it reads on one.
    home: Option<actix_rt::ArbiterHandle>,
}

impl Outbox {
    /// An outbox over `tx`, each hand-over bounded by `bound`.
    pub fn new(tx: mpsc::Sender<TurnEvent>, bound: Duration) -> Self {
        Self {
            tx,
            bound,
            stalled: None,
            home: None,
        }
    }

    /// The same, its caller reading on `home`.
    pub fn homed(mut self, home: Option<actix_rt::ArbiterHandle>) -> Self {
        self.home = home;
        self
    }

    /// The arbiter its caller reads on (an HTTP worker's). A stream relayed
    /// there hands each event over on the reader's own thread: the child's
    /// socket, the relay and the client's socket are served by one wake-up
    /// per token, where a relay on the engine's thread costs a second
    /// thread's wake-up and a cross-thread signal per token (measured: the
    /// engine's thread took two thirds of the warden's CPU per streamed
    /// token, `docs/performance.md`).
    pub fn home(&self) -> Option<&actix_rt::ArbiterHandle> {
        self.home.as_ref()
    }

    /// Hands `ev` over, waiting at most the bound for room.
    pub async fn send(&mut self, ev: TurnEvent) -> Result<(), Refused> {
        if let Some(waited) = self.stalled {
            return Err(Refused::Stalled { waited });
        }
        let started = Instant::now();
        match tokio::time::timeout(self.bound, self.tx.send(ev)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Refused::Gone),
            Err(_) => {
                let waited = started.elapsed();
                self.stalled = Some(waited);
                Err(Refused::Stalled { waited })
            }
        }
    }

    /// Whether the caller went away.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Resolves when the caller goes away.
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// Resolves when the caller goes away, owning what it needs (a load
    /// waiting for room watches it from a task of its own; the task is
    /// aborted when the wait ends, so the caller's channel is not held).
    pub fn on_close(&self) -> impl std::future::Future<Output = ()> + 'static {
        let tx = self.tx.clone();
        async move { tx.closed().await }
    }

    /// How long the engine waited before it gave up on this caller, once it did.
    pub fn stalled(&self) -> Option<Duration> {
        self.stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receiver that takes nothing costs the sender the bound and no more;
    /// after that every event is refused at once.
    #[tokio::test(start_paused = true)]
    async fn a_caller_that_stops_taking_is_given_up_after_the_bound() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut out = Outbox::new(tx, Duration::from_secs(30));
        assert_eq!(out.send(TurnEvent::Done).await, Ok(()));
        let t0 = Instant::now();
        let r = out.send(TurnEvent::Done).await;
        assert_eq!(
            r,
            Err(Refused::Stalled {
                waited: Duration::from_secs(30)
            })
        );
        assert_eq!(t0.elapsed(), Duration::from_secs(30));
        // why: a stalled caller is never waited on twice
        let t1 = Instant::now();
        assert!(matches!(out.send(TurnEvent::Done).await, Err(Refused::Stalled { .. })));
        assert_eq!(t1.elapsed(), Duration::ZERO);
        assert!(rx.recv().await.is_some());
    }

    /// A reader that takes events, however slowly within the bound, loses none.
    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_within_the_bound_loses_nothing() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut out = Outbox::new(tx, Duration::from_secs(30));
        let reader = tokio::spawn(async move {
            let mut n = 0;
            while rx.recv().await.is_some() {
                n += 1;
                tokio::time::sleep(Duration::from_secs(20)).await;
            }
            n
        });
        for _ in 0..5 {
            out.send(TurnEvent::Done).await.expect("taken within the bound");
        }
        drop(out);
        assert_eq!(reader.await.unwrap(), 5);
    }

    /// A dropped receiver is `Gone`, not a stall.
    #[tokio::test(start_paused = true)]
    async fn a_gone_caller_is_refused_at_once() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let mut out = Outbox::new(tx, Duration::from_secs(30));
        assert_eq!(out.send(TurnEvent::Done).await, Err(Refused::Gone));
        assert!(out.is_closed());
    }
}
