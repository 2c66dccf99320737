//! Web pages that were not invited: a browser lets any site send a "simple"
//! request (a form-like POST, no preflight) to `127.0.0.1`, so without a
//! check any page a user opens could run turns on their model; and a site
//! whose name re-resolves to 127.0.0.1 (DNS rebinding) would even read the
//! answers. Two rules, applied before the key check:
//!
//! - **Origin**: a request that carries an `Origin` from another site is
//!   refused (403 `cross_origin_refused`) unless CORS names that origin
//!   (`http::cors`, which then decides). Same-site pages (the dashboard)
//!   and clients that send no `Origin` (curl, SDKs, the CLI) pass.
//! - **Host**: while the warden listens on loopback only, a request whose
//!   `Host` is not a loopback name (`127.0.0.1`, `localhost`, `[::1]`) is
//!   refused (403 `host_refused`): only a rebinding page sends one. Bound to
//!   another address (`--host`), any name may reach it and the rule is off.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;

use super::errors::error_response;
use crate::error::ApiError;
use crate::warden::Warden;

/// What the guard knows of the server (set by `server::bind`).
#[derive(Debug, Clone, Copy)]
pub struct Guard {
    /// The server listens on a loopback address only.
    pub loopback: bool,
}

/// Whether `host` (a name or address, no port, no brackets) is loopback.
fn is_loopback_name(host: &str) -> bool {
    let h = host.to_ascii_lowercase();
    matches!(h.as_str(), "localhost" | "::1") || h.starts_with("127.")
}

/// Whether `addr` (a bind address) is loopback.
pub fn is_loopback_bind(addr: &str) -> bool {
    is_loopback_name(addr.trim_start_matches('[').trim_end_matches(']'))
}

/// The host part of a `Host` header or an origin's authority (no port).
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

/// The rule's verdict for one request: `None` to pass, else the error code.
pub fn verdict(guard: Guard, cors_on: bool, host: Option<&str>, origin: Option<&str>) -> Option<&'static str> {
    if guard.loopback
        && let Some(h) = host
        && !is_loopback_name(host_of(h))
    {
        return Some("host_refused");
    }
    let origin = origin?;
    if cors_on {
        return None; // CORS decides for every origin it was given
    }
    let authority = origin.split_once("://").map_or(origin, |(_, a)| a);
    let same_site = host.is_some_and(|h| h.eq_ignore_ascii_case(authority));
    (!same_site).then_some("cross_origin_refused")
}

/// The middleware.
pub async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let guard = req.app_data::<web::Data<Guard>>().map(|g| *g.get_ref());
    let cors_on = req
        .app_data::<web::Data<Warden>>()
        .is_some_and(|w| !w.config().cors_origins.is_empty());
    let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
    let host = header(actix_web::http::header::HOST);
    let origin = header(actix_web::http::header::ORIGIN);
    if let Some(g) = guard
        && let Some(code) = verdict(g, cors_on, host, origin)
    {
        let message = match code {
            "host_refused" => format!(
                "the Host '{}' is not this machine's loopback name; a web page whose name points at 127.0.0.1 cannot call the warden",
                host.unwrap_or_default()
            ),
            _ => format!(
                "a web page from {} may not call the warden; start it with --cors-origin {} (or WARDEN_CORS_ORIGINS) to allow that page",
                origin.unwrap_or_default(),
                origin.unwrap_or_default()
            ),
        };
        let e = ApiError {
            status: 403,
            message,
            kind: "invalid_request_error",
            code: code.into(),
            param: None,
            raw: None,
        };
        return Ok(req.into_response(error_response(&e)));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_hosts() {
        let lo = Guard { loopback: true };
        let any = Guard { loopback: false };
        let rows = [
            // why: curl, SDKs and the CLI send no Origin
            (lo, false, Some("127.0.0.1:27182"), None, None),
            (lo, false, Some("localhost:27182"), None, None),
            (lo, false, Some("[::1]:27182"), None, None),
            // why: the dashboard is the same site
            (lo, false, Some("127.0.0.1:27182"), Some("http://127.0.0.1:27182"), None),
            // why: any other page is refused while CORS is off
            (
                lo,
                false,
                Some("127.0.0.1:27182"),
                Some("https://evil.example"),
                Some("cross_origin_refused"),
            ),
            (
                lo,
                false,
                Some("127.0.0.1:27182"),
                Some("http://localhost:27182"),
                Some("cross_origin_refused"),
            ),
            // why: with CORS on, its list decides
            (lo, true, Some("127.0.0.1:27182"), Some("http://localhost:5173"), None),
            // why: a rebinding page's Host names its own site
            (
                lo,
                false,
                Some("evil.example:27182"),
                Some("http://evil.example:27182"),
                Some("host_refused"),
            ),
            (lo, true, Some("evil.example:27182"), None, Some("host_refused")),
            // why: bound beyond loopback, any name reaches it
            (any, false, Some("box.lan:27182"), None, None),
            (any, false, Some("box.lan:27182"), Some("http://box.lan:27182"), None),
            (
                any,
                false,
                Some("box.lan:27182"),
                Some("http://other.lan"),
                Some("cross_origin_refused"),
            ),
        ];
        for (i, (g, cors, host, origin, want)) in rows.into_iter().enumerate() {
            assert_eq!(verdict(g, cors, host, origin), want, "row {i}");
        }
        assert!(is_loopback_bind("127.0.0.1") && is_loopback_bind("::1") && !is_loopback_bind("0.0.0.0"));
    }
}
