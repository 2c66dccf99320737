//! Request validation for `/v1/chat/completions`: everything that would make
//! the child fail or crash is refused here with a 400 in OpenAI's error
//! shape, naming the field. Unknown fields pass through untouched (OpenAI
//! and llama.cpp extensions alike).

use serde_json::{Map, Value};

use super::chat_request;
use super::typed::decode;
use crate::error::ApiError;
use crate::law::request::{self};
use crate::law::request_chat::Needs;
use crate::law::route::Route;
use crate::messages::TurnOptions;

/// A validated chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The model id, when named.
    pub model: Option<String>,
    /// Whether to stream.
    pub stream: bool,
    /// The body, to be adapted by the engine.
    pub body: Map<String, Value>,
    /// Notice switches derived from the request.
    pub options: TurnOptions,
    /// The conversation's key: the fingerprint of its opening (every
    /// `system`/`developer` message before the first `user` message, and
    /// that message), which every later turn of the same conversation
    /// repeats. A client may name it instead (`X-Warden-Conversation`).
    pub conversation: String,
    /// The keep-alive asked for in the body (removed from it).
    pub keep_alive: Option<crate::law::keep_alive::KeepAlive>,
    /// What the request needs of its model (media parts).
    pub needs: Needs,
}

pub(super) fn invalid(code: &str, msg: impl Into<String>, param: &str) -> ApiError {
    ApiError::invalid(code, msg, Some(param))
}

/// Parses and validates a request body.
pub fn chat_request(bytes: &[u8]) -> Result<ChatRequest, ApiError> {
    chat_request_of(json_object(bytes)?)
}

/// As `chat_request`, over a body already read into a JSON object (a
/// dialect that translated its own body: read once, never written out
/// and read again).
pub fn chat_request_of(mut body: Map<String, Value>) -> Result<ChatRequest, ApiError> {
    let model = model_field(&mut body)?;
    let stream = stream_field(&body)?;
    let keep_alive = super::validate_text::keep_alive_field(&mut body)?;
    let mut r = chat_messages(body, model, stream)?;
    r.keep_alive = keep_alive;
    Ok(r)
}

/// A body as a JSON object, or the 400 that says what it is instead.
pub fn json_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        let what = if std::str::from_utf8(bytes).is_err() {
            "the request body is not valid UTF-8"
        } else {
            "the request body is not valid JSON"
        };
        ApiError::invalid("invalid_json", format!("{what}: {e}"), None)
    })?;
    let Value::Object(body) = value else {
        return Err(ApiError::invalid(
            "invalid_request",
            "the request body must be a JSON object",
            None,
        ));
    };
    Ok(body)
}

/// `model`, removed from the body (the engine names the child itself).
pub fn model_field(body: &mut Map<String, Value>) -> Result<Option<String>, ApiError> {
    let model = model_name(body)?;
    body.remove("model");
    Ok(model)
}

/// `model` as the body names it: absent or null is `None` (the default
/// model), anything but a non-empty string a 400. The one reading of the
/// field for every dialect.
pub fn model_name(body: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match body.get("model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(_) => Err(invalid("invalid_type", "'model' must be a non-empty string", "model")),
    }
}

/// `stream`: absent or null is `false`.
pub fn stream_field(body: &Map<String, Value>) -> Result<bool, ApiError> {
    match body.get("stream") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(invalid("invalid_type", "'stream' must be a boolean", "stream")),
    }
}

/// The chat-specific part: every field's rule (`law::request`), then the
/// typed request's nested shapes (`chat_request`).
fn chat_messages(body: Map<String, Value>, model: Option<String>, stream: bool) -> Result<ChatRequest, ApiError> {
    generating_fields(Route::Chat, &body)?;
    let read = decode::<chat_request::Body>(&body)?.check()?;
    // The fingerprint is of the messages as sent (the typed request said
    // they are an array).
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let conversation = crate::law::conversation::key(crate::law::conversation::opening(messages));
    Ok(ChatRequest {
        model,
        stream,
        conversation,
        keep_alive: None,
        needs: read.needs,
        body,
        options: TurnOptions {
            // A conversation "already has messages" when it carries an
            // earlier answer: then an idle reap's reload is worth saying.
            announce_idle_reload: read.has_answer,
            stateful: true,
        },
    })
}

/// The field table of a generating route (the engine folds the token
/// bound at the turn, for embedders' turns too: `law::request::token_bound`).
pub fn generating_fields(route: Route, body: &Map<String, Value>) -> Result<(), ApiError> {
    request::check_fields(route, body).map_err(violation)
}

/// A rule's violation as the 400 that names its field.
pub fn violation(v: request::Violation) -> ApiError {
    v.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_requests_are_refused_with_the_field_named() {
        let rows: &[(&[u8], &str, Option<&str>)] = &[
            (b"{not json", "invalid_json", None),
            (b"\xff\xfe{}", "invalid_json", None),
            (b"[1,2]", "invalid_request", None),
            (b"{}", "missing_required_parameter", Some("messages")),
            (br#"{"messages": []}"#, "empty_messages", Some("messages")),
            (br#"{"messages": "hi"}"#, "invalid_type", Some("messages")),
            (br#"{"messages": [1]}"#, "invalid_type", Some("messages[0]")),
            (
                br#"{"messages": [{"role": "wizard", "content": "x"}]}"#,
                "invalid_value",
                Some("messages[0].role"),
            ),
            (
                br#"{"messages": [{"role": "user", "content": 5}]}"#,
                "invalid_type",
                Some("messages[0].content"),
            ),
            (
                br#"{"model": 7, "messages": [{"role": "user", "content": "x"}]}"#,
                "invalid_type",
                Some("model"),
            ),
            (
                br#"{"stream": "yes", "messages": [{"role": "user", "content": "x"}]}"#,
                "invalid_type",
                Some("stream"),
            ),
            (
                br#"{"max_tokens": -1, "messages": [{"role": "user", "content": "x"}]}"#,
                "invalid_value",
                Some("max_tokens"),
            ),
            (
                br#"{"max_tokens": "9", "messages": [{"role": "user", "content": "x"}]}"#,
                "invalid_type",
                Some("max_tokens"),
            ),
            (
                br#"{"n": 2, "messages": [{"role": "user", "content": "x"}]}"#,
                "unsupported_value",
                Some("n"),
            ),
            (
                br#"{"temperature": "hot", "messages": [{"role": "user", "content": "x"}]}"#,
                "invalid_type",
                Some("temperature"),
            ),
        ];
        for (i, (body, code, param)) in rows.iter().enumerate() {
            let e = chat_request(body).expect_err(&format!("row {i} should fail"));
            assert_eq!(
                (e.status, e.code.as_str(), e.param.as_deref()),
                (400, *code, *param),
                "row {i}"
            );
        }
    }

    #[test]
    fn good_requests_keep_unknown_fields_and_derive_options() {
        let r = chat_request(
            br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":[{"type":"text","text":"c"}]}],"mirostat":2}"#,
        )
        .unwrap();
        assert_eq!(r.model.as_deref(), Some("m"));
        assert!(r.stream);
        assert!(r.options.announce_idle_reload);
        assert!(r.body.contains_key("mirostat"));
        assert!(!r.body.contains_key("model"));
        let plain = chat_request(br#"{"messages":[{"role":"user","content":"a"}]}"#).unwrap();
        assert!(!plain.options.announce_idle_reload && !plain.stream && plain.model.is_none());
        // why: a later turn of the same conversation keeps its key; another opening changes it
        assert_eq!(r.conversation, plain.conversation);
        let other = chat_request(br#"{"messages":[{"role":"user","content":"z"}]}"#).unwrap();
        assert_ne!(other.conversation, plain.conversation);
    }
}
