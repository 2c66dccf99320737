//! The routes beside chat, relayed to the child of the named (or default)
//! model through the same engine: `POST /v1/completions` (a raw prompt,
//! streamed or not) and `POST /infill` (fill in the middle) as turns, with
//! chat's queue, load on demand, errors, notices and brake samples;
//! `POST /tokenize` and `POST /detokenize` straight to a child that runs
//! their model (they never wait behind a generation: `law::route`), or as a
//! turn that loads it first when it does not.

use actix_web::{HttpRequest, HttpResponse, web};

use super::body::read_body;
use super::chat::{refused, respond, whole_body};
use super::errors::answer_error;
use super::validate_text::{keep_alive, text_request};
use crate::error::GenerationError;
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

/// The 400 of an infill for a model without fill-in-the-middle tokens
/// (llama-server would answer 501 after a load; the header says it first).
fn no_fim(model: &str) -> crate::error::ApiError {
    crate::error::ApiError::invalid(
        "unsupported_value",
        format!(
            "the model '{model}' has no fill-in-the-middle tokens (prefix, suffix and middle), so it cannot infill; name a code model that has them in 'model'"
        ),
        Some("model"),
    )
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
    if route == Route::Infill
        && let Some((id, caps)) = warden.capabilities(req.model.as_deref())
        && !caps.fim
    {
        return refused(warden, route, &no_fim(&id));
    }
    if !route.generates() {
        let body = bytes::Bytes::from(serde_json::to_vec(&req.body).expect("a JSON map serializes"));
        match warden.tokenize_now(route, req.model.as_deref(), body).await {
            Some(Ok((status, body))) if (200..300).contains(&status) => {
                warden.metrics().direct(route, "completed");
                return whole_body(http, status, body, &[], cfg.client_stall_timeout);
            }
            // The child's refusal, in the shape every other route uses.
            Some(Ok((status, body))) => {
                warden.metrics().direct(route, "failed");
                let body = serde_json::from_slice(&body).ok();
                return answer_error(route, None, &GenerationError::Upstream { status, body }.to_api());
            }
            Some(Err(e)) => {
                warden.metrics().direct(route, "failed");
                return answer_error(route, None, &e);
            }
            // Its model is not running: a turn loads it first.
            None => {}
        }
    }
    let keep_alive = match keep_alive(req.keep_alive, http) {
        Ok(k) => k,
        Err(e) => return refused(warden, route, &e),
    };
    let turn = TurnRequest {
        model: req.model,
        body: req.body,
        stream: req.stream,
        options: TurnOptions {
            announce_idle_reload: false,
            stateful: route.generates(),
        },
        conversation: None,
        kind: Default::default(),
        route,
        keep_alive: keep_alive.filter(|_| route.generates()),
    };
    respond(warden, http, turn).await
}
