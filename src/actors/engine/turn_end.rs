//! A turn's end, when its relay reports (`TurnRelayed`): what the relay
//! found becomes the engine's decision (a hung child stopped, a death
//! classified once and told to every turn that ran on that child), the
//! slot is freed with the child's own counts, the brake takes its
//! `turn_end` sample (a respawn it decides waits for the other running
//! turns), and only then the turn's last events go out. Part of
//! `EngineCore`; runs inside the atomic `TurnRelayed` handler.

use std::time::Duration;

use super::core::EngineCore;
use super::waiting::Waiting;
use super::outbox::Outbox;
use super::relay::{DEATH_GRACE, RelayEnd, Running, TurnRelayed};
use super::relay::{Finish, Relayed};
use crate::error::{GenerationError, WardenError};
use crate::law::brake::Point;
use crate::law::keep_alive::{self, KeepAlive};
use crate::law::route::Route;
use crate::messages::{Notice, TurnEvent};
use crate::queue::QueueTicket;
use crate::status::{TurnOutcome, TurnTimings, WardenEvent};

/// How a turn ended: its outcome, the final event sent after the brake's
/// turn end, and a streamed answer's timings.
pub(crate) type Ended = (TurnOutcome, Finish, Option<TurnTimings>);

/// A turn that failed with `e` before any answer.
pub(crate) fn failed(e: impl Into<WardenError>) -> Ended {
    (TurnOutcome::Failed, Finish::Event(TurnEvent::Error(e.into())), None)
}

/// What the closing of a turn needs besides how it ended.
struct Closing {
    out: Outbox,
    ticket: Option<QueueTicket>,
    seq: u64,
    route: Route,
    keep_alive: Option<KeepAlive>,
    stateful: bool,
}

impl EngineCore {
    /// A relay ended: its verdict, its slot, its brake sample, its close;
    /// or, when its child died under it and the law lets it, its way back
    /// to the intake's head to go on on the next child (`resume`).
    pub async fn turn_relayed(&mut self, done: TurnRelayed) {
        let TurnRelayed { mut turn, end } = done;
        self.intake.ended();
        self.usage.running(self.intake.running(), tokio::time::Instant::now());
        let relayed = match self.verdict(turn.pid, end).await {
            Err(e) => match self.resume_or_fail(&mut turn, e) {
                Ok(()) => return self.requeue(turn),
                Err(e) => Err(e),
            },
            ok => ok,
        };
        let Running {
            entry,
            out,
            seq,
            ticket,
            route,
            keep_alive,
            stateful,
            pid,
            ..
        } = turn;
        if route.generates()
            && let Some(c) = self.child.get_mut().filter(|c| c.process.pid() == pid)
        {
            let counts = match &relayed {
                Ok(Relayed::Completed { counts, .. }) => *counts,
                _ => None,
            };
            let abandoned = matches!(relayed, Ok(Relayed::Abandoned));
            let completed = matches!(relayed, Ok(Relayed::Completed { .. }));
            c.engine
                .after_turn(abandoned, completed, counts.map(|n| n.slot_tokens()));
            if let Some((slot, busy)) = c.slots.end(seq, tokio::time::Instant::now()) {
                super::kv_check::counted(c, slot, counts);
                self.kv.turn_counted(c, &busy, counts);
            }
        }
        let ended = ended(relayed);
        if self.child.holds(&entry.id) {
            if route.generates() {
                self.brake_point(Point::TurnEnd, None).await;
            }
            if let Some(k) = keep_alive.filter(|_| route.generates() || route.encodes()) {
                self.usage.hold(&entry.id, k);
            }
        }
        let closing = Closing {
            out,
            ticket,
            seq,
            route,
            keep_alive,
            stateful,
        };
        self.close(closing, ended).await;
    }

    /// A waiting turn that ends before its relay (shut down, or its load
    /// failed).
    pub(crate) async fn refuse(&mut self, w: Waiting, ended: Ended) {
        if !w.started {
            self.emit(WardenEvent::TurnStarted { seq: w.seq });
        }
        let closing = Closing {
            out: w.out,
            ticket: w.ticket,
            seq: w.seq,
            route: w.request.route,
            keep_alive: w.request.keep_alive,
            stateful: w.request.options.stateful,
        };
        self.close(closing, ended).await;
    }

    /// What every turn ends with: its count, the brake's notice to a
    /// stateful turn, and only then the turn's final event; a keep-alive
    /// of 0 unloads once nothing else runs or waits.
    async fn close(&mut self, c: Closing, ended: Ended) {
        let Closing {
            mut out,
            ticket,
            seq,
            route,
            keep_alive,
            stateful,
        } = c;
        let (outcome, finish, timings) = ended;
        // The turn's end is published before its last events reach the
        // client, so its next look at the status sees what the turn left
        // (a respawn or an unload at its end, its keep-alive, its count).
        // Its queue place frees then too: a client that read its answer's
        // end and asked the queue's depth once saw this turn still counted
        // (a real test read 1 on a fresh machine: the count lagged the
        // reply, no turn leaked).
        self.usage.turn_done(super::state::Used::read());
        drop(ticket);
        self.publish();
        if stateful {
            self.deliver_brake_notice(&mut out).await;
        }
        finish.send(&mut out).await;
        let outcome = self.stall_outcome(&out, seq).unwrap_or(outcome);
        self.emit(WardenEvent::TurnEnded {
            seq,
            route,
            outcome,
            timings,
        });
        if (route.generates() || route.encodes())
            && keep_alive::unload_after_turn(keep_alive)
            && self.child.is_live()
            && self.intake.idle()
        {
            tracing::info!("the request asked for keep_alive 0; unloading after its turn");
            self.unload_idle().await;
        }
    }

    /// What the relay found, as the engine's decision: a broken stream is
    /// the child's classified death when it died, a hung child is stopped,
    /// a lost worker's child is stopped. Each only when the child the turn
    /// ran on is still the live one; otherwise the turn hears how that
    /// child ended from the turn that learned it first.
    async fn verdict(&mut self, pid: u32, end: RelayEnd) -> Result<Relayed, GenerationError> {
        let live = self.child.get().is_some_and(|c| c.process.pid() == pid);
        match end {
            RelayEnd::Relayed(r) => Ok(r),
            RelayEnd::Failed(e) => Err(e),
            _ if !live => Err(self.intake.death_of(pid).unwrap_or_else(|| {
                GenerationError::Transport("the stream ended before the answer completed".into())
            })),
            RelayEnd::Broken => Err(self.broken_stream().await),
            RelayEnd::Hung { stage, after } => Err(self.hung(stage, after).await),
            RelayEnd::Lost(lost) => Err(self.retire_for_worker(lost).await),
        }
    }

    /// A stream that broke: the child's death (classified) when it exits
    /// within `DEATH_GRACE`, else a transport failure. Over RPC workers, a
    /// worker the watch then calls lost is the cause (llama-server aborts
    /// with "Remote RPC server crashed", which names no worker).
    pub(crate) async fn broken_stream(&mut self) -> GenerationError {
        if let Some(c) = self.child.get_mut() {
            let _ = tokio::time::timeout(DEATH_GRACE, c.process.wait()).await;
        }
        if let Some(lost) = self.loss_behind_death().await {
            return self.retire_for_worker(lost).await;
        }
        self.take_dead_child()
            .unwrap_or_else(|| GenerationError::Transport("the stream ended before the answer completed".into()))
    }

    /// A child that missed a watchdog: stopped, and the turn's error (told
    /// to every other turn that ran on it).
    async fn hung(&mut self, stage: &'static str, after: Duration) -> GenerationError {
        tracing::warn!(
            engine = %self.backend.kind().name(),
            "the model server sent nothing for {after:?} ({stage}); stopping it"
        );
        let pid = self.child.get().map(|c| c.process.pid());
        let raw = self.retire(super::retire::Retire::Hung).await.unwrap_or_default();
        let e = GenerationError::Hung { stage, after, raw };
        if let Some(pid) = pid {
            self.intake.record_death(pid, &e);
        }
        e
    }

    /// The brake's pending notice, to a stateful turn's client (kept for the
    /// next turn when this client left).
    async fn deliver_brake_notice(&mut self, out: &mut Outbox) {
        let Some(notice) = self.brake.take_notice() else {
            return;
        };
        let n = Notice::MemoryWarning {
            reason: notice.as_str(),
        };
        if out.send(TurnEvent::Notice(n.clone())).await.is_ok() {
            self.emit(WardenEvent::Notice { notice: n });
        } else {
            // Undelivered (the client left): the next turn says it.
            self.brake.keep_notice(notice);
        }
    }

    /// `stalled` when the client took nothing of its answer for the bound
    /// (said in the log and as an event), else `None`.
    fn stall_outcome(&self, out: &Outbox, seq: u64) -> Option<TurnOutcome> {
        let waited = out.stalled()?;
        tracing::warn!(
            seq,
            waited_ms = waited.as_millis() as u64,
            "turn {seq}: the client took nothing for {waited:?} (WARDEN_CLIENT_STALL_TIMEOUT_S); the turn was abandoned and its connection closed"
        );
        self.emit(WardenEvent::ClientStalled {
            seq,
            waited_ms: waited.as_millis() as u64,
        });
        Some(TurnOutcome::Stalled)
    }
}

/// How a relay's result ends the turn.
fn ended(relayed: Result<Relayed, GenerationError>) -> Ended {
    match relayed {
        Ok(Relayed::Completed { finish, timings, .. }) => (TurnOutcome::Completed, finish, timings),
        Ok(Relayed::Abandoned) => {
            tracing::debug!("turn abandoned by the client; upstream request dropped");
            (TurnOutcome::Abandoned, Finish::Nothing, None)
        }
        // The child's own error event ended the stream: close the turn.
        Ok(Relayed::UpstreamError) => (TurnOutcome::Failed, Finish::Stream(None), None),
        Err(e) => failed(e),
    }
}
