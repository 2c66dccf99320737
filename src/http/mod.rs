//! The actix-web surface: OpenAI-compatible routes and the warden's own.
//!
//! | route | handler |
//! |---|---|
//! | `POST /v1/chat/completions` | `chat` |
//! | `POST /v1/completions`, `POST /infill` | `text` (turns, as chat) |
//! | `POST /tokenize`, `POST /detokenize` | `text` (beside turns when the model runs) |
//! | `GET /v1/models` | `models` |
//! | `GET /metrics` | `metrics` (Prometheus) |
//! | `GET /health` | `warden_routes::health` |
//! | `GET /warden/status` | `warden_routes::status` |
//! | `POST /warden/load`, `POST /warden/unload` | `warden_routes` |
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

pub mod auth;
pub mod body;
pub mod chat;
pub mod cors;
pub mod errors;
pub mod metrics;
pub mod models;
pub mod origin;
pub mod reply;
pub mod stall;
pub mod text;
pub mod ui;
pub mod validate;
pub mod validate_text;
pub mod warden_routes;

use actix_web::web;

/// Registers every route.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/chat/completions", web::post().to(chat::chat_completions))
        .route("/v1/completions", web::post().to(text::completions))
        .route("/infill", web::post().to(text::infill))
        .route("/tokenize", web::post().to(text::tokenize))
        .route("/detokenize", web::post().to(text::detokenize))
        .route("/metrics", web::get().to(metrics::metrics))
        .route("/v1/models", web::get().to(models::list_models))
        .route("/health", web::get().to(warden_routes::health))
        .route("/warden/status", web::get().to(warden_routes::status))
        .route("/warden/load", web::post().to(warden_routes::load))
        .route("/warden/unload", web::post().to(warden_routes::unload))
        .route("/warden/events", web::get().to(warden_routes::events))
        .route("/warden/logs", web::get().to(warden_routes::logs))
        .route("/warden/ui", web::get().to(ui::page))
        .route("/warden/ui/app.js", web::get().to(ui::script))
        .route("/warden/ui/app.css", web::get().to(ui::style))
        .route("/warden/samples", web::get().to(ui::samples));
}
