//! `GET /v1/models`: the catalog in OpenAI's list shape, each entry with the
//! facts the warden read from its header (or the reason it could not) and
//! the plan a load would give it here (`Warden::plan_for`: the engine's own
//! plan, so a CUDA warden shows the CUDA window).

use std::sync::Arc;

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::catalog::{ModelEntry, ModelFormat};
use crate::gguf;
use crate::law::plan::Readings;
use crate::law::{header, kv};
use crate::warden::Warden;
use crate::warden::plan::SpawnPlan;

/// The route handler. Header reads are a few milliseconds each and run,
/// with the plans' readings, off the server's thread.
pub async fn list_models(warden: web::Data<Warden>) -> HttpResponse {
    let entries: Vec<_> = warden.catalog().entries().to_vec();
    // Every resident is loaded, not only the one used last.
    let loaded: Vec<String> = warden.status().residents.into_iter().map(|r| r.model).collect();
    let default = warden.catalog().default_id();
    let w = warden.get_ref().clone();
    let data = web::block(move || {
        // One reading of the machine for the whole list.
        let machine = w.plan_readings();
        entries
            .iter()
            .map(|e| {
                model_json(
                    &w,
                    &machine,
                    e,
                    loaded.contains(&e.id),
                    default.as_deref() == Some(&e.id),
                )
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    // Models in other tools' stores that cannot run: listed with the
    // reason, never served.
    let unusable = warden.catalog().unusable().to_vec();
    HttpResponse::Ok().json(json!({ "object": "list", "data": data, "unusable": unusable }))
}

/// One entry of the list.
pub fn model_json(
    w: &Warden,
    machine: &Readings,
    e: &Arc<ModelEntry>,
    loaded: bool,
    default: bool,
) -> serde_json::Value {
    let created = std::fs::metadata(&e.path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let caps = w.caps_of(e);
    let mut v = json!({
        "id": e.id,
        "object": "model",
        "created": created,
        "owned_by": "llm-warden",
        // Where it came from: the warden's own models, or another tool's
        // store (`ollama`, `hugging_face`, `lm_studio`, `llama_cache`).
        "source": w.catalog().source_of(&e.id),
        "aliases": w.catalog().aliases_of(&e.id),
        "format": e.format,
        "path": e.path,
        "loaded": loaded,
        "default": default,
        // What it serves: `chat`, or `embedding` (its header declares a
        // pooling); a reranker also says `rerank: true`.
        "kind": caps.kind,
        "rerank": caps.reranks,
    });
    let mut facts = None;
    if e.format == ModelFormat::Gguf {
        let read = gguf::read_model_facts(&e.path);
        v["facts"] = match &read {
            Ok(f) => json!({
                "architecture": f.architecture,
                "file_type": f.file_type_name(),
                "layers": f.block_count,
                "trained_window": f.trained_window,
                "kv_bytes_per_token": kv::kv_bytes_per_token(f),
                "sliding_window": f.sliding_window,
                "weights_bytes": f.weights_bytes,
                "chat_template": f.has_chat_template,
                "pooling": f.pooling,
            }),
            Err(err) => json!({ "error": { "code": err.code(), "message": err.to_string() } }),
        };
        match read {
            Ok(f) => facts = Some(Arc::new(f)),
            // A load refuses this file: there is no plan to show.
            Err(err) if header::is_fatal(&err) => return v,
            Err(_) => {}
        }
    }
    v["plan"] = plan_json(&w.plan_for(machine, e.clone(), facts));
    v
}

/// A plan as `/v1/models` shows it: the window (an MLX child runs its
/// trained window until memory bounds it; one without a trained window has
/// none until its child measured the ceiling: null), what it was sized on,
/// and the CUDA placement.
fn plan_json(p: &SpawnPlan) -> serde_json::Value {
    json!({
        "window": p.window,
        "context_tokens": p.window.ctx().or(p.mlx().and_then(|f| f.trained)),
        "memory_bound": p.window.memory_bound().is_some(),
        "budget_bytes": p.budget_bytes,
        "ram_bytes": p.ram.map(|r| r.bytes),
        "cuda": p.cuda(),
    })
}
