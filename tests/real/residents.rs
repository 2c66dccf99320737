//! Several models resident at once, against the real llama-server and the
//! real models (SmolLM2, Gemma 3 270M, all-MiniLM-L6-v2), the warden binary
//! in a memory cgroup so that its RAM total is the group's limit:
//!
//! - two chat models and the embedding model resident at once, each its
//!   own child; a fourth does not fit, and evicts the least recently used
//!   idle resident, never the one streaming, which streams on;
//! - an evicted chat model is saved on its way out and, coming back beside
//!   the others, is planned by memory: here the full-size sliding cache
//!   would bind Gemma's window, so it comes back with the small one at its
//!   whole window (`law::plan`), says its conversations are not
//!   kept, and re-reads the conversation (the KV store's restore itself is
//!   `kv_save.rs`'s and `kv_swa.rs`'s);
//! - SIGKILL of the warden leaves none of its three children behind;
//! - turns for two models overlap in time (each its own mailbox);
//! - pressure in the group evicts the idle resident before anything
//!   shrinks the one in use.
//!
//! The law's arithmetic in a 3 GiB group (0.75 x RAM = 2304 MiB; each
//! resident holds weights + window x (KV + 1 KiB) + 256 MiB): SmolLM2 at
//! its trained 8192 holds 538 MiB, MiniLM at 512 holds 305 MiB, Gemma at its
//! trained 32768 holds 1105 MiB: 1948 MiB together. A second Gemma (the
//! small sliding cache, 3 KiB a token of its full layers and 15 MiB of
//! sliding cells) fits only once MiniLM (305 MiB) is gone.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use support::*;

const GIB: u64 = 1 << 30;

/// The models under the ids the tests use; `gemma-b` is a second Gemma
/// (the same file under another id: another resident, another child).
fn models_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (id, file) in [
        ("smollm2", SMOLLM2),
        ("gemma", GEMMA3),
        ("gemma-b", GEMMA3),
        ("minilm", MINILM),
    ] {
        std::os::unix::fs::symlink(real_model(file), dir.path().join(format!("{id}.gguf"))).unwrap();
    }
    std::fs::write(settings_of(dir.path()), gemma_chat_settings(&["gemma", "gemma-b"])).unwrap();
    dir
}

/// The settings file beside the models: Gemma's chat template
/// (`GEMMA3_TEMPLATE`).
fn settings_of(models: &std::path::Path) -> std::path::PathBuf {
    models.join("settings.toml")
}

/// `llm-warden serve` in `group` over `models`, its KV saves in `kv`, the
/// brake sampling every second.
async fn warden_in(
    group: &MemCgroup,
    models: &std::path::Path,
    kv: &std::path::Path,
) -> (tokio::process::Child, String) {
    real_llama_server();
    let args = format!("--models-dir {} --model smollm2", models.display());
    let kv = kv.display().to_string();
    let settings = settings_of(models).display().to_string();
    spawn_warden_in_group(
        group,
        &args,
        &[("WARDEN_KV_SAVE_DIR", &kv), ("WARDEN_CONFIG", &settings)],
    )
    .await
}

/// Every event of `/warden/events` from now on, gathered in the background.
fn gather_events(base: &str) -> Arc<Mutex<Vec<Value>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (url, into) = (format!("{base}/warden/events"), seen.clone());
    actix_rt::spawn(async move {
        let r = reqwest::Client::new().get(url).send().await.unwrap();
        let mut body = r.bytes_stream();
        let mut buf = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let frame: String = buf.drain(..end + 2).collect();
                for line in frame.lines() {
                    if let Some(data) = line.strip_prefix("data: ")
                        && let Ok(v) = serde_json::from_str::<Value>(data)
                    {
                        into.lock().unwrap().push(v);
                    }
                }
            }
        }
    });
    seen
}

fn unloads(events: &Arc<Mutex<Vec<Value>>>) -> Vec<(String, String)> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "unloaded")
        .map(|e| {
            (
                e["model"].as_str().unwrap_or("").into(),
                e["reason"].as_str().unwrap_or("").into(),
            )
        })
        .collect()
}

async fn status(base: &str) -> Value {
    json_of(reqwest::Client::new().get(format!("{base}/warden/status"))).await
}

/// The residents' models in the status's order (most recently used first)
/// with their pids.
fn residents(s: &Value) -> Vec<(String, u32)> {
    s["residents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["model"].as_str().unwrap().into(),
                r["child_pid"].as_u64().unwrap_or(0) as u32,
            )
        })
        .collect()
}

fn pid_of(s: &Value, model: &str) -> u32 {
    residents(s)
        .into_iter()
        .find(|(m, _)| m == model)
        .unwrap_or_else(|| panic!("{model} is not resident: {s}"))
        .1
}

async fn embed(base: &str, model: &str) {
    let v = json_of(
        reqwest::Client::new()
            .post(format!("{base}/v1/embeddings"))
            .json(&json!({"model": model, "input": ["a cat sat on the mat", "stock prices fell"]})),
    )
    .await;
    assert_eq!(v["data"].as_array().map(Vec::len), Some(2), "{v}");
}

/// A short greedy chat turn to `model`.
async fn hello(base: &str, model: &str) -> Value {
    conversation_turn(
        base,
        &format!("hello-{model}"),
        &[json!({"role": "user", "content": "Say hi."})],
        4,
        json!({"model": model}),
    )
    .await
}

fn processed(v: &Value) -> u64 {
    v["timings"]["prompt_n"].as_u64().unwrap()
}

/// Three residents in a 3 GiB group; a fourth evicts the least recently
/// used idle one while the least recently used of all streams on; the
/// evicted Gemma's conversation comes back with its KV; SIGKILL of the
/// warden leaves no child.
#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh) and root (memory cgroups); ./test.sh runs it"]
async fn three_residents_fit_and_a_fourth_evicts_the_least_recently_used_idle_one() {
    let models = models_dir();
    let kv = tempfile::tempdir().unwrap();
    let group = MemCgroup::new("llm-warden-residents", 3 * GIB);
    let (mut warden, base) = warden_in(&group, models.path(), kv.path()).await;
    let events = gather_events(&base);

    // 1. SmolLM2, then MiniLM, then Gemma with a long conversation: all resident.
    hello(&base, "smollm2").await;
    embed(&base, "minilm").await;
    let opening = vec![json!({"role": "user", "content": format!("{}\nWhich number follows 41?", long_text(60))})];
    let g1 = conversation_turn(&base, "g1", &opening, 12, json!({"model": "gemma"})).await;
    let first_read = g1["usage"]["prompt_tokens"].as_u64().unwrap();
    let s = status(&base).await;
    let order: Vec<String> = residents(&s).into_iter().map(|(m, _)| m).collect();
    assert_eq!(order, ["gemma", "minilm", "smollm2"], "most recently used first: {s}");
    let pids: Vec<u32> = residents(&s).into_iter().map(|(_, p)| p).collect();
    assert!(pids.iter().all(|&p| p > 0 && alive(p)), "{s}");
    assert_eq!(
        pids.iter().collect::<std::collections::HashSet<_>>().len(),
        3,
        "three children: {s}"
    );
    assert_eq!(s["model"], "gemma", "the top level is the last used: {s}");
    assert!(
        unloads(&events).is_empty(),
        "nothing was evicted to hold three: {:?}",
        unloads(&events)
    );
    let smollm_pid = pid_of(&s, "smollm2");

    // 2. SmolLM2, the least recently used, streams; a fourth model comes.
    let http = reqwest::Client::new();
    let stream = http
        .post(format!("{base}/v1/chat/completions"))
        .json(
            &json!({"model": "smollm2", "stream": true, "max_tokens": 400, "ignore_eos": true,
                      "messages": [{"role": "user", "content": "Count from 1 to 500."}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut chunks = stream.bytes_stream();
    let first = chunks.next().await.expect("a first chunk").unwrap();
    assert!(!first.is_empty());
    let streaming = actix_rt::spawn(async move {
        let mut text = String::from_utf8_lossy(&first).into_owned();
        while let Some(Ok(c)) = chunks.next().await {
            text.push_str(&String::from_utf8_lossy(&c));
        }
        text
    });
    hello(&base, "gemma-b").await;
    let text = streaming.await.unwrap();
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "the stream was not cut: {text}"
    );
    let evicted = unloads(&events);
    assert_eq!(
        evicted,
        [("minilm".to_string(), "evicted".to_string())],
        "the least recently used idle resident, not the streaming one"
    );
    let freed = events
        .lock()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "unloaded")
        .map(|e| e["freed_bytes"].as_u64().unwrap_or(0))
        .unwrap();
    assert!(freed > 256 << 20, "the eviction says what it freed: {freed}");
    let s = status(&base).await;
    assert_eq!(pid_of(&s, "smollm2"), smollm_pid, "the streaming child was not touched");
    assert_eq!(residents(&s).len(), 3, "{s}");

    // 3. MiniLM again evicts Gemma (now the least recently used idle),
    // whose conversation is saved on the way out.
    embed(&base, "minilm").await;
    assert!(
        unloads(&events).contains(&("gemma".to_string(), "evicted".to_string())),
        "{:?}",
        unloads(&events)
    );
    // The store as the status shows it is the store now, whichever
    // resident saved last (the top level is MiniLM's, which saved nothing).
    let s = status(&base).await;
    assert_eq!(s["model"], "minilm", "{s}");
    let saved = s["kv_saves"]["saves"].as_array().cloned().unwrap_or_default();
    assert!(
        saved.iter().any(|r| r["conversation"] == "g1" && r["model"] == "gemma"),
        "the evicted Gemma's save is listed: {}",
        s["kv_saves"]
    );
    let mut msgs = opening.clone();
    msgs.push(answer(&g1));
    msgs.push(json!({"role": "user", "content": "And which follows 12?"}));
    let g2 = conversation_turn(&base, "g1", &msgs, 12, json!({"model": "gemma"})).await;
    let (read, total) = (processed(&g2), g2["usage"]["prompt_tokens"].as_u64().unwrap());
    eprintln!("after the eviction: processed {read} of {total} prompt tokens (first turn read {first_read})");
    assert!(total > first_read, "the conversation grew: {total}");
    // Back beside the others, the full sliding cache would bind its window:
    // the plan runs the small one at the trained window, and says so.
    let s = status(&base).await;
    assert_eq!(s["model"], "gemma", "{s}");
    assert_eq!(s["context_tokens"], 32768, "the whole window: {s}");
    assert_eq!(s["kv_keep"]["how"], "sliding_window", "{}", s["kv_keep"]);
    assert_eq!(
        read, total,
        "not kept with the small cache: the conversation is re-read"
    );

    // 4. SIGKILL of the warden: no child outlives it.
    let s = status(&base).await;
    let pids: Vec<u32> = residents(&s).into_iter().map(|(_, p)| p).collect();
    assert!(pids.len() >= 3, "{s}");
    warden.start_kill().unwrap();
    let _ = warden.wait().await;
    for pid in pids {
        assert!(wait_gone(pid, 10).await, "child {pid} outlived the SIGKILLed warden");
    }
    assert_eq!(group.oom_kills(), 0);
}

/// Turns for two models overlap in time: each model's engine has its own
/// mailbox, so the second turn starts before the first ends.
#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn turns_for_two_models_overlap_in_time() {
    let models = models_dir();
    let w = TestWarden::real_cpu(real_llama_server(), models.path())
        .default_model("smollm2")
        .settings(&settings_of(models.path()))
        .start();
    w.load(Some("smollm2".into()), None).await.unwrap();
    w.load(Some("gemma".into()), None).await.unwrap();
    let mut ev = w.subscribe();
    let long = |model: &str| {
        let mut r = chat(Some(model), 120, true);
        r.body.insert("ignore_eos".into(), json!(true));
        r
    };
    let a = w.submit_watched(long("smollm2")).unwrap();
    let b = w.submit_watched(long("gemma")).unwrap();
    let (sa, sb) = (a.1.seq, b.1.seq);
    let started = Instant::now();
    let (ta, tb) = futures::join!(collect(a.0), collect(b.0));
    assert!(ta.done && tb.done, "{ta:?} {tb:?}");
    eprintln!("both turns in {:?}", started.elapsed());
    // The order of starts and ends: both start before either ends.
    let mut order = Vec::new();
    while order.len() < 4 {
        match event_or_fail(&mut ev, "the turns' events", |e| {
            matches!(
                e,
                llm_warden::status::WardenEvent::TurnStarted { .. } | llm_warden::status::WardenEvent::TurnEnded { .. }
            )
        })
        .await
        {
            llm_warden::status::WardenEvent::TurnStarted { seq } => order.push(("start", seq)),
            llm_warden::status::WardenEvent::TurnEnded { seq, .. } => order.push(("end", seq)),
            _ => unreachable!(),
        }
    }
    let first_end = order.iter().position(|(k, _)| *k == "end").unwrap();
    let starts: Vec<u64> = order[..first_end].iter().map(|(_, s)| *s).collect();
    assert!(
        starts.contains(&sa) && starts.contains(&sb),
        "both turns started before either ended: {order:?}"
    );
    let s = w.status();
    assert_eq!(s.residents.len(), 2, "{:?}", s.residents);
    w.shutdown().await;
}

/// Real pressure in a 1.5 GiB group with two residents: the brake's idle
/// samples evict the idle least recently used resident (MiniLM) before
/// anything shrinks the one in use (SmolLM2); nothing is OOM-killed.
#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh) and root (memory cgroups); ./test.sh runs it"]
async fn pressure_evicts_an_idle_resident_before_shrinking_the_one_in_use() {
    const LIMIT: u64 = 1536 << 20;
    let models = models_dir();
    let kv = tempfile::tempdir().unwrap();
    let group = MemCgroup::new("llm-warden-residents-pressure", LIMIT);
    let (mut warden, base) = warden_in(&group, models.path(), kv.path()).await;
    let events = gather_events(&base);
    embed(&base, "minilm").await;
    hello(&base, "smollm2").await;
    let s = status(&base).await;
    assert_eq!(residents(&s).len(), 2, "{s}");
    let smollm_pid = pid_of(&s, "smollm2");
    let balloon_script = format!(
        "{} python3 {} {} {LIMIT} 4 0.15",
        group.enter(),
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/balloon.py"),
        group.dir.display()
    );
    let mut balloon = tokio::process::Command::new("sh")
        .args(["-c", &balloon_script])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The first brake action under pressure.
    let first = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let acted = events
                .lock()
                .unwrap()
                .iter()
                .find(|e| e["event"] == "brake" && e["action"] != "none")
                .cloned();
            if let Some(a) = acted {
                return a;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the brake acts under lasting pressure");
    assert_eq!(first["action"], "evict", "an eviction first: {first}");
    // The eviction's unload event follows its brake event (bounded poll).
    let minilm_gone = |events: &Mutex<Vec<Value>>| {
        events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "unloaded" && e["model"] == "minilm")
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        while !minilm_gone(&events) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the evicted resident's unload is said");
    let gone = unloads(&events);
    assert_eq!(
        gone.first(),
        Some(&("minilm".to_string(), "evicted".to_string())),
        "{gone:?}"
    );
    let s = status(&base).await;
    let _ = balloon.start_kill();
    let _ = balloon.wait().await;
    // SmolLM2 was not shrunk before MiniLM went (its pid and window held
    // until then; the brake may act on it afterwards, alone).
    let shrunk_before = events
        .lock()
        .unwrap()
        .iter()
        .take_while(|e| !(e["event"] == "unloaded" && e["model"] == "minilm"))
        .any(|e| e["event"] == "brake" && e["action"] == "shrink+respawn");
    assert!(!shrunk_before, "nothing shrank before the idle resident was evicted");
    eprintln!("after the eviction: {}", s["residents"]);
    // The resident in use kept its child through the eviction: the same
    // pid, unless the brake acted on it afterwards (then said by an event).
    let acted_after = events
        .lock()
        .unwrap()
        .iter()
        .skip_while(|e| !(e["event"] == "unloaded" && e["model"] == "minilm"))
        .any(|e| e["event"] == "brake" && e["action"] != "none" && e["action"] != "evict");
    if !acted_after {
        assert_eq!(pid_of(&s, "smollm2"), smollm_pid, "SmolLM2's child was untouched: {s}");
    }
    assert_eq!(group.oom_kills(), 0);
    warden.start_kill().unwrap();
    let _ = warden.wait().await;
}
