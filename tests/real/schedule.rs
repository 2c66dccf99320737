//! The scheduler across models (`law::schedule`) against the real
//! llama-server, with SmolLM2 and Gemma 3 and at most one resident
//! (`max_resident = 1`), so every turn for the other model needs a switch:
//!
//! - a lone turn for Gemma beside three clients that keep SmolLM2 busy is
//!   answered while they are still busy (before the law, it waited for them
//!   to stop, and under traffic that never paused it was refused after the
//!   load timeout); SmolLM2 yields, its clients' turns all complete, in
//!   order, and the status said why Gemma waited;
//! - two clients, one per model, back to back: every turn is answered, with
//!   the turns collated (at most one load per 4 turns), not one switch per
//!   request;
//! - a pinned model never yields: the other model's turn waits, says why,
//!   and is refused at its load timeout, `model_does_not_fit`.
//!
//! Nothing here waits for a time: the busy clients run until the lone turn
//! is answered (bounded by a count that the old behaviour would exhaust),
//! and the status is polled for the state it asserts.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::json;
use support::*;

/// SmolLM2 and Gemma (its chat template named).
fn two_models() -> (tempfile::TempDir, llm_warden::config::WardenConfig) {
    let dir = tempfile::tempdir().unwrap();
    for (id, file) in [("smollm2", SMOLLM2), ("gemma", GEMMA3)] {
        std::os::unix::fs::symlink(real_model(file), dir.path().join(format!("{id}.gguf"))).unwrap();
    }
    let cfg = llm_warden::config::WardenConfig {
        max_resident: Some(1),
        models: gemma_chat_models(&["gemma"]),
        ..test_config()
    };
    (dir, cfg)
}

/// A short greedy chat turn for `model` in `conversation`.
fn short(model: &str, conversation: &str, tokens: u32) -> llm_warden::TurnRequest {
    let mut r = chat(Some(model), tokens, true).conversation(Some(conversation.into()));
    r.body.insert("ignore_eos".into(), json!(true));
    r
}

/// `n` clients of `model` sending turns back to back until `stop` (or
/// `BUSY_TURNS_MAX` each), every turn answered; each hands back its count,
/// and `sent` counts them all as they end.
fn busy_clients(
    w: &llm_warden::Warden,
    model: &'static str,
    n: usize,
    stop: &Arc<AtomicBool>,
    sent: &Arc<AtomicU64>,
) -> Vec<actix_rt::task::JoinHandle<u64>> {
    (0..n)
        .map(|c| {
            let (w, stop, sent) = (w.clone(), stop.clone(), sent.clone());
            actix_rt::spawn(async move {
                let mut done = 0u64;
                while !stop.load(Ordering::Acquire) && done < BUSY_TURNS_MAX {
                    let t = collect(w.submit(short(model, &format!("busy-{model}-{c}"), 24)).unwrap()).await;
                    assert!(t.done && t.error.is_none(), "client {c}, turn {done}: {t:?}");
                    done += 1;
                    sent.fetch_add(1, Ordering::AcqRel);
                }
                done
            })
        })
        .collect()
}

/// Runs `turn` to its end, keeping the last sentence the status gave for
/// `model` in the line of waiting models meanwhile.
async fn answered_and_why(
    w: &llm_warden::Warden,
    model: &str,
    turn: llm_warden::TurnRequest,
) -> (Turn, Option<String>) {
    let (rx, _) = w.submit_watched(turn).unwrap();
    let lone = actix_rt::spawn(collect(rx));
    let mut why = None;
    while !lone.is_finished() {
        if let Some(m) = w.status().waiting_models.iter().find(|m| m.model == model) {
            why = Some(m.why.clone());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    (lone.await.unwrap(), why)
}

/// The most turns a busy client sends: far more than it sends while the
/// lone turn waits under the law, and what it sends before the old rule
/// (wait until the busy model is idle) would let the lone turn go.
const BUSY_TURNS_MAX: u64 = 2_000;

#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn a_lone_turn_beside_three_busy_clients_goes_within_the_bound() {
    let (models, cfg) = two_models();
    let w = TestWarden::real_cpu(real_llama_server(), models.path())
        .config(cfg)
        .start();
    w.load(Some("smollm2".into()), None).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let clients = busy_clients(&w, "smollm2", 3, &stop, &sent);
    // The three are busy: each has finished a turn.
    poll_until(
        "the busy clients' first turns",
        std::time::Duration::from_secs(120),
        || sent.load(Ordering::Acquire) >= 3,
        || format!("{} turns done", sent.load(Ordering::Acquire)),
    )
    .await;
    // While it waits, the status says why, in the line of waiting models.
    let (t, why) = answered_and_why(&w, "gemma", short("gemma", "lone", 8)).await;
    let busy_when_answered = !stop.load(Ordering::Acquire);
    stop.store(true, Ordering::Release);
    assert!(t.done && t.error.is_none(), "the lone turn: {t:?}");
    let mut total = 0;
    for c in clients {
        let done = c.await.unwrap();
        assert!(
            done < BUSY_TURNS_MAX,
            "a busy client ran out of turns before the lone turn was answered"
        );
        total += done;
    }
    assert!(busy_when_answered);
    let why = why.expect("the status listed gemma as waiting");
    assert!(why.starts_with("gemma "), "{why}");
    eprintln!("the lone turn was answered after {total} busy turns; the status said: {why}");
    // SmolLM2 yielded and came back for its clients.
    let smol = w.status();
    let yields: u64 = smol
        .residents
        .iter()
        .filter(|r| r.model == "smollm2")
        .map(|r| r.loads.yields)
        .sum();
    let resident: Vec<_> = smol.residents.iter().map(|r| r.model.clone()).collect();
    assert!(
        yields >= 1 || resident == ["gemma"],
        "smollm2 yielded its memory: {:?}",
        smol.residents
    );
    assert!(smol.waiting_models.is_empty(), "{:?}", smol.waiting_models);
    w.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn two_clients_on_two_models_are_collated_not_switched_per_request() {
    let (models, cfg) = two_models();
    let w = TestWarden::real_cpu(real_llama_server(), models.path())
        .config(cfg)
        .start();
    const TURNS: usize = 8;
    let mut ev = w.subscribe();
    let client = |model: &'static str| {
        let w = w.clone();
        actix_rt::spawn(async move {
            for i in 0..TURNS {
                let t = collect(w.submit(short(model, &format!("steady-{model}"), 8)).unwrap()).await;
                assert!(t.done && t.error.is_none(), "{model} turn {i}: {t:?}");
            }
        })
    };
    let (a, b) = (client("smollm2"), client("gemma"));
    a.await.unwrap();
    b.await.unwrap();
    // Every load said so as it happened: count them.
    let mut loads = 0;
    while let Ok(e) = ev.try_recv() {
        if matches!(e, llm_warden::status::WardenEvent::Ready { .. }) {
            loads += 1;
        }
    }
    eprintln!("{} turns, {loads} loads", 2 * TURNS);
    // One switch per request would be 16 loads; collation serves several
    // turns per load: at most one load per 4 turns (the target).
    assert!(
        (2..=2 * TURNS / 4).contains(&loads),
        "{loads} loads for {} turns",
        2 * TURNS
    );
    // The status counts the same loads over its window, and sees no thrash.
    let sw = w.status().switching.expect("the switching view after loads");
    assert_eq!(sw.loads, loads as u64, "{sw:?}");
    assert!(!sw.thrashing && sw.loading_ms > 0, "{sw:?}");
    w.shutdown().await;
}

/// SmolLM2 pinned, loaded, and kept busy by one client until `stop`: the
/// other model cannot load meanwhile.
struct PinnedBusy {
    _models: tempfile::TempDir,
    w: llm_warden::Warden,
    stop: Arc<AtomicBool>,
    busy: Vec<actix_rt::task::JoinHandle<u64>>,
}

impl PinnedBusy {
    async fn start() -> Self {
        let (models, mut cfg) = two_models();
        cfg.models.entry("smollm2".into()).or_default().pinned = true;
        let w = TestWarden::real_cpu(real_llama_server(), models.path())
            .config(cfg)
            .start();
        w.load(Some("smollm2".into()), None).await.unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let busy = busy_clients(&w, "smollm2", 1, &stop, &Arc::default());
        Self {
            _models: models,
            w,
            stop,
            busy,
        }
    }

    /// The busy client stopped, its turns all answered.
    async fn stop(self) -> llm_warden::Warden {
        self.stop.store(true, Ordering::Release);
        for b in self.busy {
            b.await.unwrap();
        }
        self.w
    }
}

#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn a_pinned_model_never_yields() {
    let p = PinnedBusy::start().await;
    let pid = p.w.status().child_pid;
    let w = p.w.clone();
    // The refusal is the state asserted: a bounded wait reaches it sooner
    // than the load timeout (which also bounds a load on a busy machine).
    let bounded = short("gemma", "lone", 8).wait_at_most(Some(std::time::Duration::from_secs(3)));
    let (t, why) = answered_and_why(&w, "gemma", bounded).await;
    let w = p.stop().await;
    let err = t.error.expect("refused");
    assert_eq!(err.code, "model_does_not_fit", "{err:?}");
    let why = why.expect("the status listed gemma as waiting");
    assert!(why.contains("pinned"), "{why}");
    let s = w.status();
    assert_eq!(s.child_pid, pid, "the pinned model's child never left");
    assert_eq!(s.loads.yields, 0);
    w.shutdown().await;
}

/// `Prefer: wait=N`: a request that would rather come back than wait is
/// refused once it waited N seconds for another model's memory, with a
/// `Retry-After`, streamed or not (the refusal comes before any byte of
/// an answer); a request without it keeps waiting meanwhile.
#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn a_request_that_would_not_wait_is_told_when_to_come_back() {
    // Pinned and busy: the other model cannot load while the busy client runs.
    let p = PinnedBusy::start().await;
    let w = p.w.clone();
    let base = serve_http(&w);
    poll_until(
        "smollm2 generating",
        std::time::Duration::from_secs(60),
        || w.status().state == llm_warden::status::EngineState::Generating,
        || format!("{:?}", w.status().state),
    )
    .await;
    for stream in [false, true] {
        let r = reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .header("Prefer", "respond-async, wait=1")
            .json(&json!({"model": "gemma", "stream": stream, "max_tokens": 4,
                "messages": [{"role": "user", "content": "Say hi."}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503, "stream={stream}");
        let retry: u64 = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("stream={stream}: no Retry-After in {:?}", r.headers()));
        assert!(retry >= 1, "{retry}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "model_does_not_fit", "{v}");
        let msg = v["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("Prefer: wait"), "{msg}");
    }
    p.stop().await.shutdown().await;
}

/// Three models, one resident, one client per model back to back, under
/// each policy: every turn is answered (no model waits out its load
/// timeout while the others take turns).
#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn three_models_taking_turns_all_answer_under_each_policy() {
    for policy in [
        llm_warden::config::SchedulePolicy::Weighed,
        llm_warden::config::SchedulePolicy::Arrival,
    ] {
        let (models, mut cfg) = two_models();
        std::os::unix::fs::symlink(real_model(SMOLLM2), models.path().join("smollm2-b.gguf")).unwrap();
        cfg.schedule = policy;
        // Past this a starved model is refused: far more than the turns take.
        cfg.load_timeout = std::time::Duration::from_secs(60);
        let w = TestWarden::real_cpu(real_llama_server(), models.path())
            .config(cfg)
            .start();
        let mut clients = Vec::new();
        for model in ["smollm2", "gemma", "smollm2-b"] {
            let w = w.clone();
            clients.push(actix_rt::spawn(async move {
                for i in 0..6 {
                    let t = collect(w.submit(short(model, &format!("three-{model}"), 8)).unwrap()).await;
                    assert!(t.done && t.error.is_none(), "{policy:?}: {model} turn {i}: {t:?}");
                }
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        w.shutdown().await;
    }
}
