//! The HTTP surface over the fake child: OpenAI wire format streamed and not,
//! notices as SSE comments, errors in OpenAI's shape for every kind of bad
//! request, the queue bound, the bearer key, and status/health never queued
//! behind a turn.

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use llm_warden::{Warden, WardenConfig};
use serde_json::{Value, json};
use support::*;

/// A warden over the fake child, served on a free port: (warden, base URL).
fn serve(dir: &std::path::Path, cfg: WardenConfig) -> (Warden, String) {
    let w = TestWarden::fake(dir).config(cfg).start();
    let base = serve_http(&w);
    (w, base)
}

fn http() -> reqwest::Client {
    llm_warden::child::client::shared_http_client()
}

fn body(stream: bool) -> Value {
    json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": stream})
}

/// A streamed answer: event-stream, the loading notice as a comment, OpenAI
/// chunks, `[DONE]`; then a non-streamed one as plain JSON.
#[actix_rt::test]
async fn streamed_and_whole_answers_in_openai_format() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 4}));
    let (w, base) = serve(dir.path(), test_config());
    let r = http()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().await.unwrap();
    assert!(
        text.starts_with(": warden {\"t\":\"loading\",\"model\":\"m\"}\n\n"),
        "{text}"
    );
    let datas: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(datas.last(), Some(&"[DONE]"));
    let first: Value = serde_json::from_str(datas[0]).unwrap();
    assert_eq!(first["object"], "chat.completion.chunk");
    let r = http()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    w.shutdown().await;
}

/// Every kind of bad request is a 4xx JSON error in OpenAI's shape, and the
/// child never sees it (the loaded child's pid is unchanged).
#[actix_rt::test]
async fn bad_requests_are_openai_errors() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({}));
    let cfg = WardenConfig {
        max_body_bytes: 64 * 1024,
        ..test_config()
    };
    let (w, base) = serve(dir.path(), cfg);
    let ok = http()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let pid = w.status().child_pid;
    let huge = format!(
        r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(100 * 1024)
    );
    let rows: Vec<(Vec<u8>, u16, &str)> = vec![
        // why: not JSON at all
        (b"{oops".to_vec(), 400, "invalid_json"),
        // why: invalid UTF-8 inside a string
        (
            b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}".to_vec(),
            400,
            "invalid_json",
        ),
        // why: wrong types
        (br#"{"messages":"hi"}"#.to_vec(), 400, "invalid_type"),
        (
            br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":"lots"}"#.to_vec(),
            400,
            "invalid_type",
        ),
        // why: empty messages
        (br#"{"messages":[]}"#.to_vec(), 400, "empty_messages"),
        // why: an unknown model is a 404 that leaves the child alone
        (
            br#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#.to_vec(),
            404,
            "model_not_found",
        ),
        // why: past the size limit
        (huge.into_bytes(), 413, "request_too_large"),
    ];
    for (i, (raw, status, code)) in rows.into_iter().enumerate() {
        let r = http()
            .post(format!("{base}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "row {i}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], code, "row {i}: {v}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "row {i}");
        assert!(v["error"]["type"].is_string(), "row {i}");
    }
    assert_eq!(w.status().child_pid, pid, "no bad request touched the child");
    let r = http().get(format!("{base}/v2/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "unknown_route");
    w.shutdown().await;
}

/// Past the queue bound a request gets 503 `queue_full` at once; status and
/// health answer while a turn streams (they never queue behind it).
#[actix_rt::test]
async fn queue_bound_and_status_during_a_turn() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 40, "token_ms": 50}));
    let cfg = WardenConfig {
        max_queue: 2,
        ..test_config()
    };
    let (w, base) = serve(dir.path(), cfg);
    let slow = || {
        let base = base.clone();
        async move {
            let r = http()
                .post(format!("{base}/v1/chat/completions"))
                .json(&json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 40, "stream": true}))
                .send()
                .await
                .unwrap();
            r.text().await.unwrap()
        }
    };
    let a = actix_rt::spawn(slow());
    let mut ev = w.subscribe();
    event_or_fail(&mut ev, "the first turn", |e| {
        matches!(e, llm_warden::status::WardenEvent::TurnStarted { .. })
    })
    .await;
    let b = actix_rt::spawn(slow());
    // No event says a turn was queued: the gauge does.
    poll_until(
        "the second request queued",
        Duration::from_secs(30),
        || w.queue_depth() >= 2,
        || format!("queue depth {}", w.queue_depth()),
    )
    .await;
    let r = http()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "queue_full");
    // Status and health answer while the turns run.
    for _ in 0..10 {
        let s: Value = json_of(http().get(format!("{base}/warden/status"))).await;
        assert_eq!(s["queue_depth"], 2);
        assert!(s["state"] == "loading" || s["state"] == "generating", "{s}");
        assert_eq!(http().get(format!("{base}/health")).send().await.unwrap().status(), 200);
    }
    assert!(!a.is_finished(), "status must not have waited for the turn");
    assert!(a.await.unwrap().ends_with("data: [DONE]\n\n"));
    assert!(b.await.unwrap().ends_with("data: [DONE]\n\n"));
    w.shutdown().await;
}

/// With WARDEN_API_KEY set, every route but /health needs the bearer key.
#[actix_rt::test]
async fn the_warden_key_guards_its_routes() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({}));
    let cfg = WardenConfig {
        api_key: Some("sesame".into()),
        ..test_config()
    };
    let (w, base) = serve(dir.path(), cfg);
    assert_eq!(http().get(format!("{base}/health")).send().await.unwrap().status(), 200);
    let r = http().get(format!("{base}/v1/models")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "invalid_api_key");
    let r = http()
        .get(format!("{base}/v1/models"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http()
        .get(format!("{base}/v1/models"))
        .bearer_auth("sesame")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["data"][0]["id"], "m");
    w.shutdown().await;
}

/// Reads an event stream until a frame whose event is `kind` (bounded);
/// all that came.
async fn read_until(r: reqwest::Response, kind: &str) -> String {
    let mut events = r.bytes_stream();
    let mut seen = String::new();
    while !seen.contains(&format!("event: {kind}\n")) {
        let chunk = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .unwrap_or_else(|_| panic!("no {kind} event in: {seen}"))
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

/// `/warden/events` streams lifecycle events as SSE.
#[actix_rt::test]
async fn lifecycle_events_stream() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({}));
    let (w, base) = serve(dir.path(), test_config());
    let events = http().get(format!("{base}/warden/events")).send().await.unwrap();
    let load = http().post(format!("{base}/warden/load")).send().await.unwrap();
    assert_eq!(load.status(), 200);
    let seen = read_until(events, "ready").await;
    assert!(seen.contains("event: loading"), "{seen}");
    w.shutdown().await;
}

/// A subscriber that connects after the events gets them replayed from the
/// warden's ring, numbered and timed; one that says the last id it saw
/// (`Last-Event-ID`, as a reconnecting EventSource does) gets only what
/// came after it.
#[actix_rt::test]
async fn late_subscribers_get_the_recent_events_replayed() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({}));
    let (w, base) = serve(dir.path(), test_config());
    let load = http().post(format!("{base}/warden/load")).send().await.unwrap();
    assert_eq!(load.status(), 200);
    // A new subscriber (or one that saw `last_id`), read until `kind`.
    async fn until(base: &str, last_id: Option<&str>, kind: &str) -> String {
        let mut req = http().get(format!("{base}/warden/events"));
        if let Some(id) = last_id {
            req = req.header("Last-Event-ID", id);
        }
        read_until(req.send().await.unwrap(), kind).await
    }
    // why: the load happened before this subscriber came; it is replayed
    let first = until(&base, None, "ready").await;
    assert!(
        first.contains("event: loading\n") && first.contains("\"at_ms\":"),
        "{first}"
    );
    let ready_id = first
        .split("\n\n")
        .find(|f| f.contains("event: ready"))
        .and_then(|f| f.lines().find_map(|l| l.strip_prefix("id: ")))
        .expect("the ready frame has an id")
        .to_string();
    // why: after the id it saw, only what came later: the unload's events
    let unload = http().post(format!("{base}/warden/unload")).send().await.unwrap();
    assert_eq!(unload.status(), 200);
    let later = until(&base, Some(&ready_id), "unloaded").await;
    assert!(
        !later.contains("event: ready\n") && !later.contains("event: loading\n"),
        "{later}"
    );
    w.shutdown().await;
}

/// `/v1/models` shows each model's facts and the plan a load of it gets
/// here: the engine's own plan, so the window it shows is the one the load
/// then runs, memory-bound or not.
#[actix_rt::test]
async fn models_show_the_plan_a_load_gets() {
    // 128 KiB + 1 KiB per token: 8 GiB holds the trained 16384; 2 GiB holds
    // (1.5 GiB - 256 MiB - weights) / 132,096 B = 10,160 -> 9984 tokens.
    for (ram_gib, window, bound) in [(8u64, 16_384, false), (2, 9984, true)] {
        let dir = tempfile::tempdir().unwrap();
        heavy_model(dir.path(), "m", json!({}));
        let cfg = WardenConfig {
            ram_override_bytes: Some(ram_gib << 30),
            ..test_config()
        };
        let (w, base) = serve(dir.path(), cfg);
        let v: Value = json_of(http().get(format!("{base}/v1/models"))).await;
        let m = &v["data"][0];
        assert_eq!(m["facts"]["trained_window"], 16_384, "{m}");
        assert_eq!(m["plan"]["context_tokens"], window, "{ram_gib} GiB: {m}");
        assert_eq!(m["plan"]["memory_bound"], bound, "{ram_gib} GiB: {m}");
        assert_eq!(m["plan"]["ram_bytes"], ram_gib << 30, "{m}");
        let s: Value = json_of(http().post(format!("{base}/warden/load"))).await;
        assert_eq!(
            s["context_tokens"], m["plan"]["context_tokens"],
            "{ram_gib} GiB: the load's window"
        );
        w.shutdown().await;
    }
}

/// A stream that goes silent (here, tokens 1.5 s apart; a resumed turn
/// waiting for its new child is the same) gets SSE comments as
/// keep-alives at the configured pace, which clients skip: the answer
/// still parses whole.
#[actix_rt::test]
async fn a_silent_stream_gets_keep_alive_comments() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 2, "token_ms": 1500}));
    let cfg = WardenConfig {
        sse_keep_alive: Duration::from_millis(200),
        ..test_config()
    };
    let (w, base) = serve(dir.path(), cfg);
    let text = http()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body(true))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let keep_alives = text.matches(": keep-alive\n\n").count();
    assert!(keep_alives >= 2, "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let tokens = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v.pointer("/choices/0/delta/content").is_some_and(|c| c.is_string()))
        .count();
    assert_eq!(tokens, 2, "{text}");
    w.shutdown().await;
}
