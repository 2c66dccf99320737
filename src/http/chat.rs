//! `POST /v1/chat/completions`: OpenAI-compatible, streamed and not, and
//! `respond`, which the OpenAI-shaped routes answer with (`reply::respond_in`
//! with OpenAI's wire).
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

use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};

use super::body::read_body;
use super::errors::answer_error;
use super::reply::{OpenAi, respond_in};
use super::validate::chat_request;
use super::validate_text::keep_alive;
use crate::error::ApiError;
use crate::law::route::Route;
use crate::messages::Notice;
use crate::messages::prefix::TurnKind;
use crate::warden::{TurnRequest, Warden};

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
    let keep_alive = match keep_alive(req.keep_alive, &http) {
        Ok(k) => k,
        Err(e) => return refused(&warden, Route::Chat, &e),
    };
    let header = |name: &str| super::dialects::header(&http, name);
    let kind = match header("X-Warden-Turn").as_deref() {
        Some("arena") => TurnKind::Arena,
        Some("compaction") => TurnKind::Compaction,
        _ => TurnKind::Chat,
    };
    let turn = TurnRequest::new(Route::Chat, req.body)
        .model(req.model)
        .stream(req.stream)
        .options(req.options)
        .conversation(Some(header("X-Warden-Conversation").unwrap_or(req.conversation)))
        .kind(kind)
        .keep_alive(keep_alive)
        .needs(req.needs);
    respond(&warden, &http, turn).await
}

/// A request refused before the engine: counted, and its error response.
pub(super) fn refused(warden: &Warden, route: Route, e: &ApiError) -> HttpResponse {
    warden.metrics().refused(route, &e.code);
    answer_error(route, None, e)
}

/// Submits a turn and answers with it in OpenAI's dialect (`reply`).
pub(super) async fn respond(warden: &Warden, http: &HttpRequest, req: TurnRequest) -> HttpResponse {
    respond_in(warden, http, req, OpenAi).await
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
