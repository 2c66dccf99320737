//! `GET /warden/ui`: the dashboard, one page served by the warden itself
//! with every asset compiled into the binary (no network at run time, no
//! dependency: the chart is SVG drawn by the page's own script), and
//! `GET /warden/samples`, the memory history it charts
//! (`sensors::history`). Behind the same key as every route: a browser
//! gives it as HTTP Basic credentials (any user name, the key as password),
//! which `auth` accepts and asks for on this page.
//!
//! The page reads `/warden/status` every 2 s and `/warden/events` live; it
//! degrades to a stated condition, never a blank page: no model loaded, no
//! memory sensor (the brake's off reason), the event stream lost (the
//! browser's EventSource reconnects; a banner says so meanwhile), the warden
//! unreachable.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::sensors::history::HISTORY_CAPACITY;
use crate::warden::Warden;

const INDEX: &str = include_str!("../../assets/ui/index.html");
const APP_JS: &str = include_str!("../../assets/ui/app.js");
const APP_CSS: &str = include_str!("../../assets/ui/app.css");

/// Only the page's own files may run or load: nothing inline, nothing from
/// elsewhere.
const CSP: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Content-Security-Policy", CSP))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "no-cache"))
        .body(body)
}

/// `GET /warden/ui`.
pub async fn page() -> HttpResponse {
    asset(INDEX, "text/html; charset=utf-8")
}

/// `GET /warden/ui/app.js`.
pub async fn script() -> HttpResponse {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

/// `GET /warden/ui/app.css`.
pub async fn style() -> HttpResponse {
    asset(APP_CSS, "text/css; charset=utf-8")
}

/// `GET /warden/samples`: the memory history, oldest first.
pub async fn samples(warden: web::Data<Warden>) -> HttpResponse {
    let h = warden.history();
    HttpResponse::Ok().json(json!({
        "interval_s": h.interval.as_secs_f64(),
        "capacity": HISTORY_CAPACITY,
        "samples": h.snapshot(),
    }))
}

#[cfg(test)]
mod tests {
    /// Every kind of `WardenEvent` is one the page listens for, or one it
    /// leaves out on purpose: a new event is not silently missing from the
    /// timeline (two were, before this test). The kinds are read from the
    /// enum's source, as serde names them (snake case).
    #[test]
    fn the_page_listens_for_every_event_kind() {
        // why: a turn's start says nothing its end does not say better
        const LEFT_OUT: &[&str] = &["turn_started"];
        let source = include_str!("../status/mod.rs");
        let body = source
            .split("pub enum WardenEvent {")
            .nth(1)
            .and_then(|s| s.split("\n}\n").next())
            .expect("the enum's body");
        let kinds: Vec<String> = body
            .lines()
            .filter_map(|l| l.strip_prefix("    "))
            .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
            .filter_map(|l| l.split([' ', ',', '(', '{']).next())
            .map(|name| {
                let mut snake = String::new();
                for (i, c) in name.chars().enumerate() {
                    if c.is_ascii_uppercase() && i > 0 {
                        snake.push('_');
                    }
                    snake.push(c.to_ascii_lowercase());
                }
                snake
            })
            .collect();
        assert!(kinds.len() > 10, "the enum was read: {kinds:?}");
        let listed = super::APP_JS
            .split("const KINDS = [")
            .nth(1)
            .and_then(|s| s.split("];").next())
            .expect("app.js lists its KINDS");
        for k in &kinds {
            let quoted = format!("\"{k}\"");
            assert!(
                listed.contains(&quoted) || LEFT_OUT.contains(&k.as_str()),
                "the dashboard does not listen for `{k}` events (app.js KINDS)"
            );
            assert!(
                LEFT_OUT.contains(&k.as_str()) || super::APP_JS.contains(&format!("case {quoted}")),
                "the dashboard has no line for `{k}` events (app.js describe)"
            );
        }
    }
}
