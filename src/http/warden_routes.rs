//! The warden's own routes: `/health`, `/warden/status` (the watch snapshot,
//! never queued behind a turn, plus the child's latest sampled footprint), `/warden/load`, `/warden/unload` and
//! `/warden/events` (lifecycle events as SSE).

use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::errors::error_response;
use crate::error::ApiError;
use crate::warden::Warden;

/// `GET /health`: the warden itself is up (says nothing of a model).
pub async fn health() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok", "service": "llm-warden", "version": env!("CARGO_PKG_VERSION") }))
}

/// `GET /warden/status`.
pub async fn status(warden: web::Data<Warden>) -> HttpResponse {
    let mut v = serde_json::to_value(warden.status()).unwrap_or_default();
    // The memory history's latest reading of the child (at most one
    // WARDEN_UI_SAMPLE_S old): the status route reads no /proc file of its
    // own, so its latency stays the watch's.
    let model = warden.status().model;
    let footprint = warden
        .history()
        .latest()
        .filter(|s| s.model.is_some() && s.model == model)
        .and_then(|s| s.footprint_bytes);
    v["footprint_bytes"] = json!(footprint);
    v["queue_depth"] = json!(warden.queue_depth());
    v["max_queue"] = json!(warden.config().max_queue);
    if let Some(note) = warden.engine_note() {
        v["engine_note"] = json!(note);
    }
    HttpResponse::Ok().json(v)
}

/// The query of `/warden/logs`.
#[derive(Debug, Deserialize)]
pub struct LogsQuery {
    /// Lines wanted (default 100, at most the ring's 200).
    pub lines: Option<usize>,
}

/// `GET /warden/logs?lines=N`: the live child's last lines of output, as
/// plain text (its API key redacted), for diagnosing a model server.
pub async fn logs(warden: web::Data<Warden>, q: web::Query<LogsQuery>) -> HttpResponse {
    let lines = warden.child_output_tail(q.lines.unwrap_or(100));
    HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body(lines.join("\n"))
}

/// The body of `/warden/load` or `/warden/unload`: empty (or blank) is the
/// default; a body that is not one is refused rather than read as an empty
/// one (it named something), saying the `shape` expected.
fn control_body<T: Default + serde::de::DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid("invalid_request", format!("the body must be {shape} ({e})"), None))
}

/// The body of `/warden/load`.
#[derive(Debug, Deserialize, Default)]
pub struct LoadBody {
    /// The model id; absent: the default.
    pub model: Option<String>,
    /// The keep-alive to set for it (seconds or a duration string).
    pub keep_alive: Option<serde_json::Value>,
}

/// `POST /warden/load`: load (or switch to) a model now, optionally with a
/// keep-alive (as a turn's `keep_alive`, without the turn).
pub async fn load(warden: web::Data<Warden>, body: web::Bytes) -> HttpResponse {
    // An empty body loads the default.
    let body: LoadBody = match control_body(&body, "{\"model\": ID, \"keep_alive\": V}") {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let keep_alive = match super::validate_text::keep_alive_value(body.keep_alive.as_ref()) {
        Ok(k) => k,
        Err(e) => return error_response(&e),
    };
    match warden.load(body.model, keep_alive).await {
        Ok(status) => HttpResponse::Ok().json(status),
        Err(e) => error_response(&e.to_api()),
    }
}

/// The body of `/warden/unload`.
#[derive(Debug, Deserialize, Default)]
pub struct UnloadBody {
    /// One resident to stop; absent: every resident.
    pub model: Option<String>,
}

/// `POST /warden/unload`: stop every resident's child now, or only
/// `{"model": ID}`'s.
pub async fn unload(warden: web::Data<Warden>, body: web::Bytes) -> HttpResponse {
    let body: UnloadBody = match control_body(&body, "empty or {\"model\": ID}") {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let done = match &body.model {
        Some(id) if warden.catalog().get(id).is_none() => {
            return error_response(&crate::error::WardenError::ModelNotFound(id.clone()).to_api());
        }
        Some(id) => warden.unload_model(Some(id)).await,
        None => warden.unload().await,
    };
    match done {
        Ok(was_loaded) => HttpResponse::Ok().json(json!({ "unloaded": was_loaded })),
        Err(e) => error_response(&e.to_api()),
    }
}

/// `POST /warden/reload`: reads the settings file and the model stores
/// again now (as the watch and SIGHUP do: `warden::reload`), and says what
/// changed, `{"applied": {added, removed, changed, restart_needed} | null,
/// "settings": ...}`; a refused file is a 422 `settings_refused` naming
/// its line and column (the last good settings keep serving). The way to
/// reload where there is no SIGHUP (Windows) or no shell on the machine.
pub async fn reload(warden: web::Data<Warden>) -> HttpResponse {
    match warden.reload().await {
        Ok(applied) => HttpResponse::Ok().json(json!({
            "applied": applied,
            "settings": warden.status().settings,
        })),
        Err(p) => error_response(&crate::error::ApiError {
            status: 422,
            message: format!("the settings were refused; the last good ones keep serving: {p}"),
            kind: "invalid_request_error",
            code: "settings_refused".into(),
            param: None,
            raw: None,
        }),
    }
}

/// `GET /warden/events`: lifecycle events as they happen, one SSE event each
/// (`event: <kind>`, `data: {json}`). A subscriber that falls behind skips
/// (it is told how many events it missed) and never slows the engine; one
/// that stops reading while events wait for it loses its connection after
/// the client stall bound (`stall`).
pub async fn events(warden: web::Data<Warden>, req: HttpRequest) -> HttpResponse {
    // A reconnecting EventSource says the last id it saw: it gets only what
    // it missed. A new one gets the recent ring first.
    let after = req
        .headers()
        .get("Last-Event-ID")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (replay, rx) = warden.events_since(after);
    let replayed = futures::stream::iter(replay.into_iter().map(|n| Ok::<Bytes, actix_web::Error>(frame(&n))));
    let live = futures::stream::unfold(rx, |mut rx| async move {
        let frame = match rx.recv().await {
            Ok(n) => frame(&n),
            Err(RecvError::Lagged(n)) => Bytes::from(format!(": {n} events dropped (slow reader)\n\n")),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok::<Bytes, actix_web::Error>(frame), rx))
    });
    let bound = warden.config().client_stall_timeout;
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(super::stall::watch(&req, Box::pin(replayed.chain(live)), bound, None))
}

/// One numbered event as an SSE frame: its number as the `id`, its kind as
/// the `event`, and its JSON with the time the warden saw it (`at_ms`).
fn frame(n: &crate::warden::Numbered) -> Bytes {
    let mut json = serde_json::to_value(&*n.event).unwrap_or_default();
    let kind = json
        .get("event")
        .and_then(|k| k.as_str())
        .unwrap_or("event")
        .to_string();
    if let Some(o) = json.as_object_mut() {
        o.insert("at_ms".into(), n.at_ms.into());
    }
    Bytes::from(format!("id: {}\nevent: {kind}\ndata: {json}\n\n", n.id))
}
