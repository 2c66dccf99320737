//! A turn's admission: the decisions before its answer streams. Part of
//! `EngineCore`; runs inside an atomic handler (`Generate`, or the end of
//! another turn that freed what it waited for). A turn that cannot start
//! yet waits in the intake, in arrival order; one that starts gets a slot
//! of the child (`law::slots`), its KV restored there, its bound, and a
//! relay task of its own (`relay`), so several turns on one model stream
//! at once while every decision stays one at a time in the mailbox. The
//! order of an admission is the machine `admission::Admitting` (no I/O);
//! `admit` carries its steps out.
//!
//! A turn waits when:
//! - turns run on another model's child (a switch stops the child), or on
//!   a child that died (the reload waits for their ends);
//! - every slot is busy, or its answer would not fit beside the running
//!   turns in the shared KV pool (`law::slots::admit`);
//! - a brake action that stops the child waits for the running turns
//!   (`intake::HeldBrake`), or an item before it waits.
//!
//! Two turns, two paths: a generating route (chat, completions, infill)
//! takes the brake's `turn_start` sample, its reload announcements, the
//! warden's bound and a slot (`admit_generation`); an embedding, a rerank,
//! or a tokenizer call that came through the queue (its model had to load)
//! passes its body through and takes neither: it runs nothing the brake
//! could measure.

use std::sync::Arc;

use super::admission::{self, Admitting, Came, Outcome, Step, View};
use super::core::EngineCore;
use super::intake::Pending;
use super::waiting::{Live, Read, Waiting};
use super::load::Loading;
use super::peers::Patience;
use super::outbox::Outbox;
use super::relay::{RelayJob, RelayLine, Running};
use super::carry::Carry;
use super::seating::{self, Ask, Seat};
use crate::law::splice::Splice;
use crate::catalog::ModelEntry;
use crate::error::WardenError;
use crate::law::brake::Point;
use crate::messages::body::ChildTurn;
use crate::messages::{Generate, Notice, TurnEvent, TurnOptions};
use crate::status::{TurnOutcome, WardenEvent};

/// An admission's result.
enum Admission {
    /// Handed to its relay.
    Started(RelayJob),
    /// Ended here (skipped, refused, or its load failed).
    Ended,
    /// Not yet: back to the head of the queue.
    Wait(Waiting),
    /// Not yet: this model yields its memory to the model named, once its
    /// running turns end (`schedule`).
    Yield(Waiting, String),
}

/// A generating turn's seat (`seating`), with the conversation it keeps
/// the slot for (its prompt's size and text are the turn's `Read`).
struct Seated {
    seat: Seat,
    owner: Option<String>,
}

impl EngineCore {
    /// A `Generate` arrives: it waits behind what waits, and whatever can
    /// start now starts.
    pub async fn take_turn(&mut self, msg: Generate) {
        let Generate {
            request,
            entry,
            events,
            seq,
            ticket,
            home,
        } = msg;
        let out = Outbox::new(events, self.cfg().client_stall_timeout).homed(home);
        let read = Read::of(&request.body);
        self.intake.push(Pending::Turn(Box::new(Waiting {
            request,
            entry,
            out,
            seq,
            arrived: tokio::time::Instant::now(),
            ticket,
            started: false,
            carry: None,
            read,
        })));
        self.settle().await;
    }

    /// What every handler ends with: a brake action held for the running
    /// turns is carried out once none runs, then what waits is admitted in
    /// arrival order until its head cannot start.
    pub(crate) async fn settle(&mut self) {
        if let Some(held) = self.intake.take_brake() {
            self.carry_out_brake(held).await;
        }
        while let Some(p) = self.intake.pop() {
            let p = match p {
                Pending::Turn(w) => match self.admit(*w).await {
                    Admission::Started(job) => {
                        self.spawn_relay(job);
                        continue;
                    }
                    Admission::Ended => continue,
                    Admission::Wait(w) => Pending::Turn(Box::new(w)),
                    Admission::Yield(w, to) if self.intake.running() == 0 => {
                        // Nothing runs: it leaves now, and the turn loads
                        // it again behind the model it yielded to.
                        self.intake.push_front(Pending::Turn(Box::new(w)));
                        self.yield_memory(&to).await;
                        continue;
                    }
                    Admission::Yield(w, _) => Pending::Turn(Box::new(w)),
                },
                other if self.intake.running() == 0 && !self.intake.brake_held() => match self.control(other).await {
                    None => continue,
                    Some(waits) => waits,
                },
                other => other,
            };
            self.intake.push_front(p);
            break;
        }
        self.drop_unwanted_room();
        self.publish();
    }

    /// A reset, a load or an unload whose turns before it ended; a load
    /// that waits for room comes back, to wait at the head.
    async fn control(&mut self, p: Pending<Live>) -> Option<Pending<Live>> {
        match p {
            Pending::Reset(r) => self.reset_prefix(r).await,
            // Its caller went away: nobody wants the load.
            Pending::Load(ask) if ask.reply.is_closed() => {}
            Pending::Load(ask) => match self.load_request(ask.model.as_deref(), ask.keep_alive, ask.arrived).await {
                Ok(Loading::Waits) => return Some(Pending::Load(ask)),
                Ok(Loading::Ready) => {
                    let _ = ask.reply.send(Ok(self.snapshot()));
                }
                Err(e) => {
                    let _ = ask.reply.send(Err(e));
                }
            },
            Pending::Unload(reply) => {
                let was = self.retire(super::leaving::Retire::Request).await.is_some();
                let _ = reply.send(Ok(was));
            }
            Pending::Turn(_) => unreachable!("turns are admitted, not controlled"),
        }
        None
    }

    /// Hands a started turn to its relay task (a core with no actor, as in
    /// a unit test, relays inline).
    fn spawn_relay(&mut self, job: RelayJob) {
        self.intake.started();
        self.usage.running(self.intake.running(), tokio::time::Instant::now());
        self.publish();
        let Some(ends) = self.own.as_ref().map(|o| o.ends.clone()) else {
            unreachable!("an engine core admits turns only inside its actor")
        };
        // A stream runs on its reader's thread (`Outbox::home`); a whole
        // answer stays here, where the pooled connections it reuses live.
        match job.turn.out.home().filter(|_| job.turn.stream).cloned() {
            Some(home) => {
                // A stopped arbiter drops the job: it reports itself ended.
                home.spawn(job.run_to(ends));
            }
            None => {
                actix::spawn(job.run_to(ends));
            }
        }
    }

    /// One turn's admission: each step its order (`admission`) asks,
    /// carried out here.
    async fn admit(&mut self, mut w: Waiting) -> Admission {
        let mut admitting = Admitting::new(admission::Turn {
            generates: w.request.route.generates(),
            announced: w.started,
            resumed: w.carry.is_some(),
        });
        // What the asking steps found, for the verdicts that follow them.
        let mut yields = None;
        let mut load_failed = None;
        let mut seated = None;
        while let Some(step) = admitting.next(self.admission_view(&w)) {
            match step {
                Step::Skip => {
                    drop(w.ticket.take());
                    self.emit(WardenEvent::TurnEnded {
                        seq: w.seq,
                        route: w.request.route,
                        outcome: TurnOutcome::Skipped,
                        timings: None,
                    });
                    return Admission::Ended;
                }
                Step::Refuse => {
                    self.refuse(w, super::turn_end::failed(shutting_down())).await;
                    return Admission::Ended;
                }
                Step::Wait => return Admission::Wait(w),
                Step::AskYield => {
                    yields = self.yields_to(&w.entry.id);
                    admitting.took(Outcome::Yields(yields.is_some()));
                }
                Step::Yield => return Admission::Yield(w, yields.take().expect("the model it yields to")),
                Step::Probe => admitting.took(Outcome::Seated(self.seat(&w).is_some())),
                Step::Announce => {
                    w.started = true;
                    self.emit(WardenEvent::TurnStarted { seq: w.seq });
                }
                Step::Begin => self.begin_turn(&w.entry.id, w.request.options, &mut w.out).await,
                Step::Load => {
                    let patience = Patience {
                        since: w.arrived,
                        at_most: w.request.wait_at_most,
                    };
                    let loaded = match self.load_for_turn(&w.entry, &mut w.out, patience).await {
                        Ok(Loading::Ready) => Came::Ready,
                        Ok(Loading::Waits) => Came::Waits,
                        Err(e) => {
                            load_failed = Some(e);
                            Came::Failed
                        }
                    };
                    admitting.took(Outcome::Loaded(loaded));
                }
                Step::Fail => {
                    let e = load_failed.take().expect("the load's error");
                    self.refuse(w, super::turn_end::failed(e)).await;
                    return Admission::Ended;
                }
                Step::CountResumed => {
                    if let Some(carry) = w.carry.as_deref_mut() {
                        self.count_resumed(&mut w.request, carry, &w.entry.id, w.seq).await;
                    }
                }
                Step::Seat => {
                    seated = self.seat(&w);
                    admitting.took(Outcome::Seated(seated.is_some()));
                }
                Step::Generate => {
                    let seat = seated.take().expect("the seat it takes");
                    return self.admit_generation(w, seat).await.map_or(Admission::Ended, Admission::Started);
                }
                Step::PassThrough => {
                    return self.admit_pass_through(w).map_or(Admission::Ended, Admission::Started);
                }
            }
        }
        unreachable!("an admission ends in a verdict")
    }

    /// The engine's view, for the admission's order, of `w`.
    fn admission_view(&self, w: &Waiting) -> View {
        View {
            client_gone: w.out.is_closed(),
            shut_down: self.shut_down,
            brake_held: self.intake.brake_held(),
            running: self.intake.running() > 0,
            serves: self.child.holds(&w.entry.id) && self.child.get().is_none_or(|c| c.process.exit().is_none()),
            waits_for_room: self.waits_for_room(&w.entry.id),
        }
    }

    /// The slot a generating turn takes and the law's admission to it, on
    /// the live child (`seating::seat`); `None` when it must wait (or no
    /// child runs).
    fn seat(&self, w: &Waiting) -> Option<Seated> {
        let c = self.child.get()?;
        let owner = self.owner(w);
        let ask = Ask {
            owner: owner.as_deref(),
            text: w.read.text.as_deref(),
            prompt: w.read.prompt,
            requested: w.request.body.bound(),
        };
        let window = c.working_window().unwrap_or(crate::law::request::UNKNOWN_WINDOW_BOUND);
        let seat = seating::seat(&c.slots, window, ask, self.kv.moving(c), tokio::time::Instant::now())?;
        tracing::debug!(
            seq = w.seq,
            slot = seat.slot,
            shared = seat.shared,
            "turn {}: slot {} of {} (shares about {} of its text tokens)",
            w.seq,
            seat.slot,
            c.slots.len(),
            seat.shared
        );
        Some(Seated { seat, owner })
    }

    /// The conversation a generating turn's slot is kept for (a raw
    /// completion or infill holds none).
    fn owner(&self, w: &Waiting) -> Option<String> {
        w.request.conversation.clone().filter(|_| w.request.route.keeps_conversation())
    }

    /// A generating turn on its seat: idle conversations in its way go to
    /// disk (for room, then to keep the pool compact: both before its
    /// prompt reaches the child, so its cells land at the bottom of the
    /// pool), its bound goes in the one field the child obeys, its slot
    /// changes hands (the previous owner's KV saved, its own restored), and
    /// its relay is made.
    async fn admit_generation(&mut self, w: Waiting, seated: Seated) -> Option<RelayJob> {
        let Seated { seat, owner } = seated;
        let Waiting {
            request,
            entry,
            out,
            seq,
            ticket,
            carry,
            read,
            ..
        } = w;
        let requested = request.body.bound();
        let wire = self.backend.wire(request.route, &entry);
        let c = self.child.get_mut().expect("a seat is found only on a live child");
        // The slot the warden chose, which holds the conversation (a child
        // of one slot has no choice to make).
        let slot = (c.slots.len() > 1).then_some(seat.slot);
        // The body stays as its client sent it: a death may send it to the
        // next child.
        let bytes = request.body.to_child(Some(ChildTurn {
            wire: &wire,
            bound: seat.bound,
            stream: request.stream,
            slot,
        }));
        let asked = u64::from(requested.unwrap_or(0));
        c.engine
            .note_request((bytes.len() as u64 / 4 + asked).min(u32::MAX as u64) as u32);
        let mut carry = carry.unwrap_or_else(|| Box::new(Carry::new(request.route)));
        if carry.continuing
            && let Some(d) = carry.dialect
        {
            // The joint holds what was sent from here on (`Carry::sent`).
            let before = std::mem::take(&mut carry.transcript);
            let produced = carry.produced.unwrap_or(0);
            carry.splice = Some(Splice::new(d, before, produced, carry.echo.take()));
        }
        // Until the child's own count arrives with the answer, the slot
        // holds about the prompt.
        let moves = seat.moves(self.kv.moves(c), owner, read.prompt);
        for e in self.kv.carry(c, moves).await {
            self.outlets.metrics.observe(&e);
            let _ = self.outlets.events_tx.send(e);
        }
        c.slots.start(seat.slot, seq, seat.reserve, seat.bound, read.text);
        let line = self.relay_line();
        Some(RelayJob {
            line,
            turn: Running {
                pid: self.child.get().map_or(0, |c| c.process.pid()),
                entry,
                out,
                seq,
                ticket,
                route: request.route,
                keep_alive: request.keep_alive,
                stateful: request.options.stateful,
                stream: request.stream,
                request: Some(request),
                carry,
            },
            body: bytes,
        })
    }

    /// A turn that passes its body through untouched (an embedding, a
    /// rerank, or a tokenizer call whose model had to load first): no
    /// brake sample (it runs nothing the brake could measure), no bound,
    /// no slot of the warden's.
    fn admit_pass_through(&mut self, w: Waiting) -> Option<RelayJob> {
        let bytes = w.request.body.to_child(None);
        if let Some(c) = self.child.get_mut() {
            let asked = u64::from(w.request.body.bound().unwrap_or(0));
            c.engine
                .note_request((bytes.len() as u64 / 4 + asked).min(u32::MAX as u64) as u32);
        }
        let line = self.relay_line();
        Some(RelayJob {
            line,
            turn: Running {
                pid: self.child.get().map_or(0, |c| c.process.pid()),
                entry: w.entry,
                out: w.out,
                seq: w.seq,
                ticket: w.ticket,
                route: w.request.route,
                keep_alive: w.request.keep_alive,
                stateful: w.request.options.stateful,
                stream: w.request.stream,
                request: None,
                carry: Box::default(),
            },
            body: bytes,
        })
    }

    /// What a relay needs of the live child.
    fn relay_line(&self) -> RelayLine {
        let c = self.child.get().expect("a turn relays only after its model loaded");
        RelayLine {
            client: c.client.clone(),
            exit: c.process.exit_watch(),
            loss: self.worker_loss(),
            first_token_timeout: self.cfg().first_token_timeout,
            stall_timeout: self.cfg().stall_timeout,
            request_timeout: self.cfg().request_timeout,
        }
    }

    /// The turn's model, loaded (its `loading` and `loaded` notices to the
    /// turn).
    async fn load_for_turn(
        &mut self,
        entry: &Arc<ModelEntry>,
        out: &mut Outbox,
        patience: Patience,
    ) -> Result<Loading, WardenError> {
        let loading = self.ensure_loaded(entry, Some(out), patience).await?;
        #[cfg(feature = "testing")]
        if loading == Loading::Ready && std::mem::take(&mut self.panic_next_turn) {
            panic!("a test asked this turn to panic");
        }
        Ok(loading)
    }

    /// The start of a turn for `model`, before it is resolved: at most one
    /// reload announcement (a brake reload pending, else an idle reap's
    /// reload when the conversation has messages), the brake's `turn_start`
    /// sample when the loaded child is this turn's model (a respawn there is
    /// said in this same turn), and the reload mark consumed.
    async fn begin_turn(&mut self, model: &str, options: TurnOptions, events: &mut Outbox) {
        let mut announced = false;
        // The idle record is always consumed here; it counts only for the
        // reaped model while nothing is loaded.
        let idle = self.usage.take_reaped();
        if self.brake.reload_pending(model, self.child.model_id(), self.sensor.now_ms()) {
            announced = self.announce(Notice::MemoryReload { reason: "brake" }, events).await;
        } else if idle.as_deref() == Some(model) && !self.child.is_live() && options.announce_idle_reload {
            announced = self.announce(Notice::MemoryReload { reason: "idle" }, events).await;
        }
        // The mark is taken either way: a turn announces a respawn once.
        let _ = self.brake.take_respawned();
        if self.child.holds(model) {
            self.brake_point(Point::TurnStart, None).await;
            if self.brake.take_respawned() && !announced {
                self.announce(Notice::MemoryReload { reason: "brake" }, events).await;
            }
        }
    }

    /// Sends a notice to the turn and the event stream.
    pub(crate) async fn announce(&self, n: Notice, events: &mut Outbox) -> bool {
        self.emit(WardenEvent::Notice { notice: n.clone() });
        events.send(TurnEvent::Notice(n)).await.is_ok()
    }
}

/// The error a turn gets once the warden is shutting down.
pub fn shutting_down() -> WardenError {
    WardenError::ShuttingDown
}
