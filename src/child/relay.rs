//! `Relay`: the child's streamed answer, handed to the turn's consumer (the
//! HTTP response) to pull directly, on the consumer's own thread.
//!
//! Why: relaying token by token through the engine's thread cost two thread
//! wake-ups and three context switches per token on top of the child's own
//! work (measured by the bench: ~210 µs of warden CPU per token, on a
//! machine where llama-server's compute threads hold both cores). With the
//! relay pulled by the HTTP worker, each token is one read and one write on
//! one thread. The engine still owns the turn: it hands the relay over, then
//! awaits its end (`RelayEnd`) inside the turn's atomic handler, so the
//! mailbox stays closed for the whole stream exactly as before.
//!
//! The relay passes the child's SSE events through byte for byte (the
//! parser's zero-copy `raw` slices), holds back `[DONE]` (the engine sends it
//! after the brake's turn end and its notice), and applies the watchdogs: the
//! first event by the first-token deadline, each next within the stall
//! timeout. Dropped before its end (the client went away), it reports
//! `Abandoned`, and the upstream response it owned is gone with it, which
//! makes llama-server cancel the generation.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};

use super::sse::{SseEvent, SseParser};

/// How a relay ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayEnd {
    /// The child finished: its `[DONE]` event, held back.
    Done(Bytes),
    /// The child sent its own error event and closed the stream.
    UpstreamError,
    /// The stream broke before `[DONE]` (a dead child, or a transport fault).
    Broken,
    /// A watchdog fired (`first`: before the first event).
    Hung {
        /// Before the first event, or between two.
        first: bool,
    },
    /// An event larger than the parser's bound.
    TooLarge,
    /// The consumer dropped the relay (the client went away).
    Abandoned,
}

type Upstream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The child's SSE events, as raw bytes, one item per event.
pub struct Relay {
    upstream: Upstream,
    parser: SseParser,
    batch: Vec<SseEvent>,
    pending: VecDeque<Bytes>,
    watchdog: Pin<Box<Sleep>>,
    stall: Duration,
    got_first: bool,
    relayed_error: bool,
    end: Option<oneshot::Sender<RelayEnd>>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("got_first", &self.got_first)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// A relay over a child's streamed response body; its end arrives on the
    /// returned receiver.
    pub fn new(upstream: Upstream, first_deadline: Instant, stall: Duration) -> (Self, oneshot::Receiver<RelayEnd>) {
        let (tx, rx) = oneshot::channel();
        let relay = Self {
            upstream,
            parser: SseParser::new(),
            batch: Vec::with_capacity(4),
            pending: VecDeque::with_capacity(4),
            watchdog: Box::pin(tokio::time::sleep_until(first_deadline)),
            stall,
            got_first: false,
            relayed_error: false,
            end: Some(tx),
        };
        (relay, rx)
    }

    fn finish(&mut self, end: RelayEnd) {
        if let Some(tx) = self.end.take() {
            let _ = tx.send(end);
        }
    }
}

impl Stream for Relay {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = &mut *self;
        loop {
            if let Some(b) = this.pending.pop_front() {
                return Poll::Ready(Some(b));
            }
            if this.end.is_none() {
                return Poll::Ready(None);
            }
            match this.upstream.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    if this.parser.push(&chunk, &mut this.batch).is_err() {
                        this.finish(RelayEnd::TooLarge);
                        continue;
                    }
                    for ev in this.batch.drain(..) {
                        if ev.is_done() {
                            // Held back; anything after it is ignored.
                            if let Some(tx) = this.end.take() {
                                let _ = tx.send(RelayEnd::Done(ev.raw));
                            }
                            break;
                        }
                        this.got_first = true;
                        this.relayed_error |= ev.is_error();
                        this.pending.push_back(ev.raw);
                    }
                    if this.got_first && this.end.is_some() {
                        let next = Instant::now() + this.stall;
                        this.watchdog.as_mut().reset(next);
                    }
                }
                Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                    let end = if this.relayed_error {
                        RelayEnd::UpstreamError
                    } else {
                        RelayEnd::Broken
                    };
                    this.finish(end);
                }
                Poll::Pending => {
                    if this.watchdog.as_mut().poll(cx).is_ready() {
                        let first = !this.got_first;
                        this.finish(RelayEnd::Hung { first });
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Dropped before its end: the consumer is gone.
        self.finish(RelayEnd::Abandoned);
    }
}
