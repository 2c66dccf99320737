//! A turn's end, when its relay reports (`TurnRelayed`), carried out in
//! the order the machine `ending::Ending` keeps (no I/O there): what the
//! relay found becomes the engine's decision (a hung child stopped, a
//! death classified once and told to every turn that ran on that child),
//! a death the law lets go on goes back to wait for the next child, the
//! slot is freed with the child's own counts, the brake takes its
//! `turn_end` sample (a respawn it decides waits for the other running
//! turns), and only then the turn's last events go out. Part of
//! `EngineCore`; runs inside the atomic `TurnRelayed` handler.

use std::time::Duration;

use super::core::EngineCore;
use super::ending::{self, Came, Ending, Outcome, Step, View};
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
}

/// The end's order's view of a turn on `route`.
fn facts(came: Came, route: Route, keep_alive: Option<KeepAlive>, stateful: bool) -> ending::Turn {
    ending::Turn {
        came,
        generates: route.generates(),
        holds_model: route.generates() || route.encodes(),
        keep_alive: keep_alive.is_some(),
        unload_after: keep_alive::unload_after_turn(keep_alive),
        stateful,
    }
}

impl EngineCore {
    /// A relay ended: each step its end's order (`ending`) asks, carried
    /// out here.
    pub async fn turn_relayed(&mut self, done: TurnRelayed) {
        let TurnRelayed { mut turn, end } = done;
        // What the relay came to; trouble is known once judged.
        let (came, mut relayed, mut trouble) = match end {
            RelayEnd::Relayed(r) => (Came::Relayed, Some(Ok(r)), None),
            RelayEnd::Failed(e) => (Came::Failed, Some(Err(e)), None),
            trouble => (Came::Trouble, None, Some(trouble)),
        };
        let mut ending = Ending::new(facts(came, turn.route, turn.keep_alive, turn.stateful));
        while let Some(step) = ending.next(self.view_of(&turn)) {
            match step {
                Step::Ended => self.turn_off_running(),
                Step::Judge => {
                    let trouble = trouble.take().expect("only trouble is judged");
                    relayed = Some(Err(self.judge(trouble).await));
                }
                Step::Recall => relayed = Some(Err(self.recall(turn.pid))),
                Step::Resume => {
                    let Some(Err(e)) = relayed.take() else {
                        unreachable!("only an error is put to the law")
                    };
                    match self.resume_or_fail(&mut turn, e) {
                        Ok(()) => ending.took(Outcome::Resumed(true)),
                        Err(e) => {
                            relayed = Some(Err(e));
                            ending.took(Outcome::Resumed(false));
                        }
                    }
                }
                Step::Requeue => return self.requeue(turn),
                Step::Free => self.free_slot(&turn, relayed.as_ref()),
                Step::Hold => {
                    if let Some(k) = turn.keep_alive {
                        self.usage.hold(&turn.entry.id, k);
                    }
                }
                Step::Brake => self.brake_point(Point::TurnEnd, None).await,
                Step::Count => {
                    let Running {
                        out, seq, ticket, route, ..
                    } = turn;
                    let closing = Closing {
                        out,
                        ticket,
                        seq,
                        route,
                    };
                    let ended = ended(relayed.take().expect("how the relay ended"));
                    return self.close(ending, Step::Count, closing, ended).await;
                }
                Step::Notice | Step::Finish | Step::Said | Step::Unload => {
                    unreachable!("the turn is counted before its last events")
                }
            }
        }
    }

    /// The engine's view, for the end's order, of `turn`.
    fn view_of(&self, turn: &Running) -> View {
        View {
            on_its_child: self.child.get().is_some_and(|c| c.process.pid() == turn.pid),
            live: self.child.is_live(),
            serves: self.child.holds(&turn.entry.id),
            idle: self.intake.idle(),
        }
    }

    /// The turn no longer runs.
    fn turn_off_running(&mut self) {
        self.intake.ended();
        self.usage.running(self.intake.running(), tokio::time::Instant::now());
    }

    /// `turn`'s slot freed on its child, with the child's own counts.
    fn free_slot(&mut self, turn: &Running, relayed: Option<&Result<Relayed, GenerationError>>) {
        let Some(c) = self.child.get_mut().filter(|c| c.process.pid() == turn.pid) else {
            return;
        };
        let counts = match relayed {
            Some(Ok(Relayed::Completed { counts, .. })) => *counts,
            _ => None,
        };
        let abandoned = matches!(relayed, Some(Ok(Relayed::Abandoned)));
        let completed = matches!(relayed, Some(Ok(Relayed::Completed { .. })));
        c.engine
            .after_turn(abandoned, completed, counts.map(|n| n.slot_tokens()));
        if let Some((slot, busy)) = c.slots.end(turn.seq, tokio::time::Instant::now()) {
            super::kv_check::counted(c, slot, counts);
            self.kv.turn_counted(c, &busy, counts);
        }
    }

    /// A waiting turn that ends before its relay (shut down, or its load
    /// failed): the end's order from its count on.
    pub(crate) async fn refuse(&mut self, w: Waiting, ended: Ended) {
        if !w.started {
            self.emit(WardenEvent::TurnStarted { seq: w.seq });
        }
        let r = &w.request;
        let mut ending = Ending::closing(facts(Came::Failed, r.route, r.keep_alive, r.options.stateful));
        let view = View {
            serves: self.child.holds(&w.entry.id),
            live: self.child.is_live(),
            idle: self.intake.idle(),
            on_its_child: false,
        };
        let Some(first) = ending.next(view) else { return };
        let closing = Closing {
            out: w.out,
            ticket: w.ticket,
            seq: w.seq,
            route: w.request.route,
        };
        self.close(ending, first, closing, ended).await;
    }

    /// What every turn ends with, from `first` on: its count, the brake's
    /// notice to a stateful turn, and only then the turn's final event; a
    /// keep-alive of 0 unloads once nothing else runs or waits.
    async fn close(&mut self, mut ending: Ending, first: Step, c: Closing, ended: Ended) {
        let Closing {
            mut out,
            ticket,
            seq,
            route,
        } = c;
        let (outcome, finish, timings) = ended;
        let mut finish = Some(finish);
        let mut ticket = ticket;
        let mut step = Some(first);
        while let Some(s) = step {
            match s {
                Step::Count => {
                    // The turn's end is published before its last events
                    // reach the client, so its next look at the status sees
                    // what the turn left (a respawn or an unload at its end,
                    // its keep-alive, its count). Its queue place frees then
                    // too: a client that read its answer's end and asked the
                    // queue's depth once saw this turn still counted (a real
                    // test read 1 on a fresh machine: the count lagged the
                    // reply, no turn leaked).
                    self.usage.turn_done(super::state::Used::read());
                    drop(ticket.take());
                    self.publish();
                }
                Step::Notice => self.deliver_brake_notice(&mut out).await,
                Step::Finish => {
                    if let Some(f) = finish.take() {
                        f.send(&mut out).await;
                    }
                }
                Step::Said => {
                    let outcome = self.stall_outcome(&out, seq).unwrap_or(outcome);
                    self.emit(WardenEvent::TurnEnded {
                        seq,
                        route,
                        outcome,
                        timings,
                    });
                }
                Step::Unload => {
                    tracing::info!("the request asked for keep_alive 0; unloading after its turn");
                    self.unload_idle().await;
                }
                other => unreachable!("{other:?} comes before a turn is counted"),
            }
            // Only a keep-alive of 0 reads the engine from here on.
            let view = View {
                live: self.child.is_live(),
                idle: self.intake.idle(),
                ..View::default()
            };
            step = ending.next(view);
        }
    }

    /// The live child's trouble, as the engine's decision: a broken stream
    /// is the child's classified death when it died, a hung child is
    /// stopped, a lost worker's child is stopped.
    async fn judge(&mut self, trouble: RelayEnd) -> GenerationError {
        match trouble {
            RelayEnd::Broken => self.broken_stream().await,
            RelayEnd::Hung { stage, after } => self.hung(stage, after).await,
            RelayEnd::Lost(lost) => self.retire_for_worker(lost).await,
            RelayEnd::Relayed(_) | RelayEnd::Failed(_) => unreachable!("an answer or a refusal is no trouble"),
        }
    }

    /// How the child a turn ran on ended, as the turn that judged it first
    /// recorded it.
    fn recall(&self, pid: u32) -> GenerationError {
        self.intake.death_of(pid).unwrap_or_else(|| {
            GenerationError::Transport("the stream ended before the answer completed".into())
        })
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
        let raw = self.retire(super::leaving::Retire::Hung).await.unwrap_or_default();
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
