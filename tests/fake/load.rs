//! Load: 500 concurrent streaming requests against one model, through the
//! `llm-warden` binary (its own process, so its memory can be read) over the
//! fake child (fast tokens, so the test measures the warden, not a model).
//! Every stream completes well-formed, turns start in arrival order, at
//! most the child's slots at once (`law::slots::AUTO_SLOTS`), nothing
//! deadlocks, the warden's memory stays bounded while
//! they wait, and status and health answer throughout.

use crate::support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use support::*;

/// The warden's resident memory (KiB).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

const N: usize = 500;

/// Lifecycle events: the order proof, read while the turns run (the event
/// stream drops what a reader leaves unread past its buffer).
async fn read_events(http: &reqwest::Client, base: &str) -> actix_rt::task::JoinHandle<String> {
    let events = http.get(format!("{base}/warden/events")).send().await.unwrap();
    actix_rt::spawn(async move {
        let mut events = events.bytes_stream();
        let mut seen = String::new();
        while seen.matches("event: turn_ended").count() < N {
            match tokio::time::timeout(Duration::from_secs(60), events.next()).await {
                Ok(Some(Ok(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                _ => break,
            }
        }
        seen
    })
}

/// N streaming chats at once, each answering (status, body).
fn spawn_clients(http: &reqwest::Client, base: &str) -> Vec<actix_rt::task::JoinHandle<(u16, String)>> {
    (0..N)
        .map(|_| {
            let http = http.clone();
            let url = format!("{base}/v1/chat/completions");
            actix_rt::spawn(async move {
                let r = http
                    .post(url)
                    .json(&json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": true}))
                    .send()
                    .await
                    .unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            })
        })
        .collect()
}

/// What the warden looked like while the clients waited.
struct Watched {
    rss_peak: u64,
    status_worst: Duration,
    max_depth: u64,
}

/// How long the 500 streams may take in all (each turn is milliseconds;
/// seconds in all on a loaded machine): past it, something deadlocked.
const ALL_DONE_WITHIN: Duration = Duration::from_secs(300);

/// While they wait: status and health answer, and memory is read.
async fn watch_while_waiting(
    http: &reqwest::Client,
    base: &str,
    wpid: u32,
    rss_idle: u64,
    clients: &[actix_rt::task::JoinHandle<(u16, String)>],
) -> Watched {
    let mut w = Watched {
        rss_peak: rss_idle,
        status_worst: Duration::ZERO,
        max_depth: 0,
    };
    let deadline = Instant::now() + ALL_DONE_WITHIN;
    while clients.iter().any(|c| !c.is_finished()) {
        let waiting = clients.iter().filter(|c| !c.is_finished()).count();
        assert!(
            Instant::now() < deadline,
            "{waiting} of {N} streams still open after {ALL_DONE_WITHIN:?}: a deadlock"
        );
        let t = Instant::now();
        let s: Value = json_of(http.get(format!("{base}/warden/status"))).await;
        w.status_worst = w.status_worst.max(t.elapsed());
        w.max_depth = w.max_depth.max(s["queue_depth"].as_u64().unwrap_or(0));
        assert_eq!(http.get(format!("{base}/health")).send().await.unwrap().status(), 200);
        w.rss_peak = w.rss_peak.max(rss_kib(wpid));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w
}

/// Every stream completed well-formed, with one final chunk.
async fn assert_streams_complete(clients: Vec<actix_rt::task::JoinHandle<(u16, String)>>) {
    for (i, c) in clients.into_iter().enumerate() {
        let (status, text) = c.await.unwrap();
        assert_eq!(status, 200, "client {i}");
        assert!(text.ends_with("data: [DONE]\n\n"), "client {i}: {text}");
        assert_eq!(text.matches("\"length\"").count(), 1, "client {i}: one final chunk");
    }
}

/// Order: turns start in arrival order (seqs 0..N), at most `slots` run
/// at once, and every one ends completed.
fn assert_in_order_at_most(seen: &str, slots: usize) {
    assert!(!seen.contains("events dropped"), "the event reader lagged");
    let mut next_start = 0u64;
    let mut open = std::collections::BTreeSet::new();
    let mut most = 0;
    let mut ended = 0;
    for block in seen.split("\n\n") {
        let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        let v: Value = serde_json::from_str(data).unwrap();
        match v["event"].as_str() {
            Some("turn_started") => {
                assert_eq!(v["seq"], next_start, "arrival order");
                next_start += 1;
                open.insert(v["seq"].as_u64().unwrap());
                most = most.max(open.len());
                assert!(
                    open.len() <= slots,
                    "{} turns ran at once over {slots} slots",
                    open.len()
                );
            }
            Some("turn_ended") => {
                assert!(open.remove(&v["seq"].as_u64().unwrap()), "ended before it started: {v}");
                assert_eq!(v["outcome"], "completed");
                ended += 1;
            }
            _ => {}
        }
    }
    assert_eq!((next_start, ended), (N as u64, N), "every turn started and ended");
    assert!(most > 1, "the turns never overlapped: {most} at most");
}

/// 500 concurrent streams (the default run too: each turn is milliseconds).
#[actix_rt::test]
async fn five_hundred_concurrent_streams() {
    let dir = tempfile::tempdir().unwrap();
    // `serve` scans WARDEN_CACHE_DIR/models: the fake model goes there.
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    fake_model(&models, "m", json!({"tokens": 3, "token_ms": 1, "load_ms": 10}));
    let server = fake_server();
    let (mut warden, base) = spawn_warden_binary(&[
        ("WARDEN_LLAMA_SERVER", server.to_str().unwrap()),
        ("WARDEN_CACHE_DIR", dir.path().to_str().unwrap()),
        ("WARDEN_MAX_QUEUE", "1000"),
    ])
    .await;
    let wpid = warden.id().unwrap();
    let http = llm_warden::child::client::shared_http_client();
    let rss_idle = rss_kib(wpid);
    let reader = read_events(&http, &base).await;
    let clients = spawn_clients(&http, &base);
    let seen = watch_while_waiting(&http, &base, wpid, rss_idle, &clients).await;
    assert_streams_complete(clients).await;
    assert_in_order_at_most(&reader.await.unwrap(), llm_warden::law::slots::AUTO_SLOTS as usize);
    let growth_mib = (seen.rss_peak.saturating_sub(rss_idle)) as f64 / 1024.0;
    eprintln!(
        "LOAD n={N} max_queue_depth={} rss_idle_mib={:.1} rss_peak_mib={:.1} status_worst_ms={}",
        seen.max_depth,
        rss_idle as f64 / 1024.0,
        seen.rss_peak as f64 / 1024.0,
        seen.status_worst.as_millis()
    );
    assert!(seen.max_depth > 50, "the requests did queue ({})", seen.max_depth);
    assert!(
        growth_mib < 64.0,
        "the warden grew {growth_mib:.1} MiB while 500 requests waited"
    );
    warden.start_kill().unwrap();
    let _ = warden.wait().await;
}
