//! Several conversations on one real child, llama-server with
//! SmolLM2 over 4 slots and one KV pool: four streams overlap in time and
//! each greedy answer is its own question's (no slot answers another's);
//! a fifth
//! conversation sends the least recently used one to disk and its return
//! reads few prompt tokens; a brake forced during three streams waits for
//! them, then respawns, cutting none; no reap while any slot is busy; the
//! child killed during four streams gives four coded errors and the next
//! turn is served; SIGKILL of the warden mid-stream leaves no child.

#![allow(clippy::await_holding_lock)] // SERIAL's guard spans each test

use crate::support;

use std::time::Duration;

use futures::future::join_all;
use llm_warden::law::brake::Level;
use llm_warden::status::{Route, WardenEvent};
use llm_warden::{TurnOptions, TurnRequest, WardenConfig};
use serde_json::{Value, json};
use support::pressure::Script;
use support::*;

/// One test at a time: each runs four streams flat out on the 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Four questions, one per conversation.
const QUESTIONS: [&str; 4] = [
    "Name three colours of the rainbow.",
    "What is the capital of France?",
    "Count from one to ten in words.",
    "Write one sentence about the sea.",
];

/// A greedy streamed chat turn of `conversation` asking `question`.
fn ask(conversation: &str, question: &str, max_tokens: u32) -> TurnRequest {
    let body = json!({
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 7,
    });
    TurnRequest::new(Route::Chat, body.as_object().unwrap().clone())
        .stream(true)
        .options(TurnOptions {
            stateful: true,
            announce_idle_reload: false,
        })
        .conversation(Some(conversation.into()))
}

fn slots_cfg(kv: &std::path::Path) -> WardenConfig {
    WardenConfig {
        kv_save_dir: Some(kv.to_path_buf()),
        request_timeout: Duration::from_secs(600),
        ..test_config()
    }
}

/// Four streams at once overlap in time (every one streamed before any
/// ended) and each answers its own question: its answer begins as the
/// same request's answer alone does, more than it begins as any other
/// question's. Not that it equals it: llama.cpp's batched arithmetic sums
/// in another order when a batch holds several sequences, so a greedy
/// answer may part from the lone one after some tokens. Measured on
/// b10883 without the warden (`scripts/measure_batched_greedy.py`): 10 of
/// 20 batched answers equal to alone; through the warden here, printed as
/// `SLOTS greedy answers equal to alone`.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn four_streams_overlap_and_each_answers_its_own_question() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let (w, _dir) = real_smollm_warden(slots_cfg(kv.path()));
    let s = load_default(&w).await;
    assert_eq!(s.slots.len(), 4, "auto is four slots: {:?}", s.slots);
    let mut alone = Vec::new();
    for (i, q) in QUESTIONS.iter().enumerate() {
        let t = collect(w.submit(ask(&format!("alone-{i}"), q, 40)).unwrap()).await;
        assert!(t.done, "alone {i}: {t:?}");
        alone.push(t.text());
    }
    let rxs: Vec<_> = QUESTIONS
        .iter()
        .enumerate()
        .map(|(i, q)| w.submit(ask(&format!("together-{i}"), q, 40)).unwrap())
        .collect();
    let together = join_all(rxs.into_iter().map(collect_timed)).await;
    for (i, t) in together.iter().enumerate() {
        assert!(t.turn.done && t.turn.error.is_none(), "together {i}: {:?}", t.turn);
    }
    let last_first = together.iter().filter_map(|t| t.first).max().unwrap();
    let first_end = together.iter().map(|t| t.end).min().unwrap();
    assert!(
        last_first < first_end,
        "the four streams did not overlap: the last started {:?} after the first ended",
        last_first - first_end
    );
    let same = together
        .iter()
        .zip(&alone)
        .filter(|(t, a)| t.turn.text() == **a)
        .count();
    eprintln!("SLOTS greedy answers equal to alone: {same} of 4");
    let shared = |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    for (i, t) in together.iter().enumerate() {
        let text = t.turn.text();
        let own = shared(&text, &alone[i]);
        for (j, other) in alone.iter().enumerate().filter(|(j, _)| *j != i) {
            assert!(
                own > shared(&text, other),
                "conversation {i} answered like question {j}: {text:?} (alone: {:?})",
                alone[i]
            );
        }
    }
    w.shutdown().await;
}

/// Prompt tokens the child processed for this turn, and the ones it reused.
fn processed(v: &Value) -> (u64, u64) {
    (
        v["timings"]["prompt_n"].as_u64().unwrap(),
        v["timings"]["cache_n"].as_u64().unwrap(),
    )
}

/// Four conversations fill the four slots; a fifth takes the least
/// recently used one's slot, whose cache goes to disk; when that one
/// returns it is restored and reads only its new message.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_fifth_conversation_sends_the_oldest_to_disk_and_its_return_reads_few() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let (w, _dir) = real_smollm_warden(slots_cfg(kv.path()));
    let base = serve_http(&w);
    let opening = |i: usize| {
        vec![
            json!({"role": "user", "content": format!("{}\nConversation {i}: which number follows 7?", long_text(40))}),
        ]
    };
    let mut first = Vec::new();
    for i in 0..5 {
        first.push(conversation_turn(&base, &format!("conv-{i}"), &opening(i), 8, json!({})).await);
    }
    let st = w.status();
    let held: Vec<_> = st.slots.iter().filter_map(|s| s.conversation.clone()).collect();
    assert_eq!(st.slots.len(), 4);
    assert!(!held.iter().any(|c| c.contains("conv-0")) || held.len() < 5, "{held:?}");
    assert!(
        st.kv_saves.as_ref().is_some_and(|k| k.count >= 1),
        "the least recently used conversation went to disk: {:?}",
        st.kv_saves
    );
    let mut next = opening(0);
    next.push(answer(&first[0]));
    next.push(json!({"role": "user", "content": "And which follows 8?"}));
    let back = conversation_turn(&base, "conv-0", &next, 8, json!({})).await;
    let (n, cached) = processed(&back);
    assert!(
        n < 64 && cached > 700,
        "the returning conversation was restored: processed {n}, reused {cached}"
    );
    eprintln!("SLOTS fifth conversation: the first came back reading {n} tokens, reusing {cached}");
    w.shutdown().await;
}

/// Critical pressure at the first of three streams' ends: the respawn
/// waits for the other two (each ends whole), a turn sent meanwhile waits
/// and is served by the new child, at half the window.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_brake_during_three_streams_waits_for_them_and_cuts_none() {
    let _one = serial();
    let (server, model) = (real_llama_server(), real_model(SMOLLM2));
    let dir = real_smollm_dir(&model);
    let script = Script::default();
    let w = TestWarden::real_cpu(server, dir.path())
        // 1 GiB of RAM: SmolLM2's KV is then a share of it the brake calls
        // its own (`law::brake::not_ours`), so critical pressure shrinks.
        .config(WardenConfig {
            ram_override_bytes: Some(1 << 30),
            ..test_config()
        })
        .sensor(script.clone())
        .start();
    let s = load_default(&w).await;
    let window = s.context_tokens.unwrap();
    let pid = s.child_pid.unwrap();
    let mut ev = w.subscribe();
    // Three turn starts calm; the first turn end critical.
    for _ in 0..3 {
        script.push(Level::Calm, false);
    }
    script.push(Level::Critical, true);
    let lens = [8u32, 96, 128];
    let rxs: Vec<_> = lens
        .iter()
        .enumerate()
        .map(|(i, n)| w.submit(ask(&format!("brake-{i}"), QUESTIONS[i], *n)).unwrap())
        .collect();
    let ends = join_all(rxs.into_iter().map(collect_timed));
    let ends = actix_rt::spawn(ends);
    // Once the first ended the brake holds its respawn: a new turn waits.
    event_or_fail(&mut ev, "the first turn's end", |e| {
        matches!(e, WardenEvent::TurnEnded { .. })
    })
    .await;
    let late = w.submit(ask("brake-late", QUESTIONS[3], 8)).unwrap();
    let streams = ends.await.unwrap();
    for (i, t) in streams.iter().enumerate() {
        assert!(
            t.turn.done && t.turn.error.is_none(),
            "stream {i} was cut: {:?}",
            t.turn
        );
    }
    let late = collect(late).await;
    assert!(late.done, "{late:?}");
    let s = w.status();
    assert_ne!(s.child_pid, Some(pid), "respawned");
    assert!(
        s.context_tokens.unwrap() < window,
        "shrunk: {window} -> {:?}",
        s.context_tokens
    );
    w.shutdown().await;
}

/// The idle reap leaves a model while any slot is busy, and reaps it once
/// none is.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn no_reap_while_any_slot_is_busy() {
    let _one = serial();
    let (w, _dir) = real_smollm_warden(WardenConfig {
        idle_timeout: Duration::ZERO,
        ..test_config()
    });
    load_default(&w).await;
    let mut ev = w.subscribe();
    let short = w.submit(ask("reap-short", QUESTIONS[0], 8)).unwrap();
    let mut long = w.submit(ask("reap-long", QUESTIONS[2], 160)).unwrap();
    let short = collect(short).await;
    assert!(short.done, "{short:?}");
    // The long one still streams.
    first_chunk(&mut long).await;
    w.queue_reap();
    let e = event_or_fail(&mut ev, "the reap check", |e| {
        matches!(e, WardenEvent::ReapChecked { .. })
    })
    .await;
    assert_eq!(e, WardenEvent::ReapChecked { reaped: false }, "reaped with a slot busy");
    let long = collect(long).await;
    assert!(long.done && long.error.is_none(), "{long:?}");
    w.queue_reap();
    let e = event_or_fail(&mut ev, "the reap after", |e| {
        matches!(e, WardenEvent::ReapChecked { .. })
    })
    .await;
    assert_eq!(e, WardenEvent::ReapChecked { reaped: true });
    w.shutdown().await;
}

/// SIGKILL of the child under four streams: each of the four goes on on
/// the next child (one respawn for all) and ends whole, as long as it was
/// asked to be; the next turn is served.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn the_child_killed_under_four_streams_resumes_all_four() {
    let _one = serial();
    let (w, _dir) = real_smollm_warden(test_config());
    load_default(&w).await;
    let mut ev = w.subscribe();
    let mut rxs: Vec<_> = (0..4)
        .map(|i| {
            let mut req = ask(&format!("kill-{i}"), QUESTIONS[i], 120);
            // why: every answer runs its full length, so all four are in
            // flight at the kill and their lengths can be checked
            req.body.insert("ignore_eos".into(), json!(true));
            req.body.insert("stream_options".into(), json!({"include_usage": true}));
            w.submit(req).unwrap()
        })
        .collect();
    for rx in &mut rxs {
        first_chunk(rx).await;
    }
    assert_eq!(w.status().slots.iter().filter(|s| s.busy).count(), 4);
    let pid = w.status().child_pid.unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let ends = join_all(rxs.into_iter().map(collect)).await;
    for (i, t) in ends.iter().enumerate() {
        assert!(t.done && t.error.is_none(), "stream {i}: {t:?}");
        let tokens = t
            .chunks
            .iter()
            .filter_map(|c| {
                let s = String::from_utf8_lossy(c).into_owned();
                s.lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                    .find_map(|v| v.pointer("/usage/completion_tokens").and_then(|n| n.as_u64()))
            })
            .last();
        assert_eq!(tokens, Some(120), "stream {i}: the whole answer counted");
    }
    let mut resumed = 0;
    let mut exits = 0;
    while let Ok(e) = ev.try_recv() {
        resumed += usize::from(matches!(e, WardenEvent::TurnResumed { how: "continued", .. }));
        exits += usize::from(matches!(e, WardenEvent::ChildExited { .. }));
    }
    assert_eq!((resumed, exits), (4, 1), "four resumed over one death");
    assert!(!alive(pid));
    let next = collect(w.submit(ask("kill-after", QUESTIONS[0], 4)).unwrap()).await;
    assert!(next.done, "{next:?}");
    w.shutdown().await;
}

/// SIGKILL of the warden while four streams run: its child goes with it.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn sigkill_of_the_warden_under_four_streams_leaves_no_child() {
    let _one = serial();
    real_llama_server();
    real_model(SMOLLM2);
    let (mut warden, base) = spawn_warden_binary(&[]).await;
    let http = llm_warden::child::client::shared_http_client();
    let s: Value = json_of(http.post(format!("{base}/warden/load"))).await;
    let pid = s["child_pid"].as_u64().unwrap() as u32;
    let mut streams = Vec::new();
    for q in QUESTIONS {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": q}], "max_tokens": 400, "stream": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        streams.push(r);
    }
    // Each has streamed: four turns run at once.
    let mut bodies: Vec<_> = streams.into_iter().map(|r| r.bytes_stream()).collect();
    for b in &mut bodies {
        use futures::StreamExt;
        let first = tokio::time::timeout(Duration::from_secs(60), b.next()).await;
        assert!(matches!(first, Ok(Some(Ok(_)))), "a stream never started: {first:?}");
    }
    let st: Value = json_of(http.get(format!("{base}/warden/status"))).await;
    let busy = st["slots"]
        .as_array()
        .map_or(0, |s| s.iter().filter(|x| x["busy"] == true).count());
    assert_eq!(busy, 4, "{st}");
    let wpid = nix::unistd::Pid::from_raw(warden.id().unwrap() as i32);
    nix::sys::signal::kill(wpid, nix::sys::signal::Signal::SIGKILL).unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(20), warden.wait()).await;
    assert!(wait_gone(pid, 10).await, "llama-server {pid} outlived its warden");
    drop(bodies);
}
