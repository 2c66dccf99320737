//! Request validation for the routes beside chat: `/v1/completions`,
//! `/infill`, `/tokenize`, `/detokenize`, and the keep-alive every
//! generating route accepts. As for chat, whatever would make the child fail
//! or crash is refused with a 400 naming the field, and unknown fields pass.
//!
//! Fields checked here because llama-server b10883 mishandles them: an
//! infill without `input_prefix`/`input_suffix` reaches `data.at(...)` after
//! its own error (a 500 instead of a 400); a detokenize id that is negative
//! or not an integer fails its JSON conversion. A completion's `prompt` is
//! accepted as a string only: an array asks for several completions, which
//! one slot serves one after another under a single turn's watchdogs.

use actix_web::HttpRequest;
use serde_json::{Map, Value};

use super::validate::{generating_fields, invalid, json_object, model_field, stream_field, violation};
use crate::error::ApiError;
use crate::law::keep_alive::{self, KeepAlive};
use crate::law::route::Route;

/// A validated request of one of these routes.
#[derive(Debug, Clone, PartialEq)]
pub struct TextRequest {
    /// The model id, when named.
    pub model: Option<String>,
    /// Whether to stream (always `false` for the tokenizer).
    pub stream: bool,
    /// The body for the child (`model` and `keep_alive` removed).
    pub body: Map<String, Value>,
    /// The keep-alive asked for in the body.
    pub keep_alive: Option<KeepAlive>,
}

/// Parses and validates a body for `route` (not chat: see `validate`).
pub fn text_request(route: Route, bytes: &[u8]) -> Result<TextRequest, ApiError> {
    text_request_of(route, json_object(bytes)?)
}

/// As `text_request`, over a body already read into a JSON object.
pub fn text_request_of(
    route: Route,
    mut body: serde_json::Map<String, serde_json::Value>,
) -> Result<TextRequest, ApiError> {
    let model = model_field(&mut body)?;
    let keep_alive = keep_alive_field(&mut body)?;
    let stream = match route {
        Route::Tokenize | Route::Detokenize | Route::Embeddings | Route::Rerank => false,
        _ => stream_field(&body)?,
    };
    debug_assert!(
        route != Route::Chat && crate::law::request_routes::BODY_RULES.iter().any(|r| r.route == route),
        "{route:?} bodies are validated by their dialect (`http::dialects`, `validate::chat_request`)"
    );
    crate::law::request_routes::check_body(route, &body).map_err(violation)?;
    if route.generates() {
        generating_fields(route, &body)?;
    }
    Ok(TextRequest {
        model,
        stream,
        body,
        keep_alive,
    })
}

/// `keep_alive`, removed from the body (the child would not know it).
pub fn keep_alive_field(body: &mut Map<String, Value>) -> Result<Option<KeepAlive>, ApiError> {
    keep_alive_value(body.remove("keep_alive").as_ref())
}

/// A `keep_alive` value (absent or null: none), or the 400 naming it.
pub fn keep_alive_value(v: Option<&Value>) -> Result<Option<KeepAlive>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => keep_alive::from_json(v)
            .map(Some)
            .map_err(|e| invalid("invalid_value", format!("'keep_alive' {e}"), "keep_alive")),
    }
}

/// The request's keep-alive: the body's field, else the
/// `X-Warden-Keep-Alive` header. The body wins because it is written per
/// request, while a header is often set once in a client's configuration.
pub fn keep_alive(body: Option<KeepAlive>, http: &HttpRequest) -> Result<Option<KeepAlive>, ApiError> {
    if body.is_some() {
        return Ok(body);
    }
    let Some(v) = http.headers().get("X-Warden-Keep-Alive") else {
        return Ok(None);
    };
    let v = v
        .to_str()
        .map_err(|_| ApiError::invalid("invalid_value", "the X-Warden-Keep-Alive header is not text", None))?;
    keep_alive::parse(v)
        .map(Some)
        .map_err(|e| ApiError::invalid("invalid_value", format!("X-Warden-Keep-Alive: {e}"), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_bodies_are_refused_with_the_field_named() {
        let rows: &[(Route, &str, &str, Option<&str>)] = &[
            (Route::Completions, "{}", "missing_required_parameter", Some("prompt")),
            (Route::Completions, r#"{"prompt": 5}"#, "invalid_type", Some("prompt")),
            // why: several prompts would run under one turn's watchdogs
            (
                Route::Completions,
                r#"{"prompt": ["a", "b"]}"#,
                "unsupported_value",
                Some("prompt"),
            ),
            // why: the sampling fields are chat's
            (
                Route::Completions,
                r#"{"prompt": "a", "max_tokens": -1}"#,
                "invalid_value",
                Some("max_tokens"),
            ),
            (
                Route::Completions,
                r#"{"prompt": "a", "stream": 1}"#,
                "invalid_type",
                Some("stream"),
            ),
            (
                Route::Completions,
                r#"{"prompt": "a", "keep_alive": "soon"}"#,
                "invalid_value",
                Some("keep_alive"),
            ),
            // why: llama-server answers a missing prefix with a 500
            (
                Route::Infill,
                r#"{"input_suffix": ""}"#,
                "missing_required_parameter",
                Some("input_prefix"),
            ),
            (
                Route::Infill,
                r#"{"input_prefix": ""}"#,
                "missing_required_parameter",
                Some("input_suffix"),
            ),
            (
                Route::Infill,
                r#"{"input_prefix": "", "input_suffix": "", "input_extra": [{"filename": "a"}]}"#,
                "invalid_type",
                Some("input_extra[0]"),
            ),
            (Route::Tokenize, "{}", "missing_required_parameter", Some("content")),
            (
                Route::Tokenize,
                r#"{"content": "a", "with_pieces": "yes"}"#,
                "invalid_type",
                Some("with_pieces"),
            ),
            (Route::Detokenize, "{}", "missing_required_parameter", Some("tokens")),
            // why: a negative id fails the child's JSON conversion
            (
                Route::Detokenize,
                r#"{"tokens": [1, -5]}"#,
                "invalid_type",
                Some("tokens[1]"),
            ),
            (
                Route::Detokenize,
                r#"{"tokens": [1.5]}"#,
                "invalid_type",
                Some("tokens[0]"),
            ),
            (Route::Tokenize, "[]", "invalid_request", None),
        ];
        for (i, (route, body, code, param)) in rows.iter().enumerate() {
            let e = text_request(*route, body.as_bytes()).expect_err(&format!("row {i} should fail"));
            assert_eq!(
                (e.status, e.code.as_str(), e.param.as_deref()),
                (400, *code, *param),
                "row {i}"
            );
        }
    }

    #[test]
    fn good_bodies_lose_model_and_keep_alive_only() {
        let r = text_request(
            Route::Completions,
            br#"{"model": "m", "prompt": "a", "stream": true, "keep_alive": "5m", "mirostat": 2}"#,
        )
        .unwrap();
        assert_eq!(r.model.as_deref(), Some("m"));
        assert!(r.stream);
        assert_eq!(r.keep_alive, Some(KeepAlive::For(std::time::Duration::from_secs(300))));
        assert!(!r.body.contains_key("model") && !r.body.contains_key("keep_alive"));
        assert!(r.body.contains_key("mirostat"));
        // why: the tokenizer never streams, whatever the body says
        let t = text_request(Route::Tokenize, br#"{"content": "hi", "stream": true}"#).unwrap();
        assert!(!t.stream);
        let d = text_request(Route::Detokenize, br#"{"tokens": [0, 1, 2]}"#).unwrap();
        assert!(d.model.is_none() && d.keep_alive.is_none());
    }
}
