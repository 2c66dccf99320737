//! A turn: resolve the model, relay the child's answer to the caller
//! (`relay`), watch for a dead, hung or abandoned turn, set the keep-alive
//! the request asked for. Part of `EngineCore`; runs inside the atomic
//! `Generate` handler, so nothing else touches the child until the turn's
//! last event is sent.
//!
//! A generating route (chat, completions, infill) takes the brake's
//! `turn_start` and `turn_end` samples and its reload announcements; a
//! tokenizer call that came through the queue (its model had to load)
//! takes neither: it runs nothing the brake could measure.

use bytes::Bytes;

use std::sync::Arc;

use super::core::EngineCore;
use super::outbox::Outbox;
use crate::catalog::ModelEntry;
use crate::error::WardenError;
use crate::law::brake::Point;
use crate::law::keep_alive;
use crate::law::route::Route;
use crate::messages::{Generate, Notice, TurnEvent, TurnOptions};
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
    /// Runs one turn to its end: the reload announcements and the brake's
    /// `turn_start` sample, the model, the relay, the brake's `turn_end`
    /// sample (the turn's last events wait for it), the brake notice, and
    /// only then the turn's final event.
    pub async fn run_turn(&mut self, msg: Generate) {
        let Generate {
            model,
            body,
            stream,
            events,
            options,
            conversation,
            // The prefix cache's owner read it on the way here (MLX).
            kind: _,
            route,
            keep_alive,
            seq,
            ticket,
        } = msg;
        let mut out = Outbox::new(events, self.cfg.client_stall_timeout);
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
        let (outcome, finish, timings) = match self.resolve(model.as_deref()) {
            Err(e) => (TurnOutcome::Failed, Finish::Event(TurnEvent::Error(e)), None),
            Ok(_) if self.shut_down => (
                TurnOutcome::Failed,
                Finish::Event(TurnEvent::Error(shutting_down())),
                None,
            ),
            Ok(entry) => {
                if route.generates() {
                    self.begin_turn(&entry.id, options, &mut out).await;
                }
                let r = self
                    .turn(&entry, route, body, stream, &mut out, conversation.as_deref())
                    .await;
                let loaded = self.child.holds(&entry.id);
                if loaded && route.generates() {
                    self.brake_point(Point::TurnEnd, None).await;
                }
                // An embedding request may hold its model too (Ollama's
                // clients send keep_alive with /api/embed).
                if loaded
                    && (route.generates() || route.encodes())
                    && let Some(k) = keep_alive
                {
                    self.usage.hold(&entry.id, k);
                }
                r
            }
        };
        // The turn's end is published before its last events reach the
        // client, so its next look at the status sees what the turn left
        // (a respawn or an unload at its end, its keep-alive, its count).
        self.usage.turn_done();
        self.enter(super::core::Activity::Resting);
        if options.stateful {
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

    /// Loads the model and relays the answer; returns the outcome, the
    /// turn's final event (which the caller sends after the brake's turn
    /// end) and a streamed answer's timings.
    async fn turn(
        &mut self,
        entry: &Arc<ModelEntry>,
        route: Route,
        mut body: serde_json::Map<String, serde_json::Value>,
        stream: bool,
        events: &mut Outbox,
        conversation: Option<&str>,
    ) -> (TurnOutcome, Finish, Option<TurnTimings>) {
        if let Err(e) = self.ensure_loaded(entry, Some(events)).await {
            return (TurnOutcome::Failed, Finish::Event(TurnEvent::Error(e.into())), None);
        }
        #[cfg(feature = "testing")]
        if std::mem::take(&mut self.panic_next_turn) {
            panic!("a test asked this turn to panic");
        }
        // The request's own bound: the smallest of its three fields.
        let requested = crate::law::request::requested_bound(&body);
        if route.generates() {
            // Every generation runs under a bound the warden computed, in
            // the one field the child obeys on this route (the engine's
            // hook renames it for a child that reads another); the others
            // go, so no child reads another.
            let window = self.child.get().and_then(|c| c.allocated);
            let bound = crate::law::request::token_bound(requested, window);
            for f in crate::law::request::TOKEN_FIELDS {
                body.remove(f);
            }
            body.insert(route.bound_field().into(), serde_json::Value::from(bound));
            self.backend.adapt_request(&mut body, entry);
            body.insert("stream".into(), serde_json::Value::Bool(stream));
        }
        // A map of JSON values always serializes.
        let bytes = Bytes::from(serde_json::to_vec(&body).expect("a JSON map serializes"));
        let asked = u64::from(requested.unwrap_or(0));
        if let Some(c) = self.child.get_mut() {
            c.engine
                .note_request((bytes.len() as u64 / 4 + asked).min(u32::MAX as u64) as u32);
        }
        if route.generates() {
            // The single slot changes hands: a conversation's KV is kept
            // (`kv`); a raw completion or infill holds no conversation.
            let owner = if route.keeps_conversation() { conversation } else { None };
            // Until the child's own count arrives with the answer, the
            // slot holds about the prompt (its bytes over 4).
            if let Some(c) = self.child.get_mut() {
                self.kv.claim(c, owner, (bytes.len() / 4).min(u32::MAX as usize) as u32).await;
            }
        }
        self.enter(super::core::Activity::Generating);
        let relayed = if stream {
            self.relay_stream(route, bytes, events).await
        } else {
            self.relay_whole(route, bytes).await
        };
        // The answer is relayed: the turn's end (its brake sample, a
        // respawn there) happens with the child at rest.
        self.enter(super::core::Activity::Resting);
        if route.generates() {
            let abandoned = matches!(relayed, Ok(Relayed::Abandoned));
            // The child's own counts of a completed turn: the slot's size,
            // and the verdict on a restore this turn was the first to use.
            let counts = match &relayed {
                Ok(Relayed::Completed { counts, .. }) => *counts,
                _ => None,
            };
            if let Some(c) = self.child.get_mut() {
                c.engine
                    .after_turn(abandoned, matches!(relayed, Ok(Relayed::Completed { .. })));
                super::kv_check::counted(c, counts);
            }
        }
        match relayed {
            Ok(Relayed::Completed { finish, timings, .. }) => (TurnOutcome::Completed, finish, timings),
            Ok(Relayed::Abandoned) => {
                tracing::debug!("turn abandoned by the client; upstream request dropped");
                (TurnOutcome::Abandoned, Finish::Nothing, None)
            }
            // The child's own error event ended the stream: close the turn.
            Ok(Relayed::UpstreamError) => (TurnOutcome::Failed, Finish::Stream(None), None),
            Err(e) => (TurnOutcome::Failed, Finish::Event(TurnEvent::Error(e.into())), None),
        }
    }
}

/// The error a turn gets once the warden is shutting down.
pub fn shutting_down() -> WardenError {
    WardenError::ShuttingDown
}
