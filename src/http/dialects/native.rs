//! What the two dialects llama-server relays natively (Anthropic's Messages
//! and OpenAI's Responses) share: a validated body of the same shape, the
//! turn it becomes (chat's queue, keep-alive, notices and KV by
//! conversation), and its token counter beside a running turn. Each
//! dialect brings its parser, the opening of its conversation and its wire.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::http::body::read_body;
use crate::http::reply::{Wire, beside_or_queued, refused_in, respond_in};
use crate::http::validate_text::keep_alive;
use crate::law::keep_alive::KeepAlive;
use crate::law::request_chat::Needs;
use crate::law::route::Route;
use crate::messages::TurnOptions;
use crate::warden::{TurnRequest, Warden};

/// A validated body of a natively relayed dialect.
#[derive(Debug)]
pub struct NativeRequest {
    /// The model id, when named (removed from the body).
    pub model: Option<String>,
    /// Whether to stream.
    pub stream: bool,
    /// The body for the child (`model` and `keep_alive` removed, the
    /// dialect's decided changes made).
    pub body: Map<String, Value>,
    /// The keep-alive asked for in the body.
    pub keep_alive: Option<KeepAlive>,
    /// The conversation carries an earlier answer (an idle reload is said).
    pub has_answer: bool,
    /// The first image part's path (its model must read images), if any.
    pub image: Option<String>,
}

/// A dialect's body parser (`generate`: for the generating route, else for
/// its token counter, which ignores the sampling fields).
pub type Parse = fn(&[u8], bool) -> Result<NativeRequest, ApiError>;

/// Reads and parses a body (an image for a model without a projector that
/// reads it is refused by the front door, on the model it resolves).
async fn read(warden: &Warden, payload: web::Payload, parse: Parse, generate: bool) -> Result<NativeRequest, ApiError> {
    let cfg = warden.config();
    let bytes = read_body(payload, cfg.max_body_bytes, cfg.body_timeout).await?;
    parse(&bytes, generate)
}

/// The generating route: the body as a turn of the conversation whose
/// opening `opening` names, answered through `wire`.
pub async fn turn<W: Wire>(
    warden: web::Data<Warden>,
    http: HttpRequest,
    payload: web::Payload,
    route: Route,
    parse: Parse,
    opening: fn(&Map<String, Value>) -> Vec<&Value>,
    wire: W,
) -> HttpResponse {
    let req = match read(&warden, payload, parse, true).await {
        Ok(r) => r,
        Err(e) => return refused_in(&warden, route, &e, &wire),
    };
    let keep_alive = match keep_alive(req.keep_alive, &http) {
        Ok(k) => k,
        Err(e) => return refused_in(&warden, route, &e, &wire),
    };
    let conversation = super::conversation(&http, &opening(&req.body));
    let turn = TurnRequest::new(route, req.body)
        .model(req.model)
        .stream(req.stream)
        .options(TurnOptions {
            announce_idle_reload: req.has_answer,
            stateful: true,
        })
        .conversation(Some(conversation))
        .keep_alive(keep_alive)
        .needs(Needs::image_at(req.image));
    respond_in(&warden, &http, turn, wire).await
}

/// The token counter: beside a running turn when its model runs
/// (`law::route`).
pub async fn count<W: Wire>(
    warden: web::Data<Warden>,
    http: HttpRequest,
    payload: web::Payload,
    route: Route,
    parse: Parse,
    wire: W,
) -> HttpResponse {
    let req = match read(&warden, payload, parse, false).await {
        Ok(r) => r,
        Err(e) => return refused_in(&warden, route, &e, &wire),
    };
    let needs = Needs::image_at(req.image);
    beside_or_queued(&warden, &http, route, req.model, needs, req.body, wire).await
}
