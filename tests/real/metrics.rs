//! `GET /metrics` read by Prometheus' own text parser (the Python
//! `prometheus-client` package) against the real llama-server: the output
//! parses, counters and histograms move as turns, loads, unloads and the
//! brake happen, the child's own llama.cpp series come through with a
//! `model` label, and the route is behind the key like every other.

use crate::support;

use std::collections::HashMap;
use std::process::Command;

use llm_warden::WardenConfig;
use serde_json::{Value, json};
use support::*;

/// Parses the exposition with `prometheus_client.parser` and prints every
/// sample as `[name, labels, value]`, plus each family's type.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
samples, types = [], {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    types[fam.name] = fam.type
    for s in fam.samples:
        samples.append([s.name, s.labels, s.value])
print(json.dumps({"samples": samples, "types": types}))
"#;

/// A parsed scrape.
struct Scrape {
    samples: Vec<(String, HashMap<String, String>, f64)>,
    types: HashMap<String, String>,
}

impl Scrape {
    /// The value of `name` whose labels include `labels` (0 when absent).
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .find(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
            .map_or(0.0, |s| s.2)
    }

    fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|(n, _, _)| n == name)
    }
}

async fn scrape(base: &str, py: &std::path::Path, key: Option<&str>) -> Scrape {
    let mut r = reqwest::Client::new().get(format!("{base}/metrics"));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = r.text().await.unwrap();
    let py = py.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new(py)
            .args(["-c", PARSE])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the parser refused it: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let samples = v["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let labels = s[1]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            (s[0].as_str().unwrap().to_string(), labels, s[2].as_f64().unwrap())
        })
        .collect();
    let types = v["types"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    Scrape { samples, types }
}

async fn chat_turn(base: &str, key: &str, stream: bool) {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&json!({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "stream": stream}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
}

async fn post_authed(base: &str, path: &str, key: &str, body: Option<Value>) -> u16 {
    let mut r = reqwest::Client::new().post(format!("{base}{path}")).bearer_auth(key);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap().status().as_u16()
}

/// What the counters must count: two streamed turns and one whole, a
/// tokenizer call, and a refused request.
async fn do_the_work(base: &str, key: &str) {
    chat_turn(base, key, true).await;
    chat_turn(base, key, true).await;
    chat_turn(base, key, false).await;
    let tokenize = post_authed(base, "/tokenize", key, Some(json!({"content": "hi"}))).await;
    assert_eq!(tokenize, 200);
    let refused = json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(post_authed(base, "/v1/chat/completions", key, Some(refused)).await, 404);
}

fn turns(s: &Scrape, route: &str, outcome: &str) -> f64 {
    s.get("warden_turns_total", &[("route", route), ("outcome", outcome)])
}

/// Before any work: nothing counted, nothing loaded, the families typed.
fn assert_fresh(before: &Scrape) {
    assert_eq!(turns(before, "chat", "completed"), 0.0);
    assert_eq!(before.get("warden_model_loaded", &[]), 0.0);
    assert_eq!(before.types["warden_time_to_first_token_seconds"], "histogram");
    assert_eq!(before.types["warden_turns"], "counter");
    assert!(!before.has("warden_context_tokens"), "no window without a model");
}

/// After `do_the_work`: the turns, the refusal, the histograms, the loaded
/// model's gauges and the child's own series.
fn assert_worked(during: &Scrape, context_tokens: u32) {
    assert_eq!(turns(during, "chat", "completed"), 3.0);
    assert_eq!(
        turns(during, "tokenize", "completed"),
        1.0,
        "a tokenizer call beside the queue counts"
    );
    assert_eq!(
        during.get(
            "warden_requests_refused_total",
            &[("route", "chat"), ("code", "model_not_found")]
        ),
        1.0
    );
    // why: only the two streamed turns have a first-token time
    assert_eq!(during.get("warden_time_to_first_token_seconds_count", &[]), 2.0);
    assert_eq!(
        during.get("warden_time_to_first_token_seconds_bucket", &[("le", "+Inf")]),
        2.0
    );
    assert!(during.get("warden_time_to_first_token_seconds_sum", &[]) > 0.0);
    assert_eq!(during.get("warden_decode_tokens_per_second_count", &[]), 2.0);
    assert!(during.get("warden_completion_tokens_total", &[("route", "chat")]) >= 2.0);
    assert_eq!(during.get("warden_load_duration_seconds_count", &[]), 1.0);
    assert_eq!(
        during.get("warden_model_loaded", &[("model", "smollm2"), ("engine", "cpu")]),
        1.0
    );
    assert_eq!(during.get("warden_queue_depth", &[]), 0.0);
    assert_eq!(during.get("warden_context_tokens", &[]), f64::from(context_tokens));
    assert!(during.get("warden_child_footprint_bytes", &[]) > 0.0);
    assert!(during.get("warden_memory_total_bytes", &[]) > 0.0);
    assert!(during.get("warden_idle_deadline_seconds", &[]) > 0.0);
    assert_eq!(during.get("warden_child_metrics_up", &[]), 1.0);
    // The child's own counters, relayed with the model's label.
    assert!(during.get("llamacpp:tokens_predicted_total", &[("model", "smollm2")]) >= 16.0);
}

/// After a manual unload: counted, and the child's series gone with it.
fn assert_unloaded(after: &Scrape) {
    assert_eq!(after.get("warden_unloads_total", &[("reason", "manual")]), 1.0);
    assert_eq!(after.get("warden_model_loaded", &[]), 0.0);
    assert!(
        !after.has("llamacpp:tokens_predicted_total"),
        "no child, no child series"
    );
    assert!(!after.has("warden_child_metrics_up"));
}

/// The scrape parses before, during and after work, and each figure moves
/// with what the warden did; the route wants the key.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh) and the Python clients (./build-llama.sh clients); ./test.sh runs it"]
async fn metrics_parse_and_move_as_the_warden_works() {
    let py = client_python();
    let key = "metrics-test-key";
    let cfg = WardenConfig {
        api_key: Some(key.into()),
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    let r = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(r.status(), 401, "the same key as every route");
    assert_fresh(&scrape(&base, &py, Some(key)).await);
    do_the_work(&base, key).await;
    let during = scrape(&base, &py, Some(key)).await;
    assert_worked(&during, w.status().context_tokens.unwrap());
    assert_eq!(post_authed(&base, "/warden/unload", key, None).await, 200);
    assert_unloaded(&scrape(&base, &py, Some(key)).await);
    w.shutdown().await;
}

/// Forced critical pressure on a memory-bound SmolLM2 shrinks and respawns
/// the child at the turn's end: a brake action at level critical and a
/// restart whose reason is the brake.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh) and the Python clients (./build-llama.sh clients); ./test.sh runs it"]
async fn brake_actions_and_restarts_are_counted() {
    let py = client_python();
    let cfg = forced_critical(test_config());
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    let t = collect(w.submit(chat(None, 8, true)).unwrap()).await;
    assert!(t.done, "{t:?}");
    let s = scrape(&base, &py, None).await;
    assert_eq!(
        s.get(
            "warden_brake_actions_total",
            &[("level", "critical"), ("action", "shrink+respawn")]
        ),
        1.0
    );
    assert_eq!(s.get("warden_child_restarts_total", &[("reason", "brake")]), 1.0);
    // why: a respawn replaces the child in place; it is no unload
    assert_eq!(s.get("warden_unloads_total", &[("reason", "brake")]), 0.0);
    assert_eq!(s.get("warden_load_duration_seconds_count", &[]), 2.0);
    assert_eq!(s.get("warden_brake_level", &[]), 2.0);
    assert_eq!(s.get("warden_context_tokens", &[]), 4096.0);
    w.shutdown().await;
}
