//! The dialects beside OpenAI's that people's tools speak, each relayed
//! through the same engine as chat (the same queue, load on demand,
//! keep-alive, notices, brake samples and KV saves by conversation):
//!
//! | dialect | routes | how |
//! |---|---|---|
//! | Anthropic Messages (`anthropic`) | `POST /v1/messages`, `/v1/messages/count_tokens` | relayed natively to llama-server, which serves both; validated here; errors in Anthropic's shape |
//! | OpenAI Responses (`responses`) | `POST /v1/responses`, `/v1/responses/input_tokens` | relayed natively; validated here |
//! | Chat token counting and templates (`counting`) | `POST /v1/chat/completions/input_tokens`, `/apply-template` | a chat body (`validate::chat_request`), relayed natively beside turns |
//! | Ollama (`ollama`) | `/api/chat`, `/api/generate`, `/api/tags`, `/api/ps`, `/api/show`, `/api/version`, `/`, ... | translated by the warden to chat, completions or infill and back |
//!
//! Each dialect's `Wire` (`reply`) says the child's events, the warden's
//! notices and errors its own way. Each dialect's body becomes its typed
//! request (`anthropic_request`, `responses_request`, chat's and the text
//! routes' in `validate`, Ollama's in `ollama::translate`) through
//! `http::typed::decode`.

pub mod anthropic;
mod anthropic_request;
pub mod counting;
pub mod native;
pub mod ollama;
pub mod responses;
pub mod responses_events;
mod responses_request;

use actix_web::{HttpRequest, HttpResponse};
use serde_json::Value;

use crate::error::ApiError;

/// A request header as text.
pub(crate) fn header(http: &HttpRequest, name: &str) -> Option<String> {
    http.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The conversation's key: `X-Warden-Conversation` when the client names
/// it, else a fingerprint of its opening, `opening` (what every later turn
/// of the same conversation repeats: its system prompt and the messages up
/// to the first user message), as chat's (`validate`).
pub(crate) fn conversation(http: &HttpRequest, opening: &[&Value]) -> String {
    header(http, "X-Warden-Conversation").unwrap_or_else(|| crate::law::conversation::key(opening.iter().copied()))
}

pub(crate) use crate::law::conversation::opening;

/// The dialect whose shape an error on `path` takes (for the answers given
/// before any handler: a refused key, an unknown route).
pub fn error_for_path(path: &str, e: &ApiError) -> HttpResponse {
    if path.starts_with("/v1/messages") {
        anthropic::error_response(e)
    } else if path.starts_with("/api/") {
        ollama::error_response(e)
    } else {
        super::errors::error_response(e)
    }
}
