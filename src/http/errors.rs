//! `ApiError` → HTTP response: `{"error": {...}}` with its status.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;

use crate::error::ApiError;
use crate::law::route::Route;

/// The error response.
pub fn error_response(e: &ApiError) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)).json(e.to_body())
}

/// The error response of `route`, logged (`log_error_sent`).
pub fn answer_error(route: Route, seq: Option<u64>, e: &ApiError) -> HttpResponse {
    log_error_sent(route, seq, e, "answered");
    error_response(e)
}

/// The log line of an error the warden sends (`how`: "answered", or "ended
/// the stream with" for an error event after the status line went out),
/// naming the route, the code and the turn's `seq` (none when it was
/// refused before it was numbered): a 5xx is a WARNING; a 4xx an INFO
/// line, so that the server's log says why a request was refused (a
/// missing model, a file that is not a GGUF) while the client's mistake
/// stays the client's to fix.
pub fn log_error_sent(route: Route, seq: Option<u64>, e: &ApiError, how: &str) {
    let path = route.path();
    if e.status >= 500 {
        tracing::warn!(route = %path, code = %e.code, status = e.status, seq, "{how} {} {} on {path}: {}", e.status, e.code, e.message);
    } else if e.status >= 400 {
        tracing::info!(route = %path, code = %e.code, status = e.status, seq, "{how} {} {} on {path}: {}", e.status, e.code, e.message);
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
