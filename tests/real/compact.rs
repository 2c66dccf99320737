//! The shared KV pool kept compact, on the real llama-server with
//! SmolLM2 over 4 slots and one pool: one person's conversations one after
//! another leave nothing in the pool beside the next one's stream (each
//! moved to disk when the next begins, before its prompt is placed), and
//! each comes back reading only its new message; four clients at once,
//! each with a conversation of several turns, are answered in full and
//! come back cheaply whether the law kept their cells or moved them.

#![allow(clippy::await_holding_lock)] // SERIAL's guard spans each test

use crate::support;

use std::time::Duration;

use futures::future::join_all;
use llm_warden::WardenConfig;
use llm_warden::status::WardenEvent;
use serde_json::{Value, json};
use support::*;

/// One test at a time: each runs SmolLM2 flat out on the 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn cfg(kv: &std::path::Path) -> WardenConfig {
    WardenConfig {
        kv_save_dir: Some(kv.to_path_buf()),
        request_timeout: Duration::from_secs(600),
        ..test_config()
    }
}

/// The first message of conversation `i`: its own name first (so no two
/// begin alike and none takes another's slot for a shared beginning), then
/// about `facts * 19` tokens.
fn opening(i: usize, facts: usize) -> Vec<Value> {
    vec![
        json!({"role": "user", "content": format!("Conversation {i}.\n{}\nWhich number follows 7?", long_text(facts))}),
    ]
}

/// Prompt tokens the child processed for this turn, and the ones it reused.
fn processed(v: &Value) -> (u64, u64) {
    (
        v["timings"]["prompt_n"].as_u64().unwrap(),
        v["timings"]["cache_n"].as_u64().unwrap(),
    )
}

/// The conversations a compaction moved, in the order the events came.
fn moved(events: &mut tokio::sync::broadcast::Receiver<WardenEvent>) -> Vec<String> {
    use tokio::sync::broadcast::error::TryRecvError;
    let mut out = Vec::new();
    loop {
        match events.try_recv() {
            Ok(WardenEvent::PoolCompacted { conversation, .. }) => out.push(conversation),
            Ok(_) => {}
            Err(TryRecvError::Lagged(n)) => panic!("{n} events lost: the count would be wrong"),
            Err(_) => return out,
        }
    }
}

/// Three conversations of ~2,000 tokens, one after another, then a lone
/// stream: each conversation leaves the pool for the store when the next
/// turn begins (its answers run 384 tokens: keeping its ~2,400 cells
/// would cost that turn several times what a move costs), so the lone
/// stream runs beside no held cell, its range its own. Then each comes
/// back reading only its new message, its cells restored.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_lone_stream_runs_beside_no_held_conversation_and_each_returns_reading_few() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let (w, _dir) = real_smollm_warden(cfg(kv.path()));
    let base = serve_http(&w);
    let mut events = w.subscribe();
    let long = json!({"ignore_eos": true});
    let mut first = Vec::new();
    for i in 0..3 {
        first.push(conversation_turn(&base, &format!("conv-{i}"), &opening(i, 105), 384, long.clone()).await);
    }
    let lone = [json!({"role": "user", "content": "Write a long story about a lighthouse keeper."})];
    let story = conversation_turn(&base, "lone", &lone, 512, long).await;
    assert_eq!(story["usage"]["completion_tokens"], 512, "{story}");
    let order = moved(&mut events);
    let names: Vec<bool> = (0..3)
        .map(|i| order.iter().filter(|c| c.contains(&format!("conv-{i}"))).count() == 1)
        .collect();
    assert_eq!(
        names, [true; 3],
        "each conversation moved to disk once before the lone stream: {order:?}"
    );
    let st = w.status();
    let beside: Vec<_> = st
        .slots
        .iter()
        .filter(|s| !s.conversation.as_deref().is_some_and(|c| c.contains("lone")))
        .map(|s| (s.id, s.tokens))
        .collect();
    assert!(
        beside.iter().all(|&(_, t)| t == 0),
        "no cell is held beside the lone stream's own: {beside:?}"
    );
    let pool = st.pool.clone().expect("a live child has a pool");
    assert_eq!(pool.moved, 3, "{pool:?}");
    assert!(pool.moved_cells > 6000, "{pool:?}");
    for (i, f) in first.iter().enumerate() {
        let mut next = opening(i, 105);
        next.push(answer(f));
        next.push(json!({"role": "user", "content": "And which follows 8?"}));
        let back = conversation_turn(&base, &format!("conv-{i}"), &next, 8, json!({})).await;
        let (n, cached) = processed(&back);
        assert!(
            n <= 64 && cached > 2000,
            "conversation {i} came back restored: processed {n}, reused {cached}"
        );
        eprintln!("COMPACT conversation {i} came back reading {n} tokens, reusing {cached}");
    }
    w.shutdown().await;
}

/// One person's conversation, then a pause past the save ahead's delay:
/// its KV is written while nobody waits; the next conversation's turn
/// moves it off the pool writing nothing (its save is not written again:
/// the same record, the same time) and takes its slot, reusing the cells
/// both prompts begin with (the chat template's opening); the held one
/// comes back from that save reading only its new message.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_pause_saves_the_conversation_ahead_and_the_next_one_writes_nothing() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let cfg = WardenConfig {
        kv_save_ahead: Duration::from_secs(1),
        ..cfg(kv.path())
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    let mut events = w.subscribe();
    let long = json!({"ignore_eos": true});
    let first = conversation_turn(&base, "conv-0", &opening(0, 105), 384, long.clone()).await;
    // The save ahead, waited for as a state (bounded), not as a time.
    let record = |w: &llm_warden::Warden| {
        w.status()
            .kv_saves
            .and_then(|v| v.saves.into_iter().find(|s| s.conversation.contains("conv-0")))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let ahead = loop {
        if let Some(r) = record(&w) {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "no save ahead within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(ahead.tokens > 2000, "the whole conversation: {ahead:?}");
    assert!(moved(&mut events).is_empty(), "saved ahead, not moved yet");
    let lone = [json!({"role": "user", "content": "Write a long story about a lighthouse keeper."})];
    let story = conversation_turn(&base, "lone", &lone, 384, long).await;
    assert_eq!(story["usage"]["completion_tokens"], 384, "{story}");
    let (_, reused) = processed(&story);
    assert!(
        reused > 0,
        "it took the moved one's slot and reused their common beginning: {story}"
    );
    let order = moved(&mut events);
    assert!(
        order.len() == 1 && order[0].contains("conv-0"),
        "the held conversation left the pool before the stream: {order:?}"
    );
    let after = record(&w).expect("its save stays");
    assert_eq!(
        (after.saved_at_ms, after.tokens),
        (ahead.saved_at_ms, ahead.tokens),
        "its move wrote nothing: the save ahead is the one kept"
    );
    let mut next = opening(0, 105);
    next.push(answer(&first));
    next.push(json!({"role": "user", "content": "And which follows 8?"}));
    let back = conversation_turn(&base, "conv-0", &next, 8, json!({})).await;
    let (n, cached) = processed(&back);
    assert!(
        n <= 64 && cached > 2000,
        "it came back from the save ahead: processed {n}, reused {cached}"
    );
    w.shutdown().await;
}

/// Four clients at once, each a conversation of ~1,000 tokens and three
/// turns back to back: every turn is answered in full, and every return
/// reads only its new message, whether its cells stayed in the pool while
/// the others decoded or were moved to disk and restored. Nothing is moved
/// from under a running turn, and nothing held is lost.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn four_clients_at_once_keep_every_conversation_and_return_cheaply() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let (w, _dir) = real_smollm_warden(cfg(kv.path()));
    let base = serve_http(&w);
    let mut events = w.subscribe();
    let client = |i: usize| {
        let base = base.clone();
        async move {
            let name = format!("client-{i}");
            let mut history = opening(i, 52);
            let mut returns = Vec::new();
            for turn in 0..3 {
                let v = conversation_turn(&base, &name, &history, 64, json!({"ignore_eos": true})).await;
                assert_eq!(v["usage"]["completion_tokens"], 64, "client {i} turn {turn}: {v}");
                if turn > 0 {
                    returns.push(processed(&v));
                }
                history.push(answer(&v));
                history.push(json!({"role": "user", "content": format!("And which follows {}?", 8 + turn)}));
            }
            returns
        }
    };
    let all = join_all((0..4).map(client)).await;
    for (i, returns) in all.iter().enumerate() {
        for &(n, cached) in returns {
            assert!(
                n <= 64 && cached > 900,
                "client {i} came back cheaply: processed {n}, reused {cached} ({returns:?})"
            );
        }
    }
    let order = moved(&mut events);
    eprintln!("COMPACT four clients: {} move(s) to disk: {order:?}", order.len());
    w.shutdown().await;
}
