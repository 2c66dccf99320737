//! A chat body's prompt without a generation: `POST
//! /v1/chat/completions/input_tokens` (how many tokens it would take) and
//! `POST /apply-template` (the prompt the model's chat template makes of
//! it). Both are chat bodies, validated by chat's own rules
//! (`validate::chat_request`), relayed natively to llama-server, which
//! answers them on its HTTP thread (`law::route`): beside a running turn
//! when their model runs, else as a turn that loads it first. Errors are
//! OpenAI's shape.

use actix_web::{HttpRequest, HttpResponse, web};

use crate::http::body::read_body;
use crate::http::reply::{OpenAi, beside_or_queued, refused_in};
use crate::http::validate::chat_request;
use crate::law::route::Route;
use crate::warden::Warden;

/// `POST /v1/chat/completions/input_tokens`.
pub async fn chat_input_tokens(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    relay(&warden, &http, payload, Route::ChatInputTokens).await
}

/// `POST /apply-template`.
pub async fn apply_template(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    relay(&warden, &http, payload, Route::ApplyTemplate).await
}

async fn relay(warden: &Warden, http: &HttpRequest, payload: web::Payload, route: Route) -> HttpResponse {
    let cfg = warden.config();
    let bytes = match read_body(payload, cfg.max_body_bytes, cfg.body_timeout).await {
        Ok(b) => b,
        Err(e) => return refused_in(warden, route, &e, &OpenAi),
    };
    let mut req = match chat_request(&bytes) {
        Ok(r) => r,
        Err(e) => return refused_in(warden, route, &e, &OpenAi),
    };
    // Nothing is generated: a stream has nothing to carry.
    req.body.remove("stream");
    // What is counted is not read by the model: no media need is checked
    // (llama-server counts an image part's text placeholder).
    beside_or_queued(warden, http, route, req.model, Default::default(), req.body, OpenAi).await
}
