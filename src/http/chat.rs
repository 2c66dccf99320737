//! `POST /v1/chat/completions`: OpenAI-compatible, streamed and not, and
//! `respond`, which every route through the engine answers with.
//!
//! The handler validates the body, submits a turn (404 for an unknown model,
//! 503 when the queue is full) and waits for the turn's first event: an
//! error before anything was said becomes a plain HTTP error response, a
//! non-streamed answer is returned whole, and anything else starts the SSE
//! response. In the stream, the child's events pass through byte for byte,
//! warden notices travel as SSE comments (`: warden {json}`), which every SSE
//! client (OpenAI's libraries included) skips, and a failure ends the stream
//! with `data: {"error": {..., "code", "raw"}}`, the shape llama-server itself
//! uses and OpenAI's libraries raise as an API error.
//!
//! Optional headers: `X-Warden-Conversation: <id>` names the conversation
//! (else its opening messages' fingerprint does), `X-Warden-Turn:
//! arena|compaction` marks a turn that must start from an empty prefix cache
//! (MLX engine), and `X-Warden-Keep-Alive` sets the idle deadline as a
//! `keep_alive` body field would (`law::keep_alive`).

use actix_web::body::SizedStream;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;

use super::body::read_body;
use super::errors::{answer_error, log_server_error};
use super::stall;
use super::validate::{chat_request, violation};
use super::validate_text::keep_alive;
use crate::error::ApiError;
use crate::law::route::Route;
use crate::messages::prefix::TurnKind;
use crate::messages::{Notice, TurnEvent};
use crate::warden::{TurnRequest, TurnWatch, Warden};

/// The route handler.
pub async fn chat_completions(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    let bytes = match read_body(payload, warden.config().max_body_bytes, warden.config().body_timeout).await {
        Ok(b) => b,
        Err(e) => return refused(&warden, Route::Chat, &e),
    };
    let req = match chat_request(&bytes) {
        Ok(r) => r,
        Err(e) => return refused(&warden, Route::Chat, &e),
    };
    if let Some((id, caps)) = warden.capabilities(req.model.as_deref())
        && let Some(v) = req.needs.unmet(caps, &id)
    {
        return refused(&warden, Route::Chat, &violation(v));
    }
    let keep_alive = match keep_alive(req.keep_alive, &http) {
        Ok(k) => k,
        Err(e) => return refused(&warden, Route::Chat, &e),
    };
    let header = |name: &str| {
        http.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let kind = match header("X-Warden-Turn").as_deref() {
        Some("arena") => TurnKind::Arena,
        Some("compaction") => TurnKind::Compaction,
        _ => TurnKind::Chat,
    };
    let turn = TurnRequest {
        model: req.model,
        body: req.body,
        stream: req.stream,
        options: req.options,
        conversation: Some(header("X-Warden-Conversation").unwrap_or(req.conversation)),
        kind,
        route: Route::Chat,
        keep_alive,
    };
    respond(&warden, &http, turn).await
}

/// A request refused before the engine: counted, and its error response.
pub(super) fn refused(warden: &Warden, route: Route, e: &ApiError) -> HttpResponse {
    warden.metrics().refused(route, &e.code);
    answer_error(route, None, e)
}

/// Submits a turn and answers with it: an error before anything was said
/// as a plain HTTP error, a whole body as the child sent it, anything else
/// as an SSE stream. Every route through the engine answers this way.
pub(super) async fn respond(warden: &Warden, http: &HttpRequest, req: TurnRequest) -> HttpResponse {
    let (stream, route) = (req.stream, req.route);
    let (mut rx, turn) = match warden.submit_watched(req) {
        Ok(v) => v,
        Err(e) => return answer_error(route, None, &e),
    };
    // A non-streamed answer has no stream for notices: they travel in one
    // response header instead, `X-Warden-Notices: [{"t": ...}, ...]`.
    let mut notices = Vec::new();
    loop {
        let Some(first) = rx.recv().await else {
            return answer_error(route, Some(turn.seq), &ApiError::engine_unavailable());
        };
        match first {
            TurnEvent::Error(e) => return answer_error(route, Some(turn.seq), &e),
            TurnEvent::Body { status, body } => {
                return whole_body(http, status, body, &notices, warden.config().client_stall_timeout);
            }
            TurnEvent::Notice(n) if !stream => notices.push(n),
            first => return sse_response(http, warden.config().client_stall_timeout, first, rx, turn, route),
        }
    }
}

/// A whole JSON answer of the child, as it sent it (its notices, if any, in
/// `X-Warden-Notices`), in pieces the stall watch can cut off: a client that
/// stops reading a large body loses its connection after `stall_bound`.
pub(super) fn whole_body(
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

/// The SSE response: `first`, then the rest of the turn's events, ending
/// after `Done` or an error; its connection is closed once the client takes
/// nothing for `stall_bound` (`stall`).
fn sse_response(
    http: &HttpRequest,
    stall_bound: std::time::Duration,
    first: TurnEvent,
    rx: mpsc::Receiver<TurnEvent>,
    turn: TurnWatch,
    route: Route,
) -> HttpResponse {
    let seq = turn.seq;
    let body = futures::stream::unfold((Some(first), Some(rx)), move |(pending, rx)| async move {
        let mut rx = rx?;
        let ev = match pending {
            Some(ev) => ev,
            // The engine went away mid-turn: the stream still ends with an
            // error event, never a silent cut.
            None => rx
                .recv()
                .await
                .unwrap_or_else(|| TurnEvent::Error(ApiError::engine_unavailable())),
        };
        let (bytes, next) = match ev {
            TurnEvent::Chunk(b) => (b, Some(rx)),
            TurnEvent::Notice(n) => (notice_comment(&n), Some(rx)),
            // Nothing follows an error: end after it.
            TurnEvent::Error(e) => {
                log_server_error(route, Some(seq), &e, "ended the stream with");
                (error_event(&e), None)
            }
            // A whole body cannot come inside a stream; end cleanly if it did.
            TurnEvent::Done | TurnEvent::Body { .. } => return None,
        };
        Some((Ok::<Bytes, actix_web::Error>(bytes), (None, next)))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stall::watch(http, Box::pin(body), stall_bound, Some(turn)))
}

/// `: warden {json}\n\n`: a notice as an SSE comment.
pub fn notice_comment(n: &Notice) -> Bytes {
    let json = serde_json::to_vec(n).expect("a notice serializes");
    let mut b = BytesMut::with_capacity(json.len() + 12);
    b.extend_from_slice(b": warden ");
    b.extend_from_slice(&json);
    b.extend_from_slice(b"\n\n");
    b.freeze()
}

/// `data: {"error": ...}\n\n`: the stream's final error event.
pub fn error_event(e: &ApiError) -> Bytes {
    let json = serde_json::to_vec(&e.to_body()).expect("an error serializes");
    let mut b = BytesMut::with_capacity(json.len() + 8);
    b.extend_from_slice(b"data: ");
    b.extend_from_slice(&json);
    b.extend_from_slice(b"\n\n");
    b.freeze()
}
