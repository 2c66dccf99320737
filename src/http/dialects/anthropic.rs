//! Anthropic's Messages API: `POST /v1/messages` (streamed as Anthropic's
//! SSE event sequence, `message_start` ... `message_stop`, or whole) and
//! `POST /v1/messages/count_tokens`, relayed natively to llama-server,
//! which converts them to chat itself (`server_chat_convert_anthropic_to_oai`
//! in b10883's `server-chat.cpp`).
//!
//! Validated here, because that converter throws (a 500) or silently skips
//! what it does not understand: `messages` (roles `user`/`assistant`,
//! content a string or blocks), `system`, `stop_sequences`, `tools`; the
//! sampling fields and `max_tokens` (a count below 2^31, the generation's
//! bound, capped by the window) by the rules every generating route shares
//! (`law::request`). Content blocks
//! of a type llama-server would drop without a word (`document`,
//! `search_result`, ...) are refused rather than answered as if the model
//! had read them; `redacted_thinking` is dropped by llama-server, which is
//! right (no local model can read it). `max_tokens` may be omitted
//! (the window then bounds the answer), unlike on Anthropic's API.
//!
//! Errors are Anthropic's shape, `{"type": "error", "error": {"type",
//! "message"}}`, with the warden's `code`, `param` and `raw` beside; in a
//! stream, an `event: error` event ends it. Notices are SSE comments, which
//! Anthropic's SDKs skip.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value, json};

use super::fields::{
    Kind, all_optional, of_kind, optional, required, required_array, required_object, required_text, unsupported,
};
use super::native::{self, NativeRequest};
use crate::error::ApiError;
use crate::http::reply::Wire;
use crate::http::validate::{generating_fields, json_object, model_field, stream_field};
use crate::http::validate_text::keep_alive_field;
use crate::law::request::Violation;
use crate::law::route::Route;
use crate::messages::Notice;
use crate::warden::Warden;

/// Content block types llama-server b10883 reads; `redacted_thinking` it
/// drops, as it must.
const BLOCKS: &[&str] = &[
    "text",
    "image",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
];

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
/// else for the token counter, which ignores the sampling fields).
pub fn messages_request(bytes: &[u8], generate: bool) -> Result<MessagesRequest, ApiError> {
    let mut body = json_object(bytes)?;
    let model = model_field(&mut body)?;
    let keep_alive = keep_alive_field(&mut body)?;
    let stream = generate && stream_field(&body)?;
    system(&body)?;
    let (has_answer, images) = messages_field(&body)?;
    tools(&body)?;
    if generate {
        all_optional(
            &body,
            &[
                ("stop_sequences", Kind::Texts),
                ("thinking", Kind::Object),
                ("metadata", Kind::Object),
            ],
        )?;
        if let Some(Value::Object(t)) = body.get("thinking") {
            optional(t, "budget_tokens", Kind::Count, "thinking.budget_tokens")?;
        }
        // The sampling fields by the rules every generating route shares
        // (`law::request`), `max_tokens` folded into the bound the engine
        // gives back as `max_tokens` (`Route::bound_field`).
        generating_fields(Route::Messages, &body)?;
    }
    Ok(MessagesRequest {
        model,
        stream,
        body,
        keep_alive,
        has_answer,
        images,
    })
}

/// `system`: a string or text blocks.
fn system(body: &Map<String, Value>) -> Result<(), Violation> {
    match body.get("system") {
        None | Some(Value::Null | Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => blocks.iter().enumerate().try_for_each(|(i, b)| {
            let param = format!("system[{i}]");
            let b = b
                .as_object()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .ok_or_else(|| Violation::new("invalid_type", format!("'{param}' must be a text block"), &param))?;
            required(b, "text", Kind::Text, &format!("{param}.text"))
        }),
        Some(_) => Err(Violation::new(
            "invalid_type",
            "'system' must be a string or an array of text blocks",
            "system",
        )),
    }
}

/// `messages`: required, non-empty, each a `user` or `assistant` message
/// whose content is a string or blocks; whether an answer is among them,
/// and whether any block is an image.
fn messages_field(body: &Map<String, Value>) -> Result<(bool, bool), Violation> {
    let messages = required_array(body, "messages", "messages")?;
    if messages.is_empty() {
        return Err(Violation::new(
            "empty_messages",
            "'messages' must not be empty",
            "messages",
        ));
    }
    let (mut has_answer, mut images) = (false, false);
    for (i, m) in messages.iter().enumerate() {
        let param = format!("messages[{i}]");
        let m = m
            .as_object()
            .ok_or_else(|| Violation::new("invalid_type", format!("'{param}' must be an object"), &param))?;
        match m.get("role").and_then(Value::as_str) {
            Some("user") => {}
            Some("assistant") => has_answer = true,
            _ => {
                return Err(Violation::new(
                    "invalid_value",
                    format!("'{param}.role' must be \"user\" or \"assistant\""),
                    format!("{param}.role"),
                ));
            }
        }
        let param = format!("{param}.content");
        match m.get("content") {
            Some(Value::String(_)) => {}
            Some(Value::Array(blocks)) => {
                for (j, b) in blocks.iter().enumerate() {
                    images |= block(b, &format!("{param}[{j}]"))?;
                }
            }
            None | Some(Value::Null) => {
                return Err(Violation::new(
                    "missing_required_parameter",
                    format!("'{param}' is required"),
                    param,
                ));
            }
            Some(_) => {
                return Err(Violation::new(
                    "invalid_type",
                    format!("'{param}' must be a string or an array of content blocks"),
                    param,
                ));
            }
        }
    }
    Ok((has_answer, images))
}

/// One content block; whether it is (or holds) an image.
fn block(b: &Value, param: &str) -> Result<bool, Violation> {
    let b = b
        .as_object()
        .ok_or_else(|| Violation::new("invalid_type", format!("'{param}' must be an object"), param))?;
    let kind = required_text(b, "type", &format!("{param}.type"))?;
    let field = |k: &str| format!("{param}.{k}");
    match kind {
        "text" => required(b, "text", Kind::Text, &field("text")).map(|_| false),
        "image" => {
            let source = required_object(b, "source", &field("source"))?;
            match source.get("type").and_then(Value::as_str) {
                Some("base64") => required(source, "data", Kind::Text, &field("source.data"))?,
                Some("url") => required(source, "url", Kind::Text, &field("source.url"))?,
                _ => {
                    return Err(unsupported(
                        &field("source.type"),
                        "an image source must be \"base64\" or \"url\"",
                    ));
                }
            }
            Ok(true)
        }
        "tool_use" => {
            required(b, "id", Kind::Text, &field("id"))?;
            required(b, "name", Kind::Text, &field("name"))?;
            optional(b, "input", Kind::Object, &field("input")).map(|_| false)
        }
        "tool_result" => {
            required(b, "tool_use_id", Kind::Text, &field("tool_use_id"))?;
            match b.get("content") {
                None | Some(Value::Null | Value::String(_)) => Ok(false),
                Some(Value::Array(parts)) => {
                    let mut images = false;
                    for (k, p) in parts.iter().enumerate() {
                        images |= block(p, &format!("{param}.content[{k}]"))?;
                    }
                    Ok(images)
                }
                Some(v) => of_kind(v, Kind::Array, &field("content")).map(|_| false),
            }
        }
        "thinking" => optional(b, "thinking", Kind::Text, &field("thinking")).map(|_| false),
        "redacted_thinking" => Ok(false),
        other => Err(unsupported(
            &field("type"),
            format!(
                "content blocks of type '{other}' are not read by this server's model (it reads {})",
                BLOCKS.join(", ")
            ),
        )),
    }
}

/// `tools`: each with a name; `tool_choice` an object with a type.
fn tools(body: &Map<String, Value>) -> Result<(), Violation> {
    optional(body, "tools", Kind::Array, "tools")?;
    if let Some(Value::Array(tools)) = body.get("tools") {
        for (i, t) in tools.iter().enumerate() {
            let param = format!("tools[{i}]");
            let t = t
                .as_object()
                .ok_or_else(|| Violation::new("invalid_type", format!("'{param}' must be an object"), &param))?;
            required(t, "name", Kind::Text, &format!("{param}.name"))?;
            optional(t, "input_schema", Kind::Object, &format!("{param}.input_schema"))?;
        }
    }
    optional(body, "tool_choice", Kind::Object, "tool_choice")?;
    if let Some(Value::Object(c)) = body.get("tool_choice") {
        required(c, "type", Kind::Text, "tool_choice.type")?;
    }
    Ok(())
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
