//! The relay of one turn's answer from the child: a stream event by event
//! (its timings measured on the way), or a whole body; and the watchdogs'
//! verdicts (a dead, hung or broken child). It runs as a task of its own
//! beside the engine's mailbox (several turns stream at once), owning
//! what it needs of the child (`RelayLine`) and never the engine's state;
//! at its end it sends `TurnRelayed` to the engine, whose `turn_end` acts
//! on what it found (a hung child is stopped there, a death classified).
//!
//! A stream's relay runs on its reader's arbiter (`Outbox::home`: the HTTP
//! worker that took the request), over a connection opened there
//! (`ChildClient::send_retrying`), so each token wakes one thread, not
//! two. Dropped before its end (that arbiter stopped), it still reports
//! the turn, as abandoned (`Report`).
//!
//! The stream passes the child's SSE events through byte for byte (the
//! parser's zero-copy `raw` slice), so the warden adds no re-encoding.
//! Watchdogs: the first event must arrive within `first_token_timeout`
//! (llama-server sends its headers with the first token), each next one
//! within `stall_timeout`; a child that misses either is stopped and the
//! turn ends with `child_hung`. A non-streamed request, whose progress
//! cannot be seen, is bounded by `request_timeout` as a whole.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix::{Message, Recipient};
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

use super::counts::ChildCounts;
use super::outbox::{Outbox, Refused};
use super::carry::Carry;
use crate::catalog::ModelEntry;
use crate::child::client::ChildClient;
use crate::engines::cpu::workers::Lost;
use crate::error::GenerationError;
use crate::law::crash::ExitInfo;
use crate::law::keep_alive::KeepAlive;
use crate::law::route::Route;
use crate::messages::TurnEvent;
use crate::queue::QueueTicket;
use crate::sse::SseParser;
use crate::status::TurnTimings;

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
    pub(crate) async fn send(self, out: &mut Outbox) {
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

/// How long a broken stream waits for the child's exit before it is called a
/// transport failure rather than a death (SIGKILL closes the socket first).
pub(crate) const DEATH_GRACE: Duration = Duration::from_secs(1);
/// Bound of reading an error body from the child.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// What a relay needs of its child, owned, so it runs beside the engine's
/// mailbox: the client, the child's exit, its RPC workers' loss, the
/// watchdogs' bounds.
pub(crate) struct RelayLine {
    /// The child's client (holds its key).
    pub client: ChildClient,
    /// The child's exit, as it happens.
    pub exit: watch::Receiver<Option<ExitInfo>>,
    /// Resolves when one of its RPC workers is lost (never without any).
    pub loss: Pin<Box<dyn Future<Output = Lost> + Send + 'static>>,
    /// Bound of the first event.
    pub first_token_timeout: Duration,
    /// Bound between events.
    pub stall_timeout: Duration,
    /// Bound of a whole non-streamed answer.
    pub request_timeout: Duration,
}

/// A turn handed to its relay: what its end needs.
#[derive(Debug)]
pub(crate) struct Running {
    /// Its model.
    pub entry: Arc<ModelEntry>,
    /// Its caller's channel.
    pub out: Outbox,
    /// Its arrival number.
    pub seq: u64,
    /// Its place in the queue's bound, freed at its end.
    pub ticket: Option<QueueTicket>,
    /// Its route.
    pub route: Route,
    /// The keep-alive it asked.
    pub keep_alive: Option<KeepAlive>,
    /// Whether its client takes the brake's notices.
    pub stateful: bool,
    /// The child it ran on.
    pub pid: u32,
    /// Streamed or whole.
    pub stream: bool,
    /// A generating turn's request as it was sent, less its slot: what the
    /// next child gets when this one dies under it (`resume`).
    pub request: Option<crate::messages::TurnRequest>,
    /// What it carries from one child to the next.
    pub carry: Box<super::carry::Carry>,
}

/// How a relay ended, as the relay alone can tell; the engine turns the
/// child's failures into its decisions (`turn_end`).
#[derive(Debug)]
pub(crate) enum RelayEnd {
    /// An answer, whole or streamed, or a client gone.
    Relayed(Relayed),
    /// The stream broke or the child exited.
    Broken,
    /// A watchdog passed.
    Hung {
        /// Where.
        stage: &'static str,
        /// Its bound.
        after: Duration,
    },
    /// An RPC worker of the child was lost.
    Lost(Lost),
    /// The child refused, or sent what cannot be relayed.
    Failed(GenerationError),
}

/// A relay's end, sent to the engine.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct TurnRelayed {
    pub(crate) turn: Running,
    pub(crate) end: RelayEnd,
}

/// A turn's relay, run beside the mailbox.
pub(crate) struct RelayJob {
    /// The child's line.
    pub line: RelayLine,
    /// The turn.
    pub turn: Running,
    /// The request's bytes.
    pub body: Bytes,
}

impl RelayJob {
    /// Relays the answer to its end and tells `ends` how it ended. Dropped
    /// before its end, even before it first ran (the arbiter it was sent to
    /// stopped), it tells `ends` its client is gone: the engine hears of
    /// every turn it started. (Not an `async fn`: the report is made before
    /// the future, so an unpolled future holds it too.)
    pub fn run_to(self, ends: Recipient<TurnRelayed>) -> impl Future<Output = ()> + Send + 'static {
        let RelayJob { line, turn, body } = self;
        let report = Report { ends, turn: Some(turn) };
        async move {
            let (mut line, mut report) = (line, report);
            let turn = report.turn.as_mut().expect("held until the report");
            let end = if turn.stream {
                relay_stream(&mut line, turn.route, body, &mut turn.out, &mut turn.carry).await
            } else {
                relay_whole(&mut line, turn.route, body).await
            };
            report.send(end);
        }
    }
}

/// A relay's report to its engine, sent once: its end, or, dropped before
/// it, an abandoned turn.
struct Report {
    ends: Recipient<TurnRelayed>,
    turn: Option<Running>,
}

impl Report {
    fn send(&mut self, end: RelayEnd) {
        if let Some(turn) = self.turn.take() {
            // A stopped engine cannot take it: the turn's channel drops
            // with it and its caller hears the engine left.
            let _ = self.ends.try_send(TurnRelayed { turn, end });
        }
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        self.send(RelayEnd::Relayed(Relayed::Abandoned));
    }
}

/// Relays a streamed answer event by event (a continuation's through its
/// joint, `carry`).
async fn relay_stream(
    line: &mut RelayLine,
    route: Route,
    body: Bytes,
    events: &mut Outbox,
    carry: &mut Carry,
) -> RelayEnd {
    let sent_at = Instant::now();
    let first_deadline = sent_at + line.first_token_timeout;
    let resp = tokio::select! {
        biased;
        _ = events.closed() => return RelayEnd::Relayed(Relayed::Abandoned),
        lost = &mut line.loss => return RelayEnd::Lost(lost),
        _ = line.exit.wait_for(Option::is_some) => return RelayEnd::Broken,
        r = tokio::time::timeout_at(first_deadline, line.client.send_retrying(route.path(), body, true)) => match r {
            Err(_) => return RelayEnd::Hung { stage: "before the first token", after: line.first_token_timeout },
            Ok(Err(_)) => return RelayEnd::Broken,
            Ok(Ok(resp)) => resp,
        },
    };
    if !resp.status().is_success() {
        return RelayEnd::Failed(upstream(resp).await);
    }
    let mut body = resp.bytes_stream();
    let mut parser = SseParser::new();
    let mut batch = Vec::with_capacity(4);
    let mut got_first = false;
    let mut relayed_error = false;
    let mut counts = None;
    let mut clock = Clock::new(sent_at, carry.pause.as_ref().map(|p| p.at));
    loop {
        let deadline = if got_first {
            Instant::now() + line.stall_timeout
        } else {
            first_deadline
        };
        let next = tokio::select! {
            biased;
            _ = events.closed() => return RelayEnd::Relayed(Relayed::Abandoned),
            lost = &mut line.loss => return RelayEnd::Lost(lost),
            r = tokio::time::timeout_at(deadline, body.next()) => r,
        };
        let chunk = match next {
            Err(_) if got_first => return RelayEnd::Hung { stage: "between tokens", after: line.stall_timeout },
            Err(_) => return RelayEnd::Hung { stage: "before the first token", after: line.first_token_timeout },
            Ok(Some(Ok(chunk))) => chunk,
            Ok(None) | Ok(Some(Err(_))) => break,
        };
        if parser.push(&chunk, &mut batch).is_err() {
            return RelayEnd::Failed(GenerationError::Transport(
                "the model server sent an oversized event".into(),
            ));
        }
        for ev in batch.drain(..) {
            got_first = true;
            // Only the last events carry timings (a byte search first);
            // infill's own last event, the stream's end, is one.
            counts = ChildCounts::read(&ev.data).or(counts);
            let last = route.ends_stream(ev.event.as_deref(), &ev.data);
            let mut pieces = carry.outgoing(&ev, last);
            if last {
                // The answer is read to its end (the chunked
                // terminator), so the connection ends cleanly rather
                // than half-read: see `child::client`.
                read_to_end(&mut body).await;
                // Held back: the brake's turn end and its notice come
                // before the stream's terminator (a joint may put events
                // before it).
                let held = pieces.pop();
                if send_all(events, pieces).await.is_err() {
                    return RelayEnd::Relayed(Relayed::Abandoned);
                }
                return RelayEnd::Relayed(Relayed::Completed {
                    finish: Finish::Stream(held),
                    counts,
                    timings: clock.timings(counts),
                });
            }
            clock.event(Instant::now());
            relayed_error |= ev.is_error();
            if send_all(events, pieces).await.is_err() {
                // A stalled client is let go as one that disconnected:
                // dropping the response cancels the child's slot.
                return RelayEnd::Relayed(Relayed::Abandoned);
            }
        }
    }
    if relayed_error {
        // The child reported its own failure and closed the stream.
        return RelayEnd::Relayed(Relayed::UpstreamError);
    }
    RelayEnd::Broken
}

/// Sends each piece in order; `Err` when the client is gone or stalled.
async fn send_all(events: &mut Outbox, pieces: Vec<Bytes>) -> Result<(), Refused> {
    for p in pieces {
        events.send(TurnEvent::Chunk(p)).await?;
    }
    Ok(())
}

/// Relays a non-streamed answer whole (sent by the turn's end, last).
async fn relay_whole(line: &mut RelayLine, route: Route, body: Bytes) -> RelayEnd {
    let client = &line.client;
    let request = async {
        let resp = client.send_retrying(route.path(), body, false).await?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await?;
        Ok::<_, reqwest::Error>((status, bytes))
    };
    let (status, bytes) = tokio::select! {
        biased;
        lost = &mut line.loss => return RelayEnd::Lost(lost),
        _ = line.exit.wait_for(Option::is_some) => return RelayEnd::Broken,
        r = tokio::time::timeout(line.request_timeout, request) => match r {
            Err(_) => return RelayEnd::Hung { stage: "before the answer completed", after: line.request_timeout },
            Ok(Err(_)) => return RelayEnd::Broken,
            Ok(Ok(v)) => v,
        },
    };
    if !(200..300).contains(&status) {
        let json = serde_json::from_slice(&bytes).ok();
        return RelayEnd::Failed(GenerationError::Upstream { status, body: json });
    }
    let counts = ChildCounts::read(&bytes);
    RelayEnd::Relayed(Relayed::Completed {
        finish: Finish::Event(TurnEvent::Body { status, body: bytes }),
        counts,
        timings: None,
    })
}

/// A streamed turn's timings as its events arrive (`[DONE]` excluded).
struct Clock {
    sent: Instant,
    /// A resumed turn's: when its previous child died.
    paused: Option<Instant>,
    first: Option<Instant>,
    last: Option<Instant>,
    events: u32,
}

impl Clock {
    fn new(sent: Instant, paused: Option<Instant>) -> Self {
        Self {
            sent,
            paused,
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
            paused_s: self.paused.map(|p| first.duration_since(p).as_secs_f64()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use actix::{Actor, Context, Handler};
    use tokio::sync::mpsc;

    /// Stands for the engine: hands on every report it gets.
    struct Engine(mpsc::UnboundedSender<TurnRelayed>);

    impl Actor for Engine {
        type Context = Context<Self>;
    }

    impl Handler<TurnRelayed> for Engine {
        type Result = ();
        fn handle(&mut self, m: TurnRelayed, _: &mut Context<Self>) {
            let _ = self.0.send(m);
        }
    }

    /// A round trip through the mailbox: every report sent before it was handled.
    #[derive(Message)]
    #[rtype(result = "()")]
    struct Flush;

    impl Handler<Flush> for Engine {
        type Result = ();
        fn handle(&mut self, _: Flush, _: &mut Context<Self>) {}
    }

    /// A streamed turn's relay to a child that is never reached, and its
    /// caller's receiver.
    fn job() -> (RelayJob, mpsc::Receiver<TurnEvent>) {
        let (tx, rx) = mpsc::channel(4);
        let line = RelayLine {
            client: ChildClient::new(reqwest::Client::new(), 9, crate::secret::ApiKey::mint()),
            exit: watch::channel(None).1,
            loss: Box::pin(std::future::pending::<Lost>()),
            first_token_timeout: Duration::from_secs(60),
            stall_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(60),
        };
        let turn = Running {
            entry: Arc::new(ModelEntry {
                id: "m".into(),
                format: crate::catalog::ModelFormat::Gguf,
                path: "/m.gguf".into(),
                mmproj: None,
            }),
            out: Outbox::new(tx, Duration::from_secs(30)),
            seq: 7,
            ticket: None,
            route: Route::Chat,
            keep_alive: None,
            stateful: false,
            pid: 1,
            stream: true,
            request: None,
            carry: Box::new(Carry::new(Route::Chat)),
        };
        (
            RelayJob {
                line,
                turn,
                body: Bytes::from_static(b"{}"),
            },
            rx,
        )
    }

    /// A relay dropped before it ever ran (the arbiter it was sent to had
    /// stopped) still reports its turn, as abandoned.
    #[actix_rt::test]
    async fn a_relay_dropped_before_it_ran_reports_its_turn() {
        let (tx, mut reports) = mpsc::unbounded_channel();
        let engine = Engine(tx).start();
        let (job, _rx) = job();
        drop(job.run_to(engine.clone().recipient()));
        let r = tokio::time::timeout(Duration::from_secs(10), reports.recv())
            .await
            .expect("a report")
            .unwrap();
        assert_eq!(r.turn.seq, 7);
        assert!(matches!(r.end, RelayEnd::Relayed(Relayed::Abandoned)), "{:?}", r.end);
    }

    /// A relay run to its end (its caller gone) reports once, not again as
    /// it is dropped.
    #[actix_rt::test]
    async fn a_relay_run_to_its_end_reports_once() {
        let (tx, mut reports) = mpsc::unbounded_channel();
        let engine = Engine(tx).start();
        let (job, rx) = job();
        drop(rx);
        job.run_to(engine.clone().recipient()).await;
        engine.send(Flush).await.unwrap();
        let r = reports.try_recv().expect("one report");
        assert!(matches!(r.end, RelayEnd::Relayed(Relayed::Abandoned)), "{:?}", r.end);
        assert!(reports.try_recv().is_err(), "a second report");
    }
}
