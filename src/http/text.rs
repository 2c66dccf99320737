//! The routes beside chat, relayed to the child of the named (or default)
//! model through the same engine: `POST /v1/completions` (a raw prompt,
//! streamed or not) and `POST /infill` (fill in the middle) as turns, with
//! chat's queue, load on demand, errors, notices and brake samples;
//! `POST /tokenize` and `POST /detokenize` straight to a child that runs
//! their model (they never wait behind a generation: `law::route`), or as a
//! turn that loads it first when it does not.

use actix_web::{HttpRequest, HttpResponse, web};

use super::body::read_body;
use super::chat::{refused, respond};
use super::reply::{OpenAi, beside_or_queued};
use super::validate_text::{keep_alive, text_request};
use crate::law::request_chat::Needs;
use crate::law::route::Route;
use crate::messages::TurnOptions;
use crate::warden::{TurnRequest, Warden};

/// `POST /v1/completions`.
pub async fn completions(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    relay(&warden, &http, payload, Route::Completions).await
}

/// `POST /infill`.
pub async fn infill(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    relay(&warden, &http, payload, Route::Infill).await
}

/// `POST /tokenize`.
pub async fn tokenize(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    relay(&warden, &http, payload, Route::Tokenize).await
}

/// `POST /detokenize`.
pub async fn detokenize(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    relay(&warden, &http, payload, Route::Detokenize).await
}

/// `POST /v1/embeddings` (and llama.cpp's `/embeddings`): an embedding
/// model's vectors, OpenAI's shape.
pub async fn embeddings(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    relay(&warden, &http, payload, Route::Embeddings).await
}

/// `POST /v1/rerank` (and `/rerank`): documents ranked against a query by a
/// reranker.
pub async fn rerank(warden: web::Data<Warden>, http: HttpRequest, payload: web::Payload) -> HttpResponse {
    relay(&warden, &http, payload, Route::Rerank).await
}

async fn relay(warden: &Warden, http: &HttpRequest, payload: web::Payload, route: Route) -> HttpResponse {
    let cfg = warden.config();
    let bytes = match read_body(payload, cfg.max_body_bytes, cfg.body_timeout).await {
        Ok(b) => b,
        Err(e) => return refused(warden, route, &e),
    };
    let req = match text_request(route, &bytes) {
        Ok(r) => r,
        Err(e) => return refused(warden, route, &e),
    };
    let needs = Needs::infill(route == Route::Infill);
    if route.beside_turns() {
        return beside_or_queued(warden, http, route, req.model, needs, req.body, OpenAi).await;
    }
    let keep_alive = match keep_alive(req.keep_alive, http) {
        Ok(k) => k,
        Err(e) => return refused(warden, route, &e),
    };
    let turn = TurnRequest::new(route, req.body)
        .model(req.model)
        .stream(req.stream)
        .options(TurnOptions {
            announce_idle_reload: false,
            stateful: true,
        })
        .keep_alive(keep_alive)
        .needs(needs);
    respond(warden, http, turn).await
}
