//! The optional bearer token of the warden's own routes (`WARDEN_API_KEY`),
//! for a warden bound beyond loopback. `/health` stays open (liveness probes).
//! Compared in constant time.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;

use super::errors::error_response;
use crate::error::ApiError;
use crate::warden::Warden;

/// Whether two byte strings are equal, in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The middleware.
pub async fn require_key(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let expected = req
        .app_data::<web::Data<Warden>>()
        .and_then(|w| w.config().api_key.clone());
    if let Some(expected) = expected
        && req.path() != "/health"
    {
        let given = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
            let e = ApiError {
                status: 401,
                message: "missing or wrong API key (Authorization: Bearer <WARDEN_API_KEY>)".into(),
                kind: "invalid_request_error",
                code: "invalid_api_key".into(),
                param: None,
                raw: None,
            };
            return Ok(req.into_response(error_response(&e)));
        }
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}
