//! `GET /v1/models`: the catalog in OpenAI's list shape, each entry with the
//! facts the warden read from its header (or the reason it could not).

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::catalog::{ModelEntry, ModelFormat};
use crate::gguf;
use crate::law::kv;
use crate::warden::Warden;

/// The route handler. Header reads are a few milliseconds each and run off
/// the server's thread.
pub async fn list_models(warden: web::Data<Warden>) -> HttpResponse {
    let entries: Vec<_> = warden.catalog().entries().to_vec();
    let loaded = warden.status().model;
    let default = warden.catalog().default_id();
    let data = web::block(move || {
        entries
            .iter()
            .map(|e| model_json(e, loaded.as_deref() == Some(&e.id), default.as_deref() == Some(&e.id)))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    HttpResponse::Ok().json(json!({ "object": "list", "data": data }))
}

/// One entry of the list.
pub fn model_json(e: &ModelEntry, loaded: bool, default: bool) -> serde_json::Value {
    let created = std::fs::metadata(&e.path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let mut v = json!({
        "id": e.id,
        "object": "model",
        "created": created,
        "owned_by": "llm-warden",
        "format": e.format,
        "path": e.path,
        "loaded": loaded,
        "default": default,
    });
    if e.format == ModelFormat::Gguf {
        v["facts"] = match gguf::read_model_facts(&e.path) {
            Ok(f) => json!({
                "architecture": f.architecture,
                "file_type": f.file_type_name(),
                "layers": f.block_count,
                "trained_window": f.trained_window,
                "kv_bytes_per_token": kv::kv_bytes_per_token(&f),
                "sliding_window": f.sliding_window,
                "weights_bytes": f.weights_bytes,
                "chat_template": f.has_chat_template,
            }),
            Err(err) => json!({ "error": { "code": err.code(), "message": err.to_string() } }),
        };
    }
    v
}
