//! Ollama's `/api/embed` (and the legacy `/api/embeddings`) translated onto
//! `/v1/embeddings` of the embedding model's child, through the same queue
//! and load as every turn. Ollama's shapes (its API reference, and its
//! client `ollama==0.6.3`): `/api/embed` takes `input`, a string or an
//! array of strings, and answers `{model, embeddings: [[...]],
//! total_duration, load_duration, prompt_eval_count}` (durations in
//! nanoseconds); `/api/embeddings` takes `prompt` and answers
//! `{embedding: [...]}`. `truncate` and `options` are accepted and have no
//! effect (the child keeps each input within its window or refuses it).

use std::time::Instant;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Map, Value, json};

use super::error_response;
use crate::error::{ApiError, WardenError};
use crate::http::body::read_body;
use crate::http::validate::{json_object, model_name};
use crate::http::validate_text::{keep_alive, keep_alive_value};
use crate::law::route::Route;
use crate::warden::{Chunk, TurnRequest, Warden};

/// `POST /api/embed` and `POST /api/embeddings`.
pub async fn embed(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    let legacy = http.path().ends_with("/embeddings");
    let started = Instant::now();
    let asked = match read(&warden, &http, payload, legacy).await {
        Ok(a) => a,
        Err(e) => {
            warden.metrics().refused(Route::Embeddings, &e.code);
            return error_response(&e);
        }
    };
    let name = asked.name.clone();
    let mut turn = match warden.chat(asked.turn) {
        Ok(t) => t,
        Err(e) => return error_response(&e.to_api()),
    };
    let mut load_ms = 0;
    let answer = loop {
        match turn.next().await {
            Some(Chunk::Event(v)) => break v,
            Some(Chunk::Notice(crate::status::Notice::Loaded { load_ms: ms, .. })) => load_ms = ms,
            Some(Chunk::Error(e)) => return error_response(&e.to_api()),
            Some(_) => {}
            None => return error_response(&WardenError::EngineUnavailable.to_api()),
        }
    };
    if let Some(e) = answer.get("error") {
        let message = e["message"].as_str().unwrap_or("the model server refused the request");
        return error_response(&ApiError::invalid("invalid_value", message, None));
    }
    let vectors: Vec<Value> = answer["data"]
        .as_array()
        .map(|d| d.iter().map(|x| x["embedding"].clone()).collect())
        .unwrap_or_default();
    if legacy {
        return HttpResponse::Ok().json(json!({ "embedding": vectors.first().cloned().unwrap_or(json!([])) }));
    }
    HttpResponse::Ok().json(json!({
        "model": name,
        "embeddings": vectors,
        "total_duration": started.elapsed().as_nanos() as u64,
        "load_duration": load_ms * 1_000_000,
        "prompt_eval_count": answer["usage"]["prompt_tokens"],
    }))
}

/// What an embed request asked for.
struct Asked {
    /// The name the reply echoes.
    name: String,
    turn: TurnRequest,
}

async fn read(warden: &Warden, http: &HttpRequest, payload: web::Payload, legacy: bool) -> Result<Asked, ApiError> {
    let cfg = warden.config();
    let bytes = read_body(payload, cfg.max_body_bytes, cfg.body_timeout).await?;
    let body = json_object(&bytes)?;
    // Ollama's embed names its model (no default, as Ollama's own).
    let Some(name) = model_name(&body)? else {
        return Err(ApiError::invalid(
            "missing_required_parameter",
            "'model' is required",
            Some("model"),
        ));
    };
    let model = super::resolve(warden, Some(&name))?;
    let field = if legacy { "prompt" } else { "input" };
    let input = match body.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Value::String(s.clone()),
        Some(Value::Array(a))
            if !legacy && !a.is_empty() && a.iter().all(|x| x.as_str().is_some_and(|s| !s.is_empty())) =>
        {
            Value::Array(a.clone())
        }
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(
                "missing_required_parameter",
                format!("'{field}' is required"),
                Some(field),
            ));
        }
        Some(_) => {
            let what = if legacy {
                "a non-empty string"
            } else {
                "a non-empty string or an array of non-empty strings"
            };
            return Err(ApiError::invalid(
                "invalid_type",
                format!("'{field}' must be {what}"),
                Some(field),
            ));
        }
    };
    let keep_alive = keep_alive(keep_alive_value(body.get("keep_alive"))?, http)?;
    let mut child_body = Map::new();
    child_body.insert("input".into(), input);
    Ok(Asked {
        name,
        turn: TurnRequest::new(Route::Embeddings, child_body)
            .resolved(model)
            .keep_alive(keep_alive),
    })
}
