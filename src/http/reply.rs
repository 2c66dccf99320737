//! How a turn's answer reaches the client in each dialect: `respond_in`
//! submits a turn and answers it through a `Wire`, the dialect's way of
//! saying the child's events, the warden's notices and errors (OpenAI's and
//! llama-server's own for chat, completions and the tokenizer; Anthropic's,
//! Responses' and Ollama's in `dialects`). `beside_or_queued` answers the
//! routes that never generate: straight to a live child beside a running
//! turn, else as a turn that loads their model first.
//!
//! An error before anything was said is a plain HTTP error in the
//! dialect's shape; a non-streamed answer is returned whole (its notices in
//! `X-Warden-Notices`, and wherever the dialect's body has room for them);
//! anything else starts the stream, which ends after the turn's `Done` or
//! its error.

use actix_web::body::SizedStream;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;
use tokio::sync::mpsc;

use super::errors::{error_response, log_error_sent};
use super::stall;
use crate::error::{ApiError, GenerationError, WardenError};
use crate::law::request_chat::Needs;
use crate::law::route::Route;
use crate::messages::{Notice, TurnEvent};
use crate::status::TurnOutcome;
use crate::warden::{TurnRequest, TurnWatch, Warden};

/// A dialect's way of saying a turn's answer.
pub trait Wire: Send + 'static {
    /// The content type of a streamed answer.
    fn stream_type(&self) -> &'static str {
        "text/event-stream"
    }
    /// An error before anything was said, as this dialect's HTTP response.
    fn refusal(&self, e: &ApiError) -> HttpResponse;
    /// One event of the child's stream (its raw SSE bytes), as this dialect
    /// says it; `None` says nothing for it.
    fn event(&mut self, raw: Bytes) -> Option<Bytes>;
    /// A warden notice inside the stream.
    fn notice(&mut self, n: &Notice) -> Option<Bytes>;
    /// The error that ends a stream (nothing follows it).
    fn error(&mut self, e: &ApiError) -> Bytes;
    /// The child's whole answer (its JSON body, status 2xx), with the
    /// notices said before it, as this dialect's body.
    fn whole(&mut self, body: Bytes, _notices: &[Notice]) -> Result<Bytes, ApiError> {
        Ok(body)
    }
    /// What keeps a silent stream open (`WARDEN_SSE_KEEPALIVE_S`): an SSE
    /// comment, which every SSE client skips; `None` for a wire that has no
    /// such thing.
    fn keep_alive(&self) -> Option<Bytes> {
        Some(Bytes::from_static(b": keep-alive\n\n"))
    }
}

/// A stream's two clocks: how long its client may take nothing before its
/// connection is closed, and how long it may hear nothing before a
/// keep-alive (zero: never).
#[derive(Debug, Clone, Copy)]
struct Pace {
    stall: std::time::Duration,
    keep_alive: std::time::Duration,
}

/// OpenAI's wire, which llama-server speaks too: the child's events pass
/// through byte for byte, notices are SSE comments (`: warden {json}`),
/// which every SSE client skips, and a failure is `data: {"error": ...}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAi;

impl Wire for OpenAi {
    fn refusal(&self, e: &ApiError) -> HttpResponse {
        error_response(e)
    }
    fn event(&mut self, raw: Bytes) -> Option<Bytes> {
        Some(raw)
    }
    fn notice(&mut self, n: &Notice) -> Option<Bytes> {
        Some(super::chat::notice_comment(n))
    }
    fn error(&mut self, e: &ApiError) -> Bytes {
        super::chat::error_event(e)
    }
}

/// A request refused before the engine: counted, and its error response in
/// the dialect's shape.
pub fn refused_in(warden: &Warden, route: Route, e: &ApiError, wire: &impl Wire) -> HttpResponse {
    warden.metrics().refused(route, &e.code);
    answer(wire, route, None, e)
}

/// `e` as `wire`'s error response, logged with the route, the code and the
/// turn's `seq` (`errors::log_error_sent`).
fn answer(wire: &impl Wire, route: Route, seq: Option<u64>, e: &ApiError) -> HttpResponse {
    log_error_sent(route, seq, e, "answered");
    wire.refusal(e)
}

/// Submits a turn and answers with it through `wire`.
pub async fn respond_in<W: Wire>(warden: &Warden, http: &HttpRequest, req: TurnRequest, mut wire: W) -> HttpResponse {
    let req = req.wait_at_most(super::prefer::wait(http));
    let (stream, route) = (req.stream, req.route);
    let (mut rx, turn) = match warden.submit_watched(req) {
        Ok(v) => v,
        Err(e) => return answer(&wire, route, None, &e.to_api()),
    };
    let seq = Some(turn.seq);
    let stall_bound = warden.config().client_stall_timeout;
    // A non-streamed answer has no stream for notices: they travel in one
    // response header instead, `X-Warden-Notices: [{"t": ...}, ...]`.
    let mut notices = Vec::new();
    loop {
        let Some(first) = rx.recv().await else {
            return answer(&wire, route, seq, &WardenError::EngineUnavailable.to_api());
        };
        match first {
            TurnEvent::Error(e) => {
                let mut r = answer(&wire, route, seq, &e.to_api());
                if let Some(s) = e.retry_after_s() {
                    r.headers_mut().insert(actix_web::http::header::RETRY_AFTER, s.into());
                }
                return r;
            }
            TurnEvent::Body { status, body } => {
                return match wire.whole(body, &notices) {
                    Ok(body) => whole_body(http, status, body, &notices, stall_bound),
                    Err(e) => answer(&wire, route, seq, &e),
                };
            }
            TurnEvent::Notice(n) if !stream => notices.push(n),
            first => {
                let pace = Pace {
                    stall: stall_bound,
                    keep_alive: warden.config().sse_keep_alive,
                };
                return stream_response(http, pace, first, rx, turn, route, wire);
            }
        }
    }
}

/// A route that never generates (`Route::beside_turns`): straight to the
/// child when it runs the model, beside any running turn; else queued as a
/// turn, which loads the model first. The child's refusal is said in the
/// dialect's shape.
pub async fn beside_or_queued<W: Wire>(
    warden: &Warden,
    http: &HttpRequest,
    route: Route,
    model: Option<String>,
    needs: Needs,
    body: serde_json::Map<String, serde_json::Value>,
    wire: W,
) -> HttpResponse {
    // Resolved once: the side door and the turn behind it take the value.
    let model = match warden.resolve_for(route, model.as_deref()) {
        Ok(m) => m,
        Err(e) => {
            warden.metrics().refused(route, &e.code());
            return answer(&wire, route, None, &e.to_api());
        }
    };
    let bytes = Bytes::from(serde_json::to_vec(&body).expect("a JSON map serializes"));
    let stall_bound = warden.config().client_stall_timeout;
    match warden.tokenize_now(route, &model, &needs, bytes).await {
        Some(Ok((status, body))) if (200..300).contains(&status) => {
            warden.metrics().direct(route, TurnOutcome::Completed);
            return whole_body(http, status, body, &[], stall_bound);
        }
        Some(Ok((status, body))) => {
            warden.metrics().direct(route, TurnOutcome::Failed);
            let body = serde_json::from_slice(&body).ok();
            return answer(&wire, route, None, &GenerationError::Upstream { status, body }.to_api());
        }
        Some(Err(e)) => {
            warden.metrics().direct(route, TurnOutcome::Failed);
            return answer(&wire, route, None, &e.to_api());
        }
        // Its model is not running: a turn loads it first.
        None => {}
    }
    let turn = TurnRequest::new(route, body).resolved(model).needs(needs);
    respond_in(warden, http, turn, wire).await
}

/// A whole JSON answer (its notices, if any, in `X-Warden-Notices`), in
/// pieces the stall watch can cut off: a client that stops reading a large
/// body loses its connection after `stall_bound`.
pub fn whole_body(
    http: &HttpRequest,
    status: u16,
    body: Bytes,
    notices: &[Notice],
    stall_bound: std::time::Duration,
) -> HttpResponse {
    let mut r = HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::OK));
    r.content_type("application/json");
    if !notices.is_empty() {
        r.insert_header(("X-Warden-Notices", serde_json::to_string(notices).unwrap_or_default()));
    }
    // Sized, so the answer keeps its Content-Length.
    let len = body.len() as u64;
    r.body(SizedStream::new(
        len,
        stall::watch(http, stall::pieces(body), stall_bound, None),
    ))
}

/// The streamed response: `first`, then the rest of the turn's events, each
/// said through `wire`, ending after `Done` or an error; its connection is
/// closed once the client takes nothing for `stall_bound` (`stall`).
fn stream_response<W: Wire>(
    http: &HttpRequest,
    pace: Pace,
    first: TurnEvent,
    rx: mpsc::Receiver<TurnEvent>,
    turn: TurnWatch,
    route: Route,
    wire: W,
) -> HttpResponse {
    let content_type = wire.stream_type();
    let seq = turn.seq;
    let state = (Some(first), Some(rx), wire);
    let body = futures::stream::unfold(state, move |(pending, rx, mut wire)| async move {
        let mut rx = rx?;
        let mut pending = pending;
        loop {
            let ev = match pending.take() {
                Some(ev) => Some(ev),
                None if pace.keep_alive.is_zero() => rx.recv().await,
                None => match tokio::time::timeout(pace.keep_alive, rx.recv()).await {
                    Ok(ev) => ev,
                    // Silent this long: a keep-alive, and wait again.
                    Err(_) => match wire.keep_alive() {
                        Some(b) => return Some((Ok(b), (None, Some(rx), wire))),
                        None => continue,
                    },
                },
            };
            // The engine went away mid-turn: the stream still ends with the
            // dialect's error event, never a silent cut.
            let ev = ev.unwrap_or_else(|| TurnEvent::Error(WardenError::EngineUnavailable));
            let (bytes, next) = match ev {
                TurnEvent::Chunk(b) => (wire.event(b), Some(rx)),
                TurnEvent::Notice(n) => (wire.notice(&n), Some(rx)),
                // Nothing follows an error: end after it.
                TurnEvent::Error(e) => {
                    let e = e.to_api();
                    log_error_sent(route, Some(seq), &e, "ended the stream with");
                    (Some(wire.error(&e)), None)
                }
                // A whole body cannot come inside a stream; end cleanly if it did.
                TurnEvent::Done | TurnEvent::Body { .. } => return None,
            };
            match (bytes, next) {
                (Some(b), next) => return Some((Ok::<Bytes, actix_web::Error>(b), (None, next, wire))),
                (None, Some(r)) => rx = r,
                (None, None) => return None,
            }
        }
    });
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stall::watch(http, Box::pin(body), pace.stall, Some(turn)))
}
