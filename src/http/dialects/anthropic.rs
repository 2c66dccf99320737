//! Anthropic's Messages API: `POST /v1/messages` (streamed as Anthropic's
//! SSE event sequence, `message_start` ... `message_stop`, or whole) and
//! `POST /v1/messages/count_tokens`, relayed natively to llama-server,
//! which converts them to chat itself (`server_chat_convert_anthropic_to_oai`
//! in b10883's `server-chat.cpp`).
//!
//! Validated here, because that converter throws (a 500) or silently skips
//! what it does not understand: the body becomes its typed request
//! (`anthropic_request`: `messages`, `system`, `tools`, `stop_sequences`,
//! `thinking`), and the sampling fields and `max_tokens` (a count below
//! 2^31, the generation's bound, capped by the window) follow the rules
//! every generating route shares (`law::request`). `max_tokens` may be
//! omitted (the window then bounds the answer), unlike on Anthropic's API.
//!
//! Errors are Anthropic's shape, `{"type": "error", "error": {"type",
//! "message"}}`, with the warden's `code`, `param` and `raw` beside; in a
//! stream, an `event: error` event ends it. Notices are SSE comments, which
//! Anthropic's SDKs skip.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value, json};

use super::anthropic_request::Body;
use super::native::{self, NativeRequest};
use crate::error::ApiError;
use crate::http::reply::Wire;
use crate::http::typed::decode;
use crate::http::validate::{generating_fields, json_object, model_field, stream_field};
use crate::http::validate_text::keep_alive_field;
use crate::law::route::Route;
use crate::messages::Notice;
use crate::warden::Warden;

/// `POST /v1/messages`.
pub async fn messages(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    native::turn(
        warden,
        http,
        payload,
        Route::Messages,
        messages_request,
        opening,
        Anthropic,
    )
    .await
}

/// `POST /v1/messages/count_tokens`: beside a running turn when its model
/// runs (`law::route`).
pub async fn count_tokens(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    native::count(
        warden,
        http,
        payload,
        Route::MessagesCountTokens,
        messages_request,
        Anthropic,
    )
    .await
}

/// A validated Messages body.
pub type MessagesRequest = NativeRequest;

/// The opening of a Messages conversation: its system prompt and its
/// first messages.
fn opening(body: &Map<String, Value>) -> Vec<&Value> {
    let mut opening: Vec<&Value> = body.get("system").into_iter().collect();
    if let Some(Value::Array(m)) = body.get("messages") {
        opening.extend(super::opening(m));
    }
    opening
}

/// Parses and validates a Messages body (`generate`: for `/v1/messages`,
/// else for the token counter, which skips the sampling rules): the typed
/// request decoded once (`anthropic_request`), then the sampling fields by the
/// rules every generating route shares (`law::request`), `max_tokens`
/// folded into the bound the engine gives back as `max_tokens`
/// (`Route::bound_field`).
pub fn messages_request(bytes: &[u8], generate: bool) -> Result<MessagesRequest, ApiError> {
    let mut body = json_object(bytes)?;
    let model = model_field(&mut body)?;
    let keep_alive = keep_alive_field(&mut body)?;
    let stream = generate && stream_field(&body)?;
    let read = decode::<Body>(&body)?.check()?;
    if generate {
        generating_fields(Route::Messages, &body)?;
    }
    Ok(MessagesRequest {
        model,
        stream,
        body,
        keep_alive,
        has_answer: read.has_answer,
        image: read.image,
    })
}

/// Anthropic's error `type` for a status.
fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        s if s >= 500 && s != 501 => "api_error",
        _ => "invalid_request_error",
    }
}

/// `{"type": "error", "error": {...}}`: an error in Anthropic's shape, the
/// warden's `code`, `param` and `raw` kept beside its `type` and `message`.
pub fn error_body(e: &ApiError) -> Value {
    let mut inner = json!({
        "type": error_type(e.status),
        "message": e.message,
        "code": e.code,
    });
    if let Some(p) = &e.param {
        inner["param"] = json!(p);
    }
    if let Some(r) = &e.raw {
        inner["raw"] = json!(r);
    }
    json!({ "type": "error", "error": inner })
}

/// An error response in Anthropic's shape.
pub fn error_response(e: &ApiError) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)).json(error_body(e))
}

/// `event: error` with Anthropic's error body.
fn error_event(body: &Value) -> Bytes {
    let json = serde_json::to_vec(body).expect("an error serializes");
    let mut b = BytesMut::with_capacity(json.len() + 22);
    b.extend_from_slice(b"event: error\ndata: ");
    b.extend_from_slice(&json);
    b.extend_from_slice(b"\n\n");
    b.freeze()
}

/// Anthropic's wire: the child's Messages events pass through byte for
/// byte, except its own error events (llama-server writes OpenAI's error
/// object under `event: error`), which are reshaped.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anthropic;

impl Wire for Anthropic {
    fn refusal(&self, e: &ApiError) -> HttpResponse {
        error_response(e)
    }
    fn event(&mut self, raw: Bytes) -> Option<Bytes> {
        let mut parser = crate::sse::SseParser::new();
        let mut events = Vec::new();
        let _ = parser.push(&raw, &mut events);
        match events.first() {
            Some(ev) if ev.is_error() => {
                let child: Value = serde_json::from_slice(&ev.data).unwrap_or(Value::Null);
                let err = child.get("error").unwrap_or(&child);
                let status = err.get("code").and_then(Value::as_u64).unwrap_or(500) as u16;
                let e = crate::error::GenerationError::Upstream {
                    status,
                    body: Some(json!({ "error": err })),
                }
                .to_api();
                Some(error_event(&error_body(&e)))
            }
            _ => Some(raw),
        }
    }
    fn notice(&mut self, n: &Notice) -> Option<Bytes> {
        Some(crate::http::chat::notice_comment(n))
    }
    fn error(&mut self, e: &ApiError) -> Bytes {
        error_event(&error_body(e))
    }
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
