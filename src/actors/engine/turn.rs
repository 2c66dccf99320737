//! A chat turn: resolve the model, relay the child's answer to the caller,
//! watch for a dead, hung or abandoned turn. Part of `EngineCore`; runs
//! inside the atomic `Generate` handler, so nothing else touches the child
//! until the turn's last event is sent.
//!
//! The relay passes the child's SSE events through byte for byte (the
//! parser's zero-copy `raw` slice), so the warden adds no re-encoding to the
//! stream. Watchdogs: the first event must arrive within
//! `first_token_timeout` (llama-server sends its headers with the first
//! token), each next one within `stall_timeout`; a child that misses either is
//! stopped and the turn ends with `child_hung`. A non-streamed request, whose
//! progress cannot be seen, is bounded by `request_timeout` as a whole.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::time::Instant;

use std::sync::Arc;

use super::core::EngineCore;
use super::outbox::{Outbox, Refused};
use crate::catalog::ModelEntry;
use crate::child::process;
use crate::child::sse::SseParser;
use crate::error::{ApiError, GenerationError};
use crate::law::brake::Point;
use crate::messages::prefix::TurnKind;
use crate::messages::{Generate, Notice, TurnEvent, TurnOptions};
use crate::status::{EngineState, WardenEvent};

/// What ends a turn, sent after the brake's turn end and its notice.
#[derive(Debug)]
pub enum Finish {
    /// A stream's end: the child's held-back `[DONE]` event, then `Done`.
    Stream(Option<Bytes>),
    /// One final event (a whole body, or an error).
    Event(TurnEvent),
    /// Nothing (the client is gone, or the child's own error was relayed).
    Nothing,
}

/// How a relay ended without an error of the warden's own.
#[derive(Debug)]
pub enum Relayed {
    /// The child finished; what remains to send closes the turn.
    Completed(Finish),
    /// The caller went away; the upstream request was dropped (cancelled).
    Abandoned,
    /// The child itself reported an error, which was relayed as it sent it.
    UpstreamError,
}

/// How long a broken stream waits for the child's exit before it is called a
/// transport failure rather than a death (SIGKILL closes the socket first).
const DEATH_GRACE: Duration = Duration::from_secs(1);
/// Bound of reading an error body from the child.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(5);

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
            kind,
            seq,
            ticket,
        } = msg;
        let mut out = Outbox::new(events, self.cfg.client_stall_timeout);
        if out.is_closed() {
            // The client left while the turn waited in the queue.
            drop(ticket);
            self.emit(WardenEvent::TurnEnded {
                seq,
                outcome: "skipped",
            });
            return;
        }
        self.emit(WardenEvent::TurnStarted { seq });
        let (outcome, finish) = match self.resolve(model.as_deref()) {
            Err(e) => ("failed", Finish::Event(TurnEvent::Error(e))),
            Ok(_) if self.shut_down => ("failed", Finish::Event(TurnEvent::Error(shutting_down()))),
            Ok(entry) => {
                self.begin_turn(&entry.id, options, &mut out).await;
                let r = self
                    .turn(&entry, body, stream, &mut out, conversation.as_deref(), kind)
                    .await;
                if self.child.as_ref().is_some_and(|c| c.model_id() == entry.id) {
                    self.brake_point(Point::TurnEnd).await;
                }
                r
            }
        };
        if options.stateful
            && let Some(notice) = self.brake.notice.take()
        {
            let n = Notice::MemoryWarning {
                reason: notice.as_str(),
            };
            if out.send(TurnEvent::Notice(n.clone())).await.is_ok() {
                self.emit(WardenEvent::Notice { notice: n });
            } else {
                // Undelivered (the client left): the next turn says it.
                self.brake.notice = Some(notice);
            }
        }
        match finish {
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
        let outcome = match out.stalled() {
            Some(waited) => {
                tracing::warn!(
                    seq,
                    waited_ms = waited.as_millis() as u64,
                    "turn {seq}: the client took nothing for {waited:?} (WARDEN_CLIENT_STALL_TIMEOUT_S); the turn was abandoned and its connection closed"
                );
                self.emit(WardenEvent::ClientStalled {
                    seq,
                    waited_ms: waited.as_millis() as u64,
                });
                "stalled"
            }
            None => outcome,
        };
        self.turns += 1;
        self.touch();
        self.state = if self.child.is_some() {
            EngineState::Ready
        } else {
            EngineState::Idle
        };
        self.publish();
        // The queue place frees before the end is announced, so an observer
        // of the end never sees the turn still counted.
        drop(ticket);
        self.emit(WardenEvent::TurnEnded { seq, outcome });
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
        let idle = self.idle_reload.take();
        if self.brake_reload_pending(model) {
            announced = self.announce(Notice::MemoryReload { reason: "brake" }, events).await;
        } else if idle.as_deref() == Some(model) && self.child.is_none() && options.announce_idle_reload {
            announced = self.announce(Notice::MemoryReload { reason: "idle" }, events).await;
        }
        if self.child.as_ref().is_some_and(|c| c.model_id() == model) {
            self.brake.respawned = false;
            self.brake_point(Point::TurnStart).await;
            if self.brake.respawned && !announced {
                self.announce(Notice::MemoryReload { reason: "brake" }, events).await;
            }
        }
        self.brake.respawned = false;
    }

    /// Sends a notice to the turn and the event stream.
    async fn announce(&self, n: Notice, events: &mut Outbox) -> bool {
        self.emit(WardenEvent::Notice { notice: n.clone() });
        events.send(TurnEvent::Notice(n)).await.is_ok()
    }

    /// Loads the model and relays the answer; returns the outcome and the
    /// turn's final event, which the caller sends after the brake's turn end.
    async fn turn(
        &mut self,
        entry: &Arc<ModelEntry>,
        mut body: serde_json::Map<String, serde_json::Value>,
        stream: bool,
        events: &mut Outbox,
        conversation: Option<&str>,
        kind: TurnKind,
    ) -> (&'static str, Finish) {
        if let Err(e) = self.ensure_loaded(entry, Some(events)).await {
            return ("failed", Finish::Event(TurnEvent::Error(e.to_api())));
        }
        // MLX: the turn's conversation owns the prefix cache before its
        // request reaches the child (no-op on the llama.cpp engines).
        self.claim_prefix(conversation, kind).await;
        self.backend.adapt_request(&mut body, entry);
        body.insert("stream".into(), serde_json::Value::Bool(stream));
        // A map of JSON values always serializes.
        let bytes = Bytes::from(serde_json::to_vec(&body).expect("a JSON map serializes"));
        let max_tokens = body.get("max_tokens").and_then(|v| v.as_u64()).unwrap_or(0);
        self.last_request_tokens = (bytes.len() as u64 / 4 + max_tokens).min(u32::MAX as u64) as u32;
        self.state = EngineState::Generating;
        self.publish();
        let relayed = if stream {
            self.relay_stream(bytes, events).await
        } else {
            self.relay_whole(bytes).await
        };
        match relayed {
            Ok(Relayed::Completed(finish)) => ("completed", finish),
            Ok(Relayed::Abandoned) => {
                tracing::debug!("turn abandoned by the client; upstream request dropped");
                self.prefix_abandoned();
                ("abandoned", Finish::Nothing)
            }
            Ok(Relayed::UpstreamError) => ("failed", Finish::Nothing),
            Err(e) => ("failed", Finish::Event(TurnEvent::Error(e.to_api()))),
        }
    }

    /// Relays a streamed answer event by event.
    async fn relay_stream(&mut self, body: Bytes, events: &mut Outbox) -> Result<Relayed, GenerationError> {
        let first_deadline = Instant::now() + self.cfg.first_token_timeout;
        let child = self.child.as_ref().expect("a turn relays only after its model loaded");
        let mut exit = child.process.exit_watch();
        let resp = tokio::select! {
            biased;
            _ = events.closed() => return Ok(Relayed::Abandoned),
            _ = exit.wait_for(Option::is_some) => return Err(self.broken_stream().await),
            r = tokio::time::timeout_at(first_deadline, child.client.chat(body, true)) => match r {
                Err(_) => return Err(self.hung("before the first token", self.cfg.first_token_timeout).await),
                Ok(Err(_)) => return Err(self.broken_stream().await),
                Ok(Ok(resp)) => resp,
            },
        };
        if !resp.status().is_success() {
            return Err(upstream(resp).await);
        }
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        let mut batch = Vec::with_capacity(4);
        let mut got_first = false;
        let mut relayed_error = false;
        loop {
            let deadline = if got_first {
                Instant::now() + self.cfg.stall_timeout
            } else {
                first_deadline
            };
            let next = tokio::select! {
                biased;
                _ = events.closed() => return Ok(Relayed::Abandoned),
                r = tokio::time::timeout_at(deadline, body.next()) => r,
            };
            let chunk = match next {
                Err(_) if got_first => return Err(self.hung("between tokens", self.cfg.stall_timeout).await),
                Err(_) => return Err(self.hung("before the first token", self.cfg.first_token_timeout).await),
                Ok(Some(Ok(chunk))) => chunk,
                Ok(None) | Ok(Some(Err(_))) => break,
            };
            if parser.push(&chunk, &mut batch).is_err() {
                return Err(GenerationError::Transport(
                    "the model server sent an oversized event".into(),
                ));
            }
            for ev in batch.drain(..) {
                got_first = true;
                if ev.is_done() {
                    // The answer is read to its end (the chunked
                    // terminator), so the connection ends cleanly rather
                    // than half-read: see `child::client`.
                    read_to_end(&mut body).await;
                    // Held back: the brake's turn end and its notice come
                    // before the stream's terminator.
                    return Ok(Relayed::Completed(Finish::Stream(Some(ev.raw))));
                }
                relayed_error |= ev.is_error();
                match events.send(TurnEvent::Chunk(ev.raw)).await {
                    Ok(()) => {}
                    // A stalled client is let go as one that disconnected:
                    // dropping the response cancels the child's slot.
                    Err(Refused::Gone | Refused::Stalled { .. }) => return Ok(Relayed::Abandoned),
                }
            }
        }
        if relayed_error {
            // The child reported its own failure and closed the stream.
            return Ok(Relayed::UpstreamError);
        }
        Err(self.broken_stream().await)
    }

    /// Relays a non-streamed answer whole (sent by the caller, last).
    async fn relay_whole(&mut self, body: Bytes) -> Result<Relayed, GenerationError> {
        let child = self.child.as_ref().expect("a turn relays only after its model loaded");
        let mut exit = child.process.exit_watch();
        let request = async {
            let resp = child.client.chat(body, false).await?;
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes))
        };
        let (status, bytes) = tokio::select! {
            biased;
            _ = exit.wait_for(Option::is_some) => return Err(self.broken_stream().await),
            r = tokio::time::timeout(self.cfg.request_timeout, request) => match r {
                Err(_) => return Err(self.hung("before the answer completed", self.cfg.request_timeout).await),
                Ok(Err(_)) => return Err(self.broken_stream().await),
                Ok(Ok(v)) => v,
            },
        };
        if !(200..300).contains(&status) {
            let json = serde_json::from_slice(&bytes).ok();
            return Err(GenerationError::Upstream { status, body: json });
        }
        Ok(Relayed::Completed(Finish::Event(TurnEvent::Body {
            status,
            body: bytes,
        })))
    }

    /// A stream that broke: the child's death (classified) when it exits
    /// within `DEATH_GRACE`, else a transport failure.
    async fn broken_stream(&mut self) -> GenerationError {
        if let Some(c) = self.child.as_mut() {
            let _ = tokio::time::timeout(DEATH_GRACE, c.process.wait()).await;
        }
        self.take_dead_child()
            .unwrap_or_else(|| GenerationError::Transport("the stream ended before the answer completed".into()))
    }

    /// A child that missed a watchdog: stopped, and the turn's error.
    async fn hung(&mut self, stage: &'static str, after: Duration) -> GenerationError {
        let raw = self
            .child
            .as_ref()
            .map(|c| c.process.output().raw_tail())
            .unwrap_or_default();
        tracing::warn!(
            engine = self.backend.kind().tag(),
            "the model server sent nothing for {after:?} ({stage}); stopping it"
        );
        if let Some(mut c) = self.child.take() {
            process::terminate(&mut c.process, self.cfg.stop_grace).await;
            self.emit(WardenEvent::Unloaded {
                model: c.model_id().to_string(),
                reason: "hung",
            });
        }
        self.state = EngineState::Idle;
        self.publish();
        GenerationError::Hung { stage, after, raw }
    }
}

/// How long the rest of an answer after its `[DONE]` may take to arrive
/// (only the chunked terminator is left; llama-server sends it at once).
const TAIL_READ_BOUND: Duration = Duration::from_secs(2);

/// Reads what is left of a response after its last event, bounded.
async fn read_to_end<S>(body: &mut S)
where
    S: futures::Stream<Item = Result<Bytes, reqwest::Error>> + Unpin,
{
    let deadline = Instant::now() + TAIL_READ_BOUND;
    while let Ok(Some(Ok(_))) = tokio::time::timeout_at(deadline, body.next()).await {}
}

/// The child's error status and JSON body.
async fn upstream(resp: reqwest::Response) -> GenerationError {
    let status = resp.status().as_u16();
    let body = tokio::time::timeout(ERROR_BODY_TIMEOUT, resp.bytes())
        .await
        .ok()
        .and_then(|r| r.ok())
        .and_then(|b| serde_json::from_slice(&b).ok());
    GenerationError::Upstream { status, body }
}

/// The error a turn gets once the warden is shutting down.
pub fn shutting_down() -> ApiError {
    ApiError {
        status: 503,
        message: "the warden is shutting down".into(),
        kind: "server_error",
        code: "shutting_down".into(),
        param: None,
        raw: None,
    }
}
