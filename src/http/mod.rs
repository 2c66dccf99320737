//! The actix-web surface: OpenAI-compatible routes and the warden's own.
//!
//! | route | handler |
//! |---|---|
//! | `POST /v1/chat/completions` | `chat` |
//! | `POST /v1/completions`, `POST /infill` | `text` (turns, as chat) |
//! | `POST /tokenize`, `POST /detokenize` | `text` (beside turns when the model runs) |
//! | `POST /v1/messages`, `POST /v1/messages/count_tokens` | `dialects::anthropic` (Anthropic's Messages, relayed) |
//! | `POST /v1/responses`, `POST /v1/responses/input_tokens` | `dialects::responses` (OpenAI's Responses, relayed) |
//! | `POST /v1/chat/completions/input_tokens`, `POST /apply-template` | `dialects::counting` (beside turns) |
//! | `POST /api/chat`, `POST /api/generate` | `dialects::ollama` (translated to chat, completions, infill) |
//! | `GET /api/tags`, `/api/ps`, `/api/version`, `POST /api/show`, `GET`/`HEAD /`, the rest of `/api/*` | `dialects::ollama::info` |
//! | `GET /v1/models` | `models` |
//! | `GET /metrics` | `metrics` (Prometheus) |
//! | `GET /health` | `warden_routes::health` |
//! | `GET /warden/status` | `warden_routes::status` |
//! | `POST /warden/load`, `POST /warden/unload`, `POST /warden/reload` | `warden_routes` |
//! | `GET /warden/events` | `warden_routes::events` |
//! | `GET /warden/logs` | `warden_routes::logs` |
//! | `GET /warden/ui` (+ `app.js`, `app.css`), `GET /warden/samples` | `ui` (the dashboard) |
//!
//! How an answer reaches the client in each dialect is `reply` (a `Wire`
//! per dialect). `configure` mounts them on any actix-web `App` that holds a
//! `web::Data<Warden>`; an embedding application adds its own routes beside.
//! Middleware, outermost first: `cors` (invited browser origins), `origin`
//! (uninvited pages and DNS-rebound hosts refused), `auth` (the optional
//! key, bearer or Basic); and `stall` (a client that stopped reading).
//! A body becomes its dialect's typed request through `typed::decode`.
//! Every generating route honours `Prefer: wait=N` (`prefer`): a turn that
//! would wait longer for another model's memory is refused with a
//! `Retry-After`.

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod chat;
mod chat_request;
pub(crate) mod cors;
pub(crate) mod dialects;
pub(crate) mod errors;
pub(crate) mod metrics;
pub(crate) mod models;
pub(crate) mod origin;
mod prefer;
pub(crate) mod reply;
internal! {
    stall;
}
pub(crate) mod text;
pub(crate) mod typed;
pub(crate) mod ui;
pub(crate) mod validate;
pub(crate) mod validate_text;
pub(crate) mod warden_routes;
mod wire_error;
mod wire_upstream;

use actix_web::web;

/// Registers every route.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/chat/completions", web::post().to(chat::chat_completions))
        .route("/v1/completions", web::post().to(text::completions))
        .route("/infill", web::post().to(text::infill))
        .route("/tokenize", web::post().to(text::tokenize))
        .route("/detokenize", web::post().to(text::detokenize))
        .route("/v1/embeddings", web::post().to(text::embeddings))
        .route("/embeddings", web::post().to(text::embeddings))
        .route("/v1/rerank", web::post().to(text::rerank))
        .route("/rerank", web::post().to(text::rerank))
        .route("/v1/messages", web::post().to(dialects::anthropic::messages))
        .route(
            "/v1/messages/count_tokens",
            web::post().to(dialects::anthropic::count_tokens),
        )
        .route("/v1/responses", web::post().to(dialects::responses::create))
        .route(
            "/v1/responses/input_tokens",
            web::post().to(dialects::responses::input_tokens),
        )
        .route(
            "/v1/chat/completions/input_tokens",
            web::post().to(dialects::counting::chat_input_tokens),
        )
        .route("/apply-template", web::post().to(dialects::counting::apply_template))
        .configure(ollama)
        .route("/metrics", web::get().to(metrics::metrics))
        .route("/v1/models", web::get().to(models::list_models))
        .route("/health", web::get().to(warden_routes::health))
        .route("/warden/status", web::get().to(warden_routes::status))
        .route("/warden/load", web::post().to(warden_routes::load))
        .route("/warden/unload", web::post().to(warden_routes::unload))
        .route("/warden/reload", web::post().to(warden_routes::reload))
        .route("/warden/events", web::get().to(warden_routes::events))
        .route("/warden/logs", web::get().to(warden_routes::logs))
        .route("/warden/ui", web::get().to(ui::page))
        .route("/warden/ui/app.js", web::get().to(ui::script))
        .route("/warden/ui/app.css", web::get().to(ui::style))
        .route("/warden/samples", web::get().to(ui::samples));
}

/// The Ollama API's routes (`dialects::ollama`).
fn ollama(cfg: &mut web::ServiceConfig) {
    use dialects::ollama::{self as o, info};
    cfg.route("/", web::get().to(info::root))
        .route("/", web::head().to(info::root))
        .route("/api/chat", web::post().to(o::chat))
        .route("/api/generate", web::post().to(o::generate))
        .route("/api/tags", web::get().to(info::tags))
        .route("/api/ps", web::get().to(info::ps))
        .route("/api/show", web::post().to(info::show))
        .route("/api/version", web::get().to(info::version))
        .route("/api/embed", web::post().to(o::embed::embed))
        .route("/api/embeddings", web::post().to(o::embed::embed))
        .route("/api/copy", web::post().to(o::copy::copy))
        .route("/api/pull", web::post().to(o::pull::pull));
    for path in ["/api/push", "/api/create", "/api/delete", "/api/blobs/{digest}"] {
        cfg.route(path, web::route().to(info::manage));
    }
}
