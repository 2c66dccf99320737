//! The relay of one turn's answer from the child: a stream event by event
//! (its timings measured on the way), or a whole body; and the watchdogs'
//! verdicts (a dead, hung or broken child). Part of `EngineCore`, called
//! from `turn`.
//!
//! The stream passes the child's SSE events through byte for byte (the
//! parser's zero-copy `raw` slice), so the warden adds no re-encoding.
//! Watchdogs: the first event must arrive within `first_token_timeout`
//! (llama-server sends its headers with the first token), each next one
//! within `stall_timeout`; a child that misses either is stopped and the
//! turn ends with `child_hung`. A non-streamed request, whose progress
//! cannot be seen, is bounded by `request_timeout` as a whole.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::time::Instant;

use super::core::EngineCore;
use super::counts::ChildCounts;
use super::outbox::{Outbox, Refused};
use super::turn::{Finish, Relayed};
use crate::error::GenerationError;
use crate::law::route::Route;
use crate::messages::TurnEvent;
use crate::sse::SseParser;
use crate::status::TurnTimings;

/// How long a broken stream waits for the child's exit before it is called a
/// transport failure rather than a death (SIGKILL closes the socket first).
const DEATH_GRACE: Duration = Duration::from_secs(1);
/// Bound of reading an error body from the child.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(5);

impl EngineCore {
    /// Relays a streamed answer event by event.
    pub(crate) async fn relay_stream(
        &mut self,
        route: Route,
        body: Bytes,
        events: &mut Outbox,
    ) -> Result<Relayed, GenerationError> {
        let sent_at = Instant::now();
        let first_deadline = sent_at + self.cfg.first_token_timeout;
        let mut loss = self.worker_loss();
        let child = self.child.get().expect("a turn relays only after its model loaded");
        let mut exit = child.process.exit_watch();
        let resp = tokio::select! {
            biased;
            _ = events.closed() => return Ok(Relayed::Abandoned),
            lost = &mut loss => return Err(self.retire_for_worker(lost).await),
            _ = exit.wait_for(Option::is_some) => return Err(self.broken_stream().await),
            r = tokio::time::timeout_at(first_deadline, child.client.send_retrying(route.path(), body, true)) => match r {
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
        let mut counts = None;
        let mut clock = Clock::new(sent_at);
        loop {
            let deadline = if got_first {
                Instant::now() + self.cfg.stall_timeout
            } else {
                first_deadline
            };
            let next = tokio::select! {
                biased;
                _ = events.closed() => return Ok(Relayed::Abandoned),
                lost = &mut loss => return Err(self.retire_for_worker(lost).await),
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
                // Only the last events carry timings (a byte search first);
                // infill's own last event, the stream's end, is one.
                counts = ChildCounts::read(&ev.data).or(counts);
                if route.ends_stream(ev.event.as_deref(), &ev.data) {
                    // The answer is read to its end (the chunked
                    // terminator), so the connection ends cleanly rather
                    // than half-read: see `child::client`.
                    read_to_end(&mut body).await;
                    // Held back: the brake's turn end and its notice come
                    // before the stream's terminator.
                    return Ok(Relayed::Completed {
                        finish: Finish::Stream(Some(ev.raw)),
                        counts,
                        timings: clock.timings(counts),
                    });
                }
                clock.event(Instant::now());
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
    pub(crate) async fn relay_whole(&mut self, route: Route, body: Bytes) -> Result<Relayed, GenerationError> {
        let mut loss = self.worker_loss();
        let child = self.child.get().expect("a turn relays only after its model loaded");
        let mut exit = child.process.exit_watch();
        let request = async {
            let resp = child.client.send_retrying(route.path(), body, false).await?;
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes))
        };
        let (status, bytes) = tokio::select! {
            biased;
            lost = &mut loss => return Err(self.retire_for_worker(lost).await),
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
        let counts = ChildCounts::read(&bytes);
        Ok(Relayed::Completed {
            finish: Finish::Event(TurnEvent::Body { status, body: bytes }),
            counts,
            timings: None,
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

    /// A child that missed a watchdog: stopped, and the turn's error.
    async fn hung(&mut self, stage: &'static str, after: Duration) -> GenerationError {
        tracing::warn!(
            engine = self.backend.kind().tag(),
            "the model server sent nothing for {after:?} ({stage}); stopping it"
        );
        let raw = self.retire(super::retire::Retire::Hung).await.unwrap_or_default();
        GenerationError::Hung { stage, after, raw }
    }
}

/// A streamed turn's timings as its events arrive (`[DONE]` excluded).
struct Clock {
    sent: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    events: u32,
}

impl Clock {
    fn new(sent: Instant) -> Self {
        Self {
            sent,
            first: None,
            last: None,
            events: 0,
        }
    }

    fn event(&mut self, at: Instant) {
        self.first.get_or_insert(at);
        self.last = Some(at);
        self.events += 1;
    }

    /// `None` before any event. The decode rate is the child's own (its
    /// tokens over its decode time); without its timings (mlx_vlm.server),
    /// the events after the first over the time they took, which needs two
    /// events apart in time.
    fn timings(&self, counts: Option<ChildCounts>) -> Option<TurnTimings> {
        let first = self.first?;
        let span = self.last?.duration_since(first).as_secs_f64();
        let relayed = (self.events >= 2 && span > 0.0).then(|| f64::from(self.events - 1) / span);
        Some(TurnTimings {
            ttft_s: Some(first.duration_since(self.sent).as_secs_f64()),
            decode_tokens_per_s: counts.and_then(ChildCounts::decode_per_s).or(relayed),
            events: self.events,
        })
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
