//! The Ollama API beside generation: `GET /api/tags` (the catalog), `GET
//! /api/ps` (the running model), `POST /api/show` (one model's facts),
//! `GET /api/version`, `GET`/`HEAD /` (how clients detect a server), and
//! clear refusals for what this server does not do: the model management
//! routes (`/api/push`, `/api/create`, `/api/delete`,
//! `/api/blobs/...`). The embeddings are `embed`'s; `/api/copy` is
//! `copy`'s (an alias in the settings file).
//!
//! Decided here: a model's `digest` is an identity of its file (its path,
//! size and modification time, hashed), not a content hash, which would
//! read the whole file on every listing; it changes when the file does.
//! `/api/version` says 0.9.0, the newest Ollama release whose API features
//! this translation serves (tools, images, structured outputs, `think`):
//! clients gate features on it.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use super::error_response;
use super::reply::{catalog_name, rfc3339};
use crate::catalog::{ModelEntry, ModelFormat};
use crate::error::ApiError;
use crate::error::WardenError;
use crate::gguf::{self, ModelFacts};
use crate::status::EngineKind;
use crate::warden::Warden;

/// The Ollama version `/api/version` says (see the module's doc).
pub const OLLAMA_VERSION: &str = "0.9.0";

/// `GET /` and `HEAD /`: what Ollama answers, so clients detect a server.
pub async fn root() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body("Ollama is running")
}

/// `GET /api/version`.
pub async fn version() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "version": OLLAMA_VERSION, "warden": env!("CARGO_PKG_VERSION") }))
}

/// A model file's facts and listing fields, read off the server's thread.
struct Described {
    entry: Arc<ModelEntry>,
    facts: Option<ModelFacts>,
    size: u64,
    modified_ms: u64,
}

fn describe(entry: Arc<ModelEntry>) -> Described {
    let meta = std::fs::metadata(&entry.path).ok();
    let modified_ms = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    let facts = (entry.format == ModelFormat::Gguf)
        .then(|| gguf::read_model_facts(&entry.path).ok())
        .flatten();
    // A split family's size is all its parts'.
    let size = match &facts {
        Some(f) if f.parts.len() > 1 => f
            .parts
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum(),
        _ => meta.map_or(0, |m| m.len()),
    };
    Described {
        entry,
        facts,
        size,
        modified_ms,
    }
}

impl Described {
    /// Stable across builds (`law::conversation::fnv1a64`): a client
    /// compares digests between two listings.
    fn digest(&self) -> String {
        let path = self.entry.path.to_string_lossy();
        let (size, modified) = (self.size.to_string(), self.modified_ms.to_string());
        format!(
            "{:016x}",
            crate::law::conversation::fnv1a64(&[path.as_ref(), &size, &modified])
        )
    }

    fn details(&self) -> Value {
        let family = self.facts.as_ref().map(|f| f.architecture.clone()).unwrap_or_default();
        json!({
            "parent_model": "",
            "format": match self.entry.format { ModelFormat::Gguf => "gguf", ModelFormat::Mlx => "mlx" },
            "family": family,
            "families": [family],
            "parameter_size": self.facts.as_ref().and_then(|f| f.size_label.clone()).unwrap_or_default(),
            "quantization_level": self.facts.as_ref().and_then(|f| f.file_type_name()).unwrap_or(""),
        })
    }

    /// An entry of `/api/tags`.
    fn listed(&self) -> Value {
        json!({
            "name": self.entry.id,
            "model": self.entry.id,
            "modified_at": rfc3339(self.modified_ms),
            "size": self.size,
            "digest": self.digest(),
            "details": self.details(),
        })
    }
}

/// `GET /api/tags`: every model of the catalog.
pub async fn tags(warden: web::Data<Warden>) -> HttpResponse {
    let entries = warden.catalog().entries().to_vec();
    let models = web::block(move || entries.into_iter().map(|e| describe(e).listed()).collect::<Vec<_>>())
        .await
        .unwrap_or_default();
    HttpResponse::Ok().json(json!({ "models": models }))
}

/// `GET /api/ps`: every resident model, most recently used first: its
/// memory (the weights and its window's KV cache), its window and when the
/// idle reap unloads it.
pub async fn ps(warden: web::Data<Warden>) -> HttpResponse {
    let residents = warden.status().residents;
    let cpu = warden.engine_kind() == EngineKind::Cpu;
    let found: Vec<_> = residents
        .into_iter()
        .filter_map(|r| Some((warden.catalog().get(&r.model)?, r)))
        .collect();
    let described = web::block(move || {
        found
            .into_iter()
            .map(|(entry, r)| (describe(entry), r))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let models: Vec<_> = described
        .into_iter()
        .map(|(d, r)| {
            let kv = d.facts.as_ref().map_or(0, crate::law::kv::kv_bytes_per_token);
            let size = d.size + kv * u64::from(r.context_tokens.unwrap_or(0));
            // Never reaped: as far ahead as a timestamp goes.
            let expires = r
                .idle_deadline_ms
                .map_or_else(|| "9999-12-31T23:59:59.000Z".to_string(), rfc3339);
            let mut v = d.listed();
            v["expires_at"] = json!(expires);
            v["size"] = json!(size);
            v["size_vram"] = json!(if cpu { 0 } else { size });
            v["context_length"] = json!(r.context_tokens);
            v
        })
        .collect();
    HttpResponse::Ok().json(json!({ "models": models }))
}

/// `POST /api/show` (`{"model": name}`, or the older `{"name": name}`).
pub async fn show(warden: web::Data<Warden>, body: web::Bytes) -> HttpResponse {
    let asked: Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(name) = ["model", "name"]
        .iter()
        .find_map(|k| asked.get(*k).and_then(Value::as_str))
    else {
        return error_response(&ApiError::invalid(
            "missing_required_parameter",
            "'model' is required",
            Some("model"),
        ));
    };
    let id = catalog_name(name, |id| warden.catalog().get(id).is_some());
    let Some(entry) = warden.catalog().get(id) else {
        return error_response(&WardenError::ModelNotFound(name.to_string()).to_api());
    };
    let Ok(d) = web::block(move || describe(entry)).await else {
        return error_response(&WardenError::ModelNotFound(name.to_string()).to_api());
    };
    let mut info = serde_json::Map::new();
    let mut capabilities = vec!["completion"];
    if d.entry.mmproj.is_some() {
        capabilities.push("vision");
    }
    if let Some(f) = &d.facts {
        let a = &f.architecture;
        info.insert("general.architecture".into(), json!(a));
        info.insert("general.file_type".into(), json!(f.file_type));
        info.insert(format!("{a}.block_count"), json!(f.block_count));
        info.insert(format!("{a}.embedding_length"), json!(f.embedding_length));
        if let Some(n) = f.trained_window {
            info.insert(format!("{a}.context_length"), json!(n));
        }
        if let Some(n) = &f.name {
            info.insert("general.name".into(), json!(n));
        }
    }
    // Ollama's own template layer when the model came from its store (what
    // Ollama would show), else the GGUF's.
    let template = warden
        .catalog()
        .layers_of(&d.entry.id)
        .and_then(|l| l.template.clone())
        .or_else(|| d.facts.as_ref().and_then(|f| f.chat_template.clone()))
        .unwrap_or_default();
    let cfg = warden.config();
    let parameters = parameters(&cfg, &d.entry.id);
    let system = cfg.models.get(&d.entry.id).and_then(|m| m.system.clone());
    let mut modelfile = modelfile(&d.entry.path, &template, &parameters);
    if let Some(s) = &system {
        modelfile.push_str(&format!("SYSTEM \"\"\"{s}\"\"\"\n"));
    }
    HttpResponse::Ok().json(json!({
        "modelfile": modelfile,
        "parameters": parameters,
        "template": template,
        "system": system,
        "details": d.details(),
        "model_info": info,
        "capabilities": capabilities,
        "modified_at": rfc3339(d.modified_ms),
    }))
}

/// The model's settings as Ollama's `parameters` text (one `name value`
/// a line): its window (`num_ctx`: its pinned one, else `WARDEN_CTX`) and
/// how many conversations it serves at once (`num_parallel`).
fn parameters(cfg: &crate::config::WardenConfig, id: &str) -> String {
    let mut lines = Vec::new();
    if let Some(ctx) = cfg.ctx_pin_for(id) {
        lines.push(format!("num_ctx {ctx}"));
    }
    if let crate::config::Parallel::Fixed(n) = cfg.parallel_for(id) {
        lines.push(format!("num_parallel {n}"));
    }
    // The sampling defaults, by Ollama's names (one `stop` line each).
    if let Some(m) = cfg.models.get(id)
        && let Ok(serde_json::Value::Object(s)) = serde_json::to_value(&m.sampling)
    {
        for (k, v) in s {
            match v {
                serde_json::Value::Array(stops) => lines.extend(stops.iter().map(|s| format!("{k} {s}"))),
                v => lines.push(format!("{k} {v}")),
            }
        }
    }
    lines.join("\n")
}

/// A Modelfile that says what the warden runs: the file, its template
/// (the GGUF's own), its parameters.
fn modelfile(path: &std::path::Path, template: &str, parameters: &str) -> String {
    let mut m = format!(
        "# llm-warden serves this model from its catalog\nFROM {}\n",
        path.display()
    );
    if !template.is_empty() {
        m.push_str(&format!("TEMPLATE \"\"\"{template}\"\"\"\n"));
    }
    for line in parameters.lines() {
        m.push_str(&format!("PARAMETER {line}\n"));
    }
    m
}

/// What a model management route is told to do instead.
fn instead(path: &str) -> &'static str {
    match path.trim_start_matches("/api/") {
        "push" => "llm-warden has no registry to push to: copy the .gguf file itself",
        "delete" => {
            "llm-warden does not delete models: remove the file from its models directory; the model leaves within 2 s, once its turns end"
        }
        _ => {
            "llm-warden does not build models from a Modelfile: put a .gguf file (its chat template inside) in its models directory (settings per model go in its settings file); it is listed within 2 s"
        }
    }
}

/// `/api/push`, `/api/create`, `/api/delete`,
/// `/api/blobs/...`: a 501 saying what to do instead.
pub async fn manage(http: HttpRequest) -> HttpResponse {
    error_response(&ApiError {
        status: 501,
        message: instead(http.path()).into(),
        kind: "invalid_request_error",
        code: "unsupported_route".into(),
        param: None,
        raw: None,
    })
}
