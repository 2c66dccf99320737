//! The optional bearer token of the warden's own routes (`WARDEN_API_KEY`),
//! for a warden bound beyond loopback. `/health` stays open (liveness probes).
//! Compared in constant time (`ApiKey::matches`).
//!
//! A browser cannot attach a bearer token to a page it navigates to, so the
//! key is also accepted as HTTP Basic credentials (any user name, the key
//! as password), Anthropic's SDKs send it as `x-api-key`, which is
//! accepted too, and a refused request that carried no credentials is
//! answered with a Basic challenge: the browser asks once for `/warden/ui`
//! and then sends the same credentials with the page's own requests. API
//! clients keep sending `Authorization: Bearer`.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;

use crate::error::ApiError;
use crate::warden::Warden;

/// The key an `Authorization` header presents: a bearer token, or the
/// password of Basic credentials.
fn presented_key(header: &str) -> Option<String> {
    if let Some(token) = header.strip_prefix("Bearer ") {
        return Some(token.to_string());
    }
    use base64::Engine;
    let encoded = header.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_user, password) = text.split_once(':')?;
    Some(password.to_string())
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
        let header = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        // Anthropic's SDKs send the key as `x-api-key`.
        let x_api_key = req.headers().get("x-api-key").and_then(|v| v.to_str().ok());
        let given = header
            .and_then(presented_key)
            .or_else(|| x_api_key.map(str::to_string))
            .unwrap_or_default();
        if !expected.matches(&given) {
            let e = ApiError {
                status: 401,
                message: "missing or wrong API key (Authorization: Bearer <WARDEN_API_KEY>)".into(),
                kind: "invalid_request_error",
                code: "invalid_api_key".into(),
                param: None,
                raw: None,
            };
            let mut resp = super::dialects::error_for_path(req.path(), &e);
            if header.is_none() && x_api_key.is_none() {
                resp.headers_mut().insert(
                    actix_web::http::header::WWW_AUTHENTICATE,
                    actix_web::http::header::HeaderValue::from_static("Basic realm=\"llm-warden\", charset=\"UTF-8\""),
                );
            }
            return Ok(req.into_response(resp));
        }
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_comes_as_a_bearer_token_or_a_basic_password() {
        let rows = [
            ("Bearer k1", Some("k1")),
            // why: a browser's Basic credentials, any user name ("u:k1")
            ("Basic dTprMQ==", Some("k1")),
            // why: an empty user name is what many prompts send (":k1")
            ("Basic Omsx", Some("k1")),
            ("Basic not-base64!", None),
            // why: no colon is no credentials ("k1")
            ("Basic azE=", None),
            ("Digest k1", None),
        ];
        for (h, want) in rows {
            assert_eq!(presented_key(h).as_deref(), want, "{h}");
        }
    }
}
