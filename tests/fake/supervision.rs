//! Supervision, over the fake child (a real process, a test double for
//! fault injection): a panic inside an engine handler gives the turn in
//! flight `engine_panicked`, retires the child (its process is gone), logs
//! one ERROR with the panic's message, and the next turn answers on a new
//! child; an engine that goes away mid-turn ends the SSE stream and
//! `Warden::chat` with `engine_unavailable`; dropping the last `Warden`
//! stops its child.

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use support::*;

/// Waits (bounded) until `pid` is gone.
async fn gone(pid: u32, what: &str) {
    assert!(
        wait_gone(pid, 10).await,
        "{what}: the child {pid} still runs after 10 s"
    );
}

/// A panic in a turn: the turn's coded error, the child retired, one ERROR,
/// and the engine answers the next turn.
#[actix_rt::test]
async fn a_panicking_turn_is_answered_and_the_engine_comes_back() {
    capture_log();
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 4, "token_ms": 1}));
    let w = TestWarden::fake(dir.path()).start();
    let pid = load_default(&w).await.child_pid.expect("loaded");
    w.panic_next_turn();
    let err = w.chat(chat(None, 4, true)).unwrap().text().await.unwrap_err().to_api();
    assert_eq!((err.status, err.code.as_str()), (500, "engine_panicked"), "{err:?}");
    assert!(
        err.message.contains("a test asked this turn to panic"),
        "{}",
        err.message
    );
    gone(pid, "after the panic").await;
    let text = w.chat(chat(None, 4, false)).unwrap().text().await.unwrap();
    assert_eq!(text, "tok tok tok tok ");
    let new_pid = w.status().child_pid.expect("a new child");
    assert_ne!(new_pid, pid);
    let log = captured_log();
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" ERROR ") && l.contains("a test asked this turn to panic"))
        .collect();
    assert_eq!(errors.len(), 1, "one ERROR line: {errors:?}");
    w.shutdown().await;
}

/// An engine that goes away mid-turn: the SSE stream ends with an error
/// event coded `engine_unavailable`, `Warden::chat` with an `Err`, and the
/// child dies with the engine.
#[actix_rt::test]
async fn an_engine_gone_mid_turn_ends_every_stream_with_an_error() {
    capture_log();
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 500, "token_ms": 20}));
    let w = TestWarden::fake(dir.path()).start();
    let pid = load_default(&w).await.child_pid.expect("loaded");
    let base = serve_http(&w);
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "go"}], "stream": true}))
        .send()
        .await
        .unwrap();
    let mut body = r.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(30), body.next())
        .await
        .expect("a first event")
        .unwrap()
        .unwrap();
    assert!(
        first.starts_with(b"data: ") || first.starts_with(b": warden"),
        "{first:?}"
    );
    let embedded = w.chat(chat(None, 500, true)).unwrap();
    assert!(w.stop_engine_now(), "the engine runs on its own arbiter");
    let mut rest = Vec::new();
    while let Ok(Some(Ok(b))) = tokio::time::timeout(Duration::from_secs(30), body.next()).await {
        rest.extend_from_slice(&b);
    }
    let rest = String::from_utf8_lossy(&rest);
    let last = rest.lines().rev().find(|l| l.starts_with("data: ")).unwrap_or("");
    assert!(
        last.contains("\"engine_unavailable\""),
        "the stream's last event: {last}"
    );
    let err = embedded.text().await.unwrap_err();
    assert_eq!(err.code(), "engine_unavailable");
    gone(pid, "after the engine went away").await;
}

/// The last `Warden` dropped without `shutdown`: its child is stopped.
#[actix_rt::test]
async fn dropping_the_last_warden_stops_its_child() {
    capture_log();
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 4, "token_ms": 1}));
    let w = TestWarden::fake(dir.path()).start();
    let pid = load_default(&w).await.child_pid.expect("loaded");
    let other = w.clone();
    drop(w);
    assert!(alive(pid), "a clone still holds the engine");
    drop(other);
    gone(pid, "after the last Warden was dropped").await;
}
