//! `ApiError` → HTTP response: `{"error": {...}}` with its status.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;

use crate::error::ApiError;
use crate::law::route::Route;

/// The error response.
pub fn error_response(e: &ApiError) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)).json(e.to_body())
}

/// The error response of `route`; a 5xx is also one WARNING line naming
/// the route, the code and the turn's `seq` (none when it was refused
/// before it was numbered).
pub fn answer_error(route: Route, seq: Option<u64>, e: &ApiError) -> HttpResponse {
    log_server_error(route, seq, e, "answered");
    error_response(e)
}

/// The one WARNING of a 5xx the warden sends (`how`: "answered", or "ended
/// the stream with" for an error event after the status line went out).
pub fn log_server_error(route: Route, seq: Option<u64>, e: &ApiError, how: &str) {
    if e.status >= 500 {
        tracing::warn!(
            route = route.path(),
            code = %e.code,
            status = e.status,
            seq = ?seq,
            "{how} {} {} on {}: {}",
            e.status,
            e.code,
            route.path(),
            e.message
        );
    }
}

/// The 404 of an unknown route, in the shape of the dialect its path is in.
pub async fn not_found(req: actix_web::HttpRequest) -> HttpResponse {
    super::dialects::error_for_path(
        req.path(),
        &ApiError {
            status: 404,
            message: format!("no route {} {}", req.method(), req.path()),
            kind: "invalid_request_error",
            code: "unknown_route".into(),
            param: None,
            raw: None,
        },
    )
}
