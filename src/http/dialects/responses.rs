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

use super::fields::{Kind, all_optional, optional, required, unsupported};
use super::native::{self, NativeRequest};
use super::responses_events::Responses;
use crate::error::ApiError;
use crate::http::reply::OpenAi;
use crate::http::validate::{generating_fields, json_object, model_field, stream_field};
use crate::http::validate_text::keep_alive_field;
use crate::law::request::Violation;
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
/// else for the token counter).
pub fn responses_request(bytes: &[u8], generate: bool) -> Result<ResponsesRequest, ApiError> {
    let mut body = json_object(bytes)?;
    // A null field is an absent one, as OpenAI reads it; llama-server's
    // converter would read a null `instructions` as an empty system prompt.
    body.retain(|_, v| !v.is_null());
    let model = model_field(&mut body)?;
    let keep_alive = keep_alive_field(&mut body)?;
    let stream = generate && stream_field(&body)?;
    if body.get("previous_response_id").is_some_and(|v| !v.is_null()) {
        return Err(unsupported(
            "previous_response_id",
            "'previous_response_id' is not supported: this server stores no responses; send the whole conversation in 'input'",
        )
        .into());
    }
    optional(&body, "instructions", Kind::Text, "instructions")?;
    let (has_answer, images) = input(&mut body)?;
    tools(&body)?;
    text_format(&mut body)?;
    if generate {
        all_optional(
            &body,
            &[("max_output_tokens", Kind::Count), ("reasoning", Kind::Object)],
        )?;
        // The converter passes every other field to the chat parser: the
        // rules every generating route shares (`law::request`), and the
        // bound folded into `n_predict`, the field the child reads first.
        let output = body.remove("max_output_tokens").and_then(|v| v.as_u64());
        generating_fields(Route::Responses, &body)?;
        if let Some(m) = output {
            let n = body.get("n_predict").and_then(Value::as_u64).map_or(m, |n| n.min(m));
            body.insert("n_predict".into(), json!(n));
        }
    }
    Ok(ResponsesRequest {
        model,
        stream,
        body,
        keep_alive,
        has_answer,
        images,
    })
}

/// `input`: a string, or a non-empty array of items; whether an answer is
/// among them, and whether any part is an image.
fn input(body: &mut Map<String, Value>) -> Result<(bool, bool), Violation> {
    let items = match body.get_mut("input") {
        Some(Value::String(_)) => return Ok((false, false)),
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => {
            return Err(Violation::new(
                "missing_required_parameter",
                "'input' is required",
                "input",
            ));
        }
        Some(_) => {
            return Err(Violation::new(
                "invalid_type",
                "'input' must be a string or an array of items",
                "input",
            ));
        }
    };
    if items.is_empty() {
        return Err(Violation::new("empty_input", "'input' must not be empty", "input"));
    }
    let (mut has_answer, mut images) = (false, false);
    for (i, item) in items.iter_mut().enumerate() {
        let param = format!("input[{i}]");
        let Value::Object(item) = item else {
            return Err(Violation::new(
                "invalid_type",
                format!("'{param}' must be an object"),
                param,
            ));
        };
        let role = item.get("role").and_then(Value::as_str).map(str::to_string);
        let field = |k: &str| format!("{param}.{k}");
        match (role.as_deref(), item.get("type").and_then(Value::as_str)) {
            (Some("user" | "system" | "developer"), _) => images |= parts(item, &param, false)?,
            (Some("assistant"), None | Some("message")) => {
                item.insert("type".into(), json!("message"));
                has_answer = true;
                parts(item, &param, true)?;
            }
            (None, Some("function_call")) => {
                for k in ["call_id", "name", "arguments"] {
                    required(item, k, Kind::Text, &field(k))?;
                }
                has_answer = true;
            }
            (None, Some("function_call_output")) => {
                required(item, "call_id", Kind::Text, &field("call_id"))?;
                match item.get("output") {
                    Some(Value::String(_)) => {}
                    Some(Value::Array(outs)) if outs.iter().all(|o| o.get("type") == Some(&json!("input_text"))) => {}
                    _ => {
                        return Err(Violation::new(
                            "invalid_type",
                            format!("'{}' must be a string or an array of input_text parts", field("output")),
                            field("output"),
                        ));
                    }
                }
            }
            (None, Some("reasoning")) => {
                let ok = item.get("summary").is_some_and(Value::is_array)
                    && item
                        .get("content")
                        .and_then(|c| c.get(0))
                        .and_then(|c| c.get("text"))
                        .is_some_and(Value::is_string);
                if !ok {
                    return Err(Violation::new(
                        "invalid_type",
                        format!("'{param}' (reasoning) needs 'summary' and 'content' with a text part"),
                        param,
                    ));
                }
            }
            _ => {
                return Err(Violation::new(
                    "invalid_value",
                    format!(
                        "'{param}' is not a message (role user, system, developer or assistant), function_call, function_call_output or reasoning item"
                    ),
                    param,
                ));
            }
        }
    }
    Ok((has_answer, images))
}

/// A message item's `content`: a string or parts of the types its role
/// may send; whether any is an image.
fn parts(item: &Map<String, Value>, param: &str, answer: bool) -> Result<bool, Violation> {
    let param = format!("{param}.content");
    let parts = match item.get("content") {
        Some(Value::String(_)) => return Ok(false),
        None if answer => return Ok(false),
        Some(Value::Array(p)) => p,
        _ => {
            return Err(Violation::new(
                "invalid_type",
                format!("'{param}' must be a string or an array of parts"),
                param,
            ));
        }
    };
    let mut images = false;
    for (j, p) in parts.iter().enumerate() {
        let at = format!("{param}[{j}]");
        let p = p
            .as_object()
            .ok_or_else(|| Violation::new("invalid_type", format!("'{at}' must be an object"), &at))?;
        match (answer, p.get("type").and_then(Value::as_str)) {
            (_, Some("input_text")) | (true, Some("output_text")) => {
                required(p, "text", Kind::Text, &format!("{at}.text"))?
            }
            (true, Some("refusal")) => required(p, "refusal", Kind::Text, &format!("{at}.refusal"))?,
            (false, Some("input_image")) => {
                required(p, "image_url", Kind::Text, &format!("{at}.image_url"))?;
                images = true;
            }
            (false, Some("input_file")) => {
                return Err(unsupported(
                    &format!("{at}.type"),
                    "'input_file' parts are not supported by this server",
                ));
            }
            _ => {
                let allowed = if answer {
                    "output_text or refusal"
                } else {
                    "input_text or input_image"
                };
                return Err(Violation::new(
                    "invalid_value",
                    format!("'{at}.type' must be {allowed}"),
                    format!("{at}.type"),
                ));
            }
        }
    }
    Ok(images)
}

/// `tools`: an array of objects; a function tool has a name.
fn tools(body: &Map<String, Value>) -> Result<(), Violation> {
    optional(body, "tools", Kind::Array, "tools")?;
    let Some(Value::Array(tools)) = body.get("tools") else {
        return Ok(());
    };
    for (i, t) in tools.iter().enumerate() {
        let param = format!("tools[{i}]");
        let t = t
            .as_object()
            .ok_or_else(|| Violation::new("invalid_type", format!("'{param}' must be an object"), &param))?;
        if t.get("type").and_then(Value::as_str) == Some("function") {
            required(t, "name", Kind::Text, &format!("{param}.name"))?;
            optional(t, "parameters", Kind::Object, &format!("{param}.parameters"))?;
        }
    }
    Ok(())
}

/// `text.format` as chat's `response_format` (`text` removed).
fn text_format(body: &mut Map<String, Value>) -> Result<(), Violation> {
    optional(body, "text", Kind::Object, "text")?;
    let Some(format) = body.get("text").and_then(|t| t.get("format")).cloned() else {
        body.remove("text");
        return Ok(());
    };
    let rf = match format.get("type").and_then(Value::as_str) {
        Some("text") => None,
        // b10883 turns chat's json_object into the empty schema `{}`,
        // which its chat path does not constrain: any object instead.
        Some("json_object") => {
            Some(json!({"type": "json_schema", "json_schema": {"name": "json_object", "schema": {"type": "object"}}}))
        }
        Some("json_schema") => {
            let schema = format.get("schema").filter(|s| s.is_object()).ok_or_else(|| {
                Violation::new(
                    "invalid_type",
                    "'text.format.schema' must be an object",
                    "text.format.schema",
                )
            })?;
            let name = format.get("name").cloned().unwrap_or(json!("response"));
            Some(json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema}}))
        }
        _ => {
            return Err(unsupported(
                "text.format.type",
                "'text.format.type' must be text, json_object or json_schema",
            ));
        }
    };
    body.remove("text");
    if let Some(rf) = rf {
        body.insert("response_format".into(), rf);
    }
    Ok(())
}

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
