//! The Ollama API, translated by the warden: `POST /api/chat` and `POST
//! /api/generate` become a chat, raw completion or infill turn
//! (`translate`), validated after translation by the same rules as a
//! request of that route (`validate::chat_request`,
//! `validate_text::text_request`), and their answers are said back in
//! Ollama's NDJSON or whole (`wire`). The rest of the API (`/api/tags`,
//! `/api/ps`, `/api/show`, `/api/version`, `/`, and the model management
//! routes this server does not have) is in `info`; `/api/copy` in `copy`.
//!
//! `stream` defaults to `true`, as in Ollama. `keep_alive` takes Ollama's
//! forms (`law::keep_alive`) and is honoured (unlike Ollama's own OpenAI
//! endpoint: ollama#3645); an empty prompt or message list loads the model
//! and answers `done_reason: "load"`, or with `keep_alive` 0 unloads it
//! (`"unload"`). A model name with Ollama's `:latest` tag means the catalog
//! id without it. Errors are Ollama's `{"error": "..."}` with the warden's
//! `code` (and `param`, `raw`) beside.

pub mod copy;
pub mod embed;
pub mod info;
pub mod pull;
pub mod reply;
pub mod translate;
pub mod wire;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use self::reply as ollama_reply;
use self::translate::{self as ollama, Target, Translated};
use self::wire::{Api, Ndjson};
use crate::error::ApiError;
use crate::http::body::read_body;
use crate::http::reply::{Wire, respond_in};
use crate::http::validate::{chat_request_of, json_object, model_name};
use crate::http::validate_text::{keep_alive, keep_alive_value, text_request_of};
use crate::law::keep_alive::KeepAlive;
use crate::law::request_chat::Needs;
use crate::law::route::Route;
use crate::messages::TurnOptions;
use crate::warden::{Resolved, TurnRequest, Warden};

/// `POST /api/chat`.
pub async fn chat(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    turn(&warden, &http, payload, Api::Chat).await
}

/// `POST /api/generate`.
pub async fn generate(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    turn(&warden, &http, payload, Api::Generate).await
}

/// `{"error": message, "code", "param"?, "raw"?}`: Ollama's error object
/// with the warden's fields beside.
pub fn error_body(e: &ApiError) -> Value {
    let mut v = json!({ "error": e.message, "code": e.code });
    if let Some(p) = &e.param {
        v["param"] = json!(p);
    }
    if let Some(r) = &e.raw {
        v["raw"] = json!(r);
    }
    v
}

/// An error response in Ollama's shape.
pub fn error_response(e: &ApiError) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)).json(error_body(e))
}

/// What an Ollama request asked for, read.
struct Asked {
    /// The model, resolved once (the translation read its capabilities;
    /// the turn takes the same value); `None` when there is no such model,
    /// which the submit says after the route (`Warden::resolve_for`).
    model: Option<Resolved>,
    /// The model name asked for, if any.
    asked: Option<String>,
    /// The name the reply echoes: the client's, else the default's id.
    name: String,
    stream: bool,
    keep_alive: Option<KeepAlive>,
    translated: Translated,
}

async fn turn(warden: &Warden, http: &HttpRequest, payload: web::Payload, api: Api) -> HttpResponse {
    let started = Instant::now();
    let route = match api {
        Api::Chat => Route::Chat,
        Api::Generate => Route::Completions,
    };
    let asked = match read(warden, http, payload, api).await {
        Ok(a) => a,
        Err(e) => return refused(warden, route, &e),
    };
    if asked.translated.load_only {
        return load_only(warden, api, asked, started).await;
    }
    let mut t = asked.translated;
    let translated = std::mem::take(&mut t.body);
    let (route, body, conversation, options, needs) = match checked(t.target, translated) {
        Ok(c) => c,
        Err(e) => return refused(warden, route, &e),
    };
    let conversation = super::header(http, "X-Warden-Conversation").or(conversation);
    let wire = Ndjson::new(api, t.target, asked.name, started, t.num_ctx, warden.watch_status());
    let req = match asked.model {
        Some(m) => TurnRequest::new(route, body).resolved(m),
        None => TurnRequest::new(route, body).model(asked.asked),
    };
    let req = req
        .stream(asked.stream)
        .options(options)
        .conversation(conversation)
        .keep_alive(asked.keep_alive)
        .needs(needs);
    respond_in(warden, http, req, wire).await
}

/// What a checked, translated request takes to the engine: its route, body,
/// conversation, notice switches and what it needs of its model.
type Checked = (Route, Map<String, Value>, Option<String>, TurnOptions, Needs);

/// The translated body through the rules of the route it takes, and what
/// it needs of its model (images a projector that reads them, a suffix
/// fill-in-the-middle tokens: the front door decides on the model it
/// resolves).
fn checked(target: Target, body: Map<String, Value>) -> Result<Checked, ApiError> {
    if target == Target::Chat {
        let r = chat_request_of(body)?;
        return Ok((Route::Chat, r.body, Some(r.conversation), r.options, r.needs));
    }
    let route = if target == Target::Infill {
        Route::Infill
    } else {
        Route::Completions
    };
    let r = text_request_of(route, body)?;
    let options = TurnOptions {
        announce_idle_reload: false,
        stateful: true,
    };
    Ok((route, r.body, None, options, Needs::infill(route == Route::Infill)))
}

fn refused(warden: &Warden, route: Route, e: &ApiError) -> HttpResponse {
    warden.metrics().refused(route, &e.code);
    error_response(e)
}

/// The model an Ollama model name (`name:tag`, or the catalog's own id;
/// `None`: the default) stands for, resolved once (`Warden::resolve`), or
/// the 404 that names it. The name's spellings are tried against one
/// snapshot of the catalog.
pub(crate) fn resolve(warden: &Warden, name: Option<&str>) -> Result<Resolved, ApiError> {
    let catalog = warden.catalog();
    let id = name.map(|n| ollama_reply::catalog_name(n, |id| catalog.get(id).is_some()));
    warden.resolve(id).map_err(|e| e.to_api())
}

/// Reads, checks and translates a body.
async fn read(warden: &Warden, http: &HttpRequest, payload: web::Payload, api: Api) -> Result<Asked, ApiError> {
    let cfg = warden.config();
    let bytes = read_body(payload, cfg.max_body_bytes, cfg.body_timeout).await?;
    let body = json_object(&bytes)?;
    let asked = model_name(&body)?;
    // Resolved once; a model that is not there is said by the submit,
    // after the route the translation picks (a route this engine does not
    // serve is refused first, as in every dialect).
    let model = resolve(warden, asked.as_deref()).ok();
    let name = asked
        .clone()
        .or_else(|| model.as_ref().map(|m| m.entry.id.clone()))
        .unwrap_or_default();
    let stream = match body.get("stream") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::invalid(
                "invalid_type",
                "'stream' must be a boolean",
                Some("stream"),
            ));
        }
    };
    let keep_alive = keep_alive(keep_alive_value(body.get("keep_alive"))?, http)?;
    // The translation asks whether the model has a chat template (a
    // generate with no template is a raw completion).
    let templated = model
        .as_ref()
        .is_none_or(|m| m.caps.kind != crate::law::types::ModelKind::Completion);
    let translated = translate(api, &body, templated)?;
    Ok(Asked {
        model,
        asked,
        name,
        stream,
        keep_alive,
        translated,
    })
}

fn translate(api: Api, body: &Map<String, Value>, templated: bool) -> Result<Translated, ApiError> {
    let t = match api {
        Api::Chat => ollama::chat(body),
        Api::Generate => ollama::generate(body, templated),
    };
    t.map_err(ApiError::from)
}

/// An empty prompt or message list: load the model (or, with `keep_alive`
/// 0, unload it if it runs), and say so as Ollama does.
async fn load_only(warden: &Warden, api: Api, asked: Asked, started: Instant) -> HttpResponse {
    let mut wire = Ndjson::new(api, Target::Chat, asked.name, started, None, warden.watch_status());
    let wanted = asked.model.map(|m| m.entry.id.clone()).or(asked.asked);
    let running = wanted
        .as_ref()
        .is_some_and(|w| warden.status().residents.iter().any(|r| &r.model == w));
    if crate::law::keep_alive::unload_after_turn(asked.keep_alive) {
        if running && let Err(e) = warden.unload_model(wanted.as_deref()).await {
            return wire.refusal(&e.to_api());
        }
        return HttpResponse::Ok().json(wire.load_reply("unload", 0));
    }
    let load = Instant::now();
    if let Err(e) = warden.load(wanted, asked.keep_alive).await {
        return wire.refusal(&e.to_api());
    }
    // Nothing was loaded when it already ran.
    let load_ms = if running { 0 } else { load.elapsed().as_millis() as u64 };
    HttpResponse::Ok().json(wire.load_reply("load", load_ms))
}
