//! `ApiError` → HTTP response: `{"error": {...}}` with its status.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;

use crate::error::ApiError;

/// The error response.
pub fn error_response(e: &ApiError) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)).json(e.to_body())
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
