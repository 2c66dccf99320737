//! CORS for browser clients (`WARDEN_CORS_ORIGINS`, `serve --cors-origin`):
//! the `actix-cors` middleware `server::bind` wraps outside `auth`, so a
//! preflight (which never carries `Authorization`) is answered before the
//! key check, and a 401 still carries the headers that let the page read it.
//!
//! With no origin configured the middleware is not mounted at all: no CORS
//! header is ever sent and browsers keep other sites' pages out, as before.

use actix_cors::Cors;
use actix_web::middleware::Condition;

/// Request headers a browser client sends: the key (as a bearer, or as
/// Anthropic's `x-api-key`), a JSON body, the warden's own turn headers
/// (`http::chat`), `Prefer` (`wait=N`, `http::prefer`), and what the
/// official SDKs add in a browser: Anthropic's
/// version and beta headers and its browser opt-in, and the `x-stainless-*`
/// telemetry both Anthropic's and OpenAI's JavaScript SDKs send. A browser
/// refuses a preflight that leaves one of them out, so an SDK in a page
/// could not reach the warden at all; the origin list stays the boundary.
pub const ALLOWED_HEADERS: [&str; 19] = [
    "authorization",
    "content-type",
    "prefer",
    "x-warden-conversation",
    "x-warden-turn",
    "x-warden-keep-alive",
    "x-api-key",
    "anthropic-version",
    "anthropic-beta",
    "anthropic-dangerous-direct-browser-access",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
    "x-stainless-helper-method",
];
/// Response headers a page may read beyond the CORS-safelisted ones: the
/// notices of a non-streamed turn (`http::chat`), and when a request that
/// would not wait may ask again (`http::prefer`).
pub const EXPOSED_HEADERS: [&str; 2] = ["x-warden-notices", "retry-after"];
/// How long a browser may cache a preflight answer: one preflight per hour
/// and origin instead of one before every chat request.
pub const PREFLIGHT_MAX_AGE_S: usize = 3600;

/// Whether `origins` admit any web page (`*`).
pub fn allows_any(origins: &[String]) -> bool {
    origins.iter().any(|o| o == "*")
}

/// The middleware for `origins` (as `config::cors_origins` normalised them);
/// a no-op when there are none.
///
/// A request whose `Origin` is not listed is refused (400) before it reaches
/// the key check or a model: without that, a "simple" request (a form-like
/// POST a page may send without a preflight) from any site would still run
/// a turn, its answer merely hidden from the page.
pub fn layer(origins: &[String]) -> Condition<Cors> {
    let mut cors = Cors::default()
        .allow_any_method()
        .allowed_headers(ALLOWED_HEADERS)
        .expose_headers(EXPOSED_HEADERS)
        .max_age(PREFLIGHT_MAX_AGE_S)
        .block_on_origin_mismatch(true);
    if allows_any(origins) {
        cors = cors.allow_any_origin().send_wildcard();
    } else {
        for o in origins {
            cors = cors.allowed_origin(o);
        }
    }
    Condition::new(!origins.is_empty(), cors)
}

#[cfg(test)]
mod tests {
    use actix_web::http::{Method, StatusCode, header};
    use actix_web::test::{TestRequest, call_service, init_service};
    use actix_web::{App, HttpResponse, web};

    use crate::config::normalise_origin;

    use super::*;

    const PAGE: &str = "http://localhost:5173";

    /// Origins are normalised to what a browser sends, and a value no
    /// browser could send is refused instead of silently never matching.
    #[test]
    fn origins_normalise_or_refuse() {
        let rows: &[(&str, Option<&str>)] = &[
            // why: the plain case
            ("http://localhost:5173", Some("http://localhost:5173")),
            ("https://app.example.com", Some("https://app.example.com")),
            // why: a trailing slash or capitals would never equal a browser's Origin
            ("HTTP://LocalHost:8080/", Some("http://localhost:8080")),
            ("http://[::1]:8080", Some("http://[::1]:8080")),
            // why: `*` is any origin
            ("*", Some("*")),
            // why: a path is not part of an origin
            ("http://localhost:8080/app", None),
            // why: no scheme: the browser always sends one
            ("localhost:8080", None),
            // why: only web schemes make CORS requests
            ("file:///tmp", None),
            ("http://", None),
            // why: a wildcard inside a host is not supported by the middleware
            ("https://*.example.com", None),
        ];
        for (i, (item, want)) in rows.iter().enumerate() {
            assert_eq!(normalise_origin(item).as_deref(), *want, "row {i}: {item:?}");
        }
    }

    fn preflight(origin: &str) -> TestRequest {
        TestRequest::default()
            .method(Method::OPTIONS)
            .uri("/v1/chat/completions")
            .insert_header((header::ORIGIN, origin))
            .insert_header((header::ACCESS_CONTROL_REQUEST_METHOD, "POST"))
            .insert_header((header::ACCESS_CONTROL_REQUEST_HEADERS, "authorization, content-type"))
    }

    fn got<B>(r: &actix_web::dev::ServiceResponse<B>, name: header::HeaderName) -> Option<String> {
        r.headers().get(name).map(|v| v.to_str().unwrap().to_ascii_lowercase())
    }

    /// An allowed origin's preflight is answered with the origin, the
    /// headers clients send, the exposed notices header and the max age.
    #[actix_web::test]
    async fn allowed_preflight_names_origin_headers_and_max_age() {
        let app = init_service(
            App::new()
                .wrap(layer(&[PAGE.to_string()]))
                .route("/v1/chat/completions", web::post().to(HttpResponse::Ok)),
        )
        .await;
        let r = call_service(&app, preflight(PAGE).to_request()).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(got(&r, header::ACCESS_CONTROL_ALLOW_ORIGIN).as_deref(), Some(PAGE));
        assert_eq!(got(&r, header::ACCESS_CONTROL_MAX_AGE).as_deref(), Some("3600"));
        let allowed = got(&r, header::ACCESS_CONTROL_ALLOW_HEADERS).unwrap();
        for h in ALLOWED_HEADERS {
            assert!(allowed.contains(h), "{h} missing from {allowed}");
        }
        assert!(got(&r, header::ACCESS_CONTROL_ALLOW_METHODS).unwrap().contains("post"));
        let r = call_service(
            &app,
            TestRequest::post()
                .uri("/v1/chat/completions")
                .insert_header((header::ORIGIN, PAGE))
                .to_request(),
        )
        .await;
        let exposed = got(&r, header::ACCESS_CONTROL_EXPOSE_HEADERS).unwrap_or_default();
        let mut exposed: Vec<&str> = exposed.split(',').map(str::trim).collect();
        exposed.sort_unstable();
        assert_eq!(exposed, ["retry-after", "x-warden-notices"]);
    }

    /// Another origin's preflight and request get no CORS header and never
    /// reach the route; `*` admits any origin; none configured sends nothing.
    #[actix_web::test]
    async fn other_origins_wildcard_and_none() {
        let rows: &[(&[&str], &str, Option<&str>)] = &[
            // why: not listed: refused, so the browser fails the fetch
            (&[PAGE], "http://evil.example", None),
            // why: `*` answers with `*` (no credentials are involved)
            (&["*"], "http://evil.example", Some("*")),
            // why: nothing configured: no CORS header at all, as before CORS existed
            (&[], PAGE, None),
        ];
        for (i, (origins, origin, want)) in rows.iter().enumerate() {
            let origins: Vec<String> = origins.iter().map(|o| o.to_string()).collect();
            let app = init_service(
                App::new()
                    .wrap(layer(&origins))
                    .route("/v1/chat/completions", web::post().to(HttpResponse::Ok)),
            )
            .await;
            let r = call_service(&app, preflight(origin).to_request()).await;
            assert_eq!(
                got(&r, header::ACCESS_CONTROL_ALLOW_ORIGIN).as_deref(),
                *want,
                "row {i}"
            );
            let simple = TestRequest::post()
                .uri("/v1/chat/completions")
                .insert_header((header::ORIGIN, *origin))
                .to_request();
            let r = call_service(&app, simple).await;
            let reached = r.status() == StatusCode::OK;
            assert_eq!(reached, want.is_some() || origins.is_empty(), "row {i}: {}", r.status());
        }
    }
}
