//! OpenAI's Responses API: `POST /v1/responses` (streamed as its
//! `response.*` events, or whole) and `POST /v1/responses/input_tokens`,
//! relayed natively to llama-server, which converts them to chat itself
//! (`server_chat_convert_responses_to_chatcmpl` in b10883's
//! `server-chat.cpp`).
//!
//! Validated here, where that converter or the chat parser after it would
//! throw a type error (a 500): `input` (a string, or items as the
//! converter classifies them), `instructions`, `max_output_tokens` (a
//! count below 2^31, folded into the generation's bound), `tools`, and the
//! sampling fields by the rules every generating route shares
//! (`law::request`). Decided here:
//! - A top-level `null` is an absent field (a null `instructions` would
//!   otherwise become an empty system prompt, replacing the template's).
//! - `previous_response_id` is refused (400 `unsupported_value`): nothing
//!   is stored, so there is no earlier response to continue.
//! - An assistant item without `"type": "message"` (the SDKs' short form
//!   of a history entry) gets it: llama-server cannot classify it without.
//! - `text.format` (structured output) becomes chat's `response_format`,
//!   which the converter would otherwise drop without a word; `json_object`
//!   as the schema of any object (b10883 leaves chat's own `json_object`
//!   unconstrained).
//! - Tools of a type other than `function` (hosted tools: web search,
//!   file search, ...) are left for llama-server, which skips them with a
//!   warning: no local model can run them, and refusing would fail every
//!   request of a client that always lists them.
//!
//! - The stream's events get the `output_index`, `content_index` and
//!   `sequence_number` b10883 leaves out, which the SDKs' stream helpers
//!   need (`responses_events`).
//!
//! Errors are OpenAI's shape; in a stream, an `event: error` event whose
//! data is both the Responses error event and `{"error": ...}` (which the
//! SDKs raise) ends it. Notices are SSE comments.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Map, Value, json};

use super::native::{self, NativeRequest};
use super::responses_events::Responses;
use super::responses_request::{Body, FormatKind};
use crate::error::ApiError;
use crate::http::reply::OpenAi;
use crate::http::typed::decode;
use crate::http::validate::{generating_fields, json_object, model_field, stream_field};
use crate::http::validate_text::keep_alive_field;
use crate::law::route::Route;
use crate::warden::Warden;

/// `POST /v1/responses`.
pub async fn create(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    native::turn(
        warden,
        http,
        payload,
        Route::Responses,
        responses_request,
        opening,
        Responses::default(),
    )
    .await
}

/// `POST /v1/responses/input_tokens`: beside a running turn when its model
/// runs (`law::route`).
pub async fn input_tokens(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    native::count(
        warden,
        http,
        payload,
        Route::ResponsesInputTokens,
        responses_request,
        OpenAi,
    )
    .await
}

/// A validated Responses body.
pub type ResponsesRequest = NativeRequest;

/// The opening of a Responses conversation: its instructions and its
/// first input items (or its input text).
fn opening(body: &Map<String, Value>) -> Vec<&Value> {
    let mut opening: Vec<&Value> = body.get("instructions").into_iter().collect();
    match body.get("input") {
        Some(Value::Array(items)) => opening.extend(super::opening(items)),
        Some(text) => opening.push(text),
        None => {}
    }
    opening
}

/// Parses and validates a Responses body (`generate`: for `/v1/responses`,
/// else for the token counter): the typed request (`responses_request`),
/// then the decided changes to the body.
pub fn responses_request(bytes: &[u8], generate: bool) -> Result<ResponsesRequest, ApiError> {
    let mut body = json_object(bytes)?;
    // A null field is an absent one, as OpenAI reads it; llama-server's
    // converter would read a null `instructions` as an empty system prompt.
    body.retain(|_, v| !v.is_null());
    let model = model_field(&mut body)?;
    let keep_alive = keep_alive_field(&mut body)?;
    let stream = generate && stream_field(&body)?;
    let read = decode::<Body>(&body)?.check()?;
    if let Some(Value::Array(items)) = body.get_mut("input") {
        for &i in &read.untyped_answers {
            items[i]["type"] = json!("message");
        }
    }
    text_format(&mut body, read.format);
    if generate {
        // The converter passes every other field to the chat parser: the
        // rules every generating route shares (`law::request`), and the
        // bound folded into `n_predict`, the field the child reads first.
        body.remove("max_output_tokens");
        generating_fields(Route::Responses, &body)?;
        if let Some(m) = read.max_output_tokens {
            let n = body
                .get("n_predict")
                .and_then(Value::as_u64)
                .map_or(m as u64, |n| n.min(m as u64));
            body.insert("n_predict".into(), json!(n));
        }
    }
    Ok(ResponsesRequest {
        model,
        stream,
        body,
        keep_alive,
        has_answer: read.has_answer,
        image: read.image,
    })
}

/// `text.format` (of the type the typed request read) as chat's
/// `response_format`; `text` removed.
fn text_format(body: &mut Map<String, Value>, kind: Option<FormatKind>) {
    let format = body
        .remove("text")
        .and_then(|mut t| t.get_mut("format").map(Value::take));
    let rf = match (kind, format) {
        (Some(FormatKind::JsonSchema), Some(f)) => {
            let name = f.get("name").cloned().unwrap_or(json!("response"));
            Some(json!({"type": "json_schema", "json_schema": {"name": name, "schema": f["schema"]}}))
        }
        // b10883 turns chat's json_object into the empty schema `{}`,
        // which its chat path does not constrain: any object instead.
        (Some(FormatKind::JsonObject), _) => {
            Some(json!({"type": "json_schema", "json_schema": {"name": "json_object", "schema": {"type": "object"}}}))
        }
        _ => None,
    };
    if let Some(rf) = rf {
        body.insert("response_format".into(), rf);
    }
}

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
