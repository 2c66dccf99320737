//! A turn: resolve the model, relay the child's answer to the caller
//! (`relay`), watch for a dead, hung or abandoned turn, set the keep-alive
//! the request asked for. Part of `EngineCore`; runs inside the atomic
//! `Generate` handler, so nothing else touches the child until the turn's
//! last event is sent.
//!
//! Two turns, two functions: a generating route (chat, completions,
//! infill) takes the brake's `turn_start` and `turn_end` samples, its
//! reload announcements, the warden's bound and the slot
//! (`generating_turn`); an embedding, a rerank, or a tokenizer call that
//! came through the queue (its model had to load) passes its body through
//! and takes neither (`pass_through_turn`): it runs nothing the brake could
//! measure.

use bytes::Bytes;

use std::sync::Arc;

use super::core::EngineCore;
use super::outbox::Outbox;
use crate::catalog::ModelEntry;
use crate::error::WardenError;
use crate::law::brake::Point;
use crate::law::keep_alive;
use crate::law::route::Route;
use crate::messages::{Generate, Notice, TurnEvent, TurnOptions, TurnRequest};
use crate::status::{TurnOutcome, TurnTimings, WardenEvent};

/// What ends a turn, sent after the brake's turn end and its notice.
#[derive(Debug)]
pub enum Finish {
    /// A stream's end: the child's held-back `[DONE]` event, then `Done`.
    Stream(Option<Bytes>),
    /// One final event (a whole body, or an error).
    Event(TurnEvent),
    /// Nothing (the client is gone).
    Nothing,
}

impl Finish {
    /// Sends what closes the turn (a gone client is no error here).
    async fn send(self, out: &mut Outbox) {
        match self {
            Finish::Event(ev) => {
                let _ = out.send(ev).await;
            }
            Finish::Stream(done) => {
                if let Some(done) = done {
                    let _ = out.send(TurnEvent::Chunk(done)).await;
                }
                let _ = out.send(TurnEvent::Done).await;
            }
            Finish::Nothing => {}
        }
    }
}

/// How a relay ended without an error of the warden's own.
#[derive(Debug)]
pub enum Relayed {
    /// The child finished.
    Completed {
        /// What remains to send closes the turn.
        finish: Finish,
        /// The child's own counts, when it gave them.
        counts: Option<super::counts::ChildCounts>,
        /// How fast it answered (a stream that got events).
        timings: Option<TurnTimings>,
    },
    /// The caller went away; the upstream request was dropped (cancelled).
    Abandoned,
    /// The child itself reported an error, which was relayed as it sent it.
    UpstreamError,
}

impl EngineCore {
    /// Runs one turn to its end: the generating or the pass-through turn
    /// (each its own function), then what every turn ends with: its count,
    /// the brake's notice to a stateful turn, and only then the turn's
    /// final event.
    pub async fn run_turn(&mut self, msg: Generate) {
        let Generate {
            request,
            entry,
            events,
            seq,
            ticket,
        } = msg;
        let mut out = Outbox::new(events, self.cfg.client_stall_timeout);
        let (route, keep_alive, stateful) = (request.route, request.keep_alive, request.options.stateful);
        if out.is_closed() {
            // The client left while the turn waited in the queue.
            drop(ticket);
            self.emit(WardenEvent::TurnEnded {
                seq,
                route,
                outcome: TurnOutcome::Skipped,
                timings: None,
            });
            return;
        }
        self.emit(WardenEvent::TurnStarted { seq });
        let (outcome, finish, timings) = if self.shut_down {
            failed(shutting_down())
        } else if route.generates() {
            self.generating_turn(&entry, request, &mut out).await
        } else {
            self.pass_through_turn(&entry, request, &mut out).await
        };
        // The turn's end is published before its last events reach the
        // client, so its next look at the status sees what the turn left
        // (a respawn or an unload at its end, its keep-alive, its count).
        self.usage.turn_done();
        self.enter(super::core::Activity::Resting);
        if stateful {
            self.deliver_brake_notice(&mut out).await;
        }
        finish.send(&mut out).await;
        let outcome = self.stall_outcome(&out, seq).unwrap_or(outcome);
        // The queue place frees before the end is announced, so an observer
        // of the end never sees the turn still counted.
        drop(ticket);
        self.emit(WardenEvent::TurnEnded {
            seq,
            route,
            outcome,
            timings,
        });
        if (route.generates() || route.encodes()) && keep_alive::unload_after_turn(keep_alive) && self.child.is_live() {
            tracing::info!("the request asked for keep_alive 0; unloading after its turn");
            self.unload_idle().await;
        }
    }

    /// A generating turn (chat, completions, infill): the reload
    /// announcements and the brake's `turn_start` sample, the model, the
    /// bound, the slot, the relay, the brake's `turn_end` sample (the
    /// turn's last events wait for it) and the keep-alive. Returns the
    /// outcome, the final event (sent by `run_turn` after the brake's turn
    /// end) and a streamed answer's timings.
    async fn generating_turn(&mut self, entry: &Arc<ModelEntry>, req: TurnRequest, out: &mut Outbox) -> Ended {
        let TurnRequest {
            mut body,
            stream,
            options,
            conversation,
            route,
            keep_alive,
            ..
        } = req;
        self.begin_turn(&entry.id, options, out).await;
        if let Err(e) = self.load_for_turn(entry, out).await {
            return failed(e);
        }
        // The request's own bound: the smallest of its three fields.
        let requested = crate::law::request::requested_bound(&body);
        // Every generation runs under a bound the warden computed, in the
        // one field the child obeys on this route (the engine's hook
        // renames it for a child that reads another); the others go, so no
        // child reads another.
        let window = self.child.get().and_then(|c| c.allocated);
        let bound = crate::law::request::token_bound(requested, window);
        for f in crate::law::request::TOKEN_FIELDS {
            body.remove(f);
        }
        body.insert(route.bound_field().into(), serde_json::Value::from(bound));
        self.backend.adapt_request(&mut body, entry);
        body.insert("stream".into(), serde_json::Value::Bool(stream));
        let bytes = to_bytes(&body);
        self.note_request(&bytes, requested);
        // The single slot changes hands: a conversation's KV is kept
        // (`kv`); a raw completion or infill holds no conversation.
        let owner = conversation.filter(|_| route.keeps_conversation());
        if let Some(c) = self.child.get_mut() {
            // Until the child's own count arrives with the answer, the slot
            // holds about the prompt (its bytes over 4).
            let tokens = (bytes.len() / 4).min(u32::MAX as usize) as u32;
            self.kv.claim(c, owner.as_deref(), tokens).await;
        }
        let relayed = self.relay(route, bytes, stream, out).await;
        let abandoned = matches!(relayed, Ok(Relayed::Abandoned));
        // The child's own counts of a completed turn: the slot's size, and
        // the verdict on a restore this turn was the first to use.
        let counts = match &relayed {
            Ok(Relayed::Completed { counts, .. }) => *counts,
            _ => None,
        };
        if let Some(c) = self.child.get_mut() {
            c.engine
                .after_turn(abandoned, matches!(relayed, Ok(Relayed::Completed { .. })));
            super::kv_check::counted(c, counts);
        }
        let ended = ended(relayed);
        if self.child.holds(&entry.id) {
            self.brake_point(Point::TurnEnd, None).await;
            if let Some(k) = keep_alive {
                self.usage.hold(&entry.id, k);
            }
        }
        ended
    }

    /// A turn that passes its body through untouched (an embedding, a
    /// rerank, or a tokenizer call whose model had to load first): the
    /// model and the relay; no brake sample (it runs nothing the brake
    /// could measure), no bound, no slot. An embedding may hold its model
    /// (Ollama's clients send `keep_alive` with `/api/embed`).
    async fn pass_through_turn(&mut self, entry: &Arc<ModelEntry>, req: TurnRequest, out: &mut Outbox) -> Ended {
        if let Err(e) = self.load_for_turn(entry, out).await {
            return failed(e);
        }
        let bytes = to_bytes(&req.body);
        self.note_request(&bytes, crate::law::request::requested_bound(&req.body));
        let ended = ended(self.relay(req.route, bytes, req.stream, out).await);
        if req.route.encodes()
            && self.child.holds(&entry.id)
            && let Some(k) = req.keep_alive
        {
            self.usage.hold(&entry.id, k);
        }
        ended
    }

    /// The turn's model, loaded (its `loading` and `loaded` notices to the
    /// turn).
    async fn load_for_turn(&mut self, entry: &Arc<ModelEntry>, out: &mut Outbox) -> Result<(), WardenError> {
        self.ensure_loaded(entry, Some(out)).await?;
        #[cfg(feature = "testing")]
        if std::mem::take(&mut self.panic_next_turn) {
            panic!("a test asked this turn to panic");
        }
        Ok(())
    }

    /// The request's size as the engine's own state notes it (MLX: its
    /// tokens, estimated as body bytes / 4 plus its own bound).
    fn note_request(&mut self, bytes: &Bytes, requested: Option<u32>) {
        let asked = u64::from(requested.unwrap_or(0));
        if let Some(c) = self.child.get_mut() {
            c.engine
                .note_request((bytes.len() as u64 / 4 + asked).min(u32::MAX as u64) as u32);
        }
    }

    /// The relay, the engine busy with it; at rest again after, so the
    /// turn's end (its brake sample, a respawn there) finds the child at
    /// rest.
    async fn relay(&mut self, route: Route, bytes: Bytes, stream: bool, out: &mut Outbox) -> Result<Relayed, crate::error::GenerationError> {
        self.enter(super::core::Activity::Generating);
        let relayed = if stream {
            self.relay_stream(route, bytes, out).await
        } else {
            self.relay_whole(route, bytes).await
        };
        self.enter(super::core::Activity::Resting);
        relayed
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
        if self.brake.reload_pending(model, self.child.model_id()) {
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
    async fn announce(&self, n: Notice, events: &mut Outbox) -> bool {
        self.emit(WardenEvent::Notice { notice: n.clone() });
        events.send(TurnEvent::Notice(n)).await.is_ok()
    }
}

/// How a turn ended: its outcome, the final event `run_turn` sends after
/// the brake's turn end, and a streamed answer's timings.
type Ended = (TurnOutcome, Finish, Option<TurnTimings>);

/// A turn that failed with `e` before any answer.
fn failed(e: impl Into<WardenError>) -> Ended {
    (TurnOutcome::Failed, Finish::Event(TurnEvent::Error(e.into())), None)
}

/// How a relay's result ends the turn.
fn ended(relayed: Result<Relayed, crate::error::GenerationError>) -> Ended {
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

/// A JSON body's bytes (a map of JSON values always serializes).
fn to_bytes(body: &serde_json::Map<String, serde_json::Value>) -> Bytes {
    Bytes::from(serde_json::to_vec(body).expect("a JSON map serializes"))
}

/// The error a turn gets once the warden is shutting down.
pub fn shutting_down() -> WardenError {
    WardenError::ShuttingDown
}
