//! Conversations surviving the warden's own interruptions, against the real
//! llama-server and SmolLM2 over HTTP: a ~3,000-token conversation unloaded
//! after a turn and continued answers exactly as an uninterrupted run and
//! re-reads only the new message (the child's own `timings`: `prompt_n`
//! processed, `cache_n` reused); two conversations taking turns keep their
//! reuse; across a brake respawn a save that fits the new window is
//! restored and one that does not is dropped, the turn answered anyway; a
//! corrupt and a truncated save are refused cleanly; the cap evicts;
//! `WARDEN_KV_SAVE=0` turns it all off.

#![allow(clippy::await_holding_lock)] // SERIAL's guard spans each test

use crate::support;

use std::path::Path;

use llm_warden::{Warden, WardenConfig};
use serde_json::{Value, json};
use support::*;

/// One test at a time: each reads thousands of prompt tokens, and two
/// llama-servers doing that at once on a small machine only slow both.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A greedy turn of at most 16 tokens (`support::conversation_turn`).
async fn turn(base: &str, conversation: &str, messages: &[Value], extra: Value) -> Value {
    conversation_turn(base, conversation, messages, 16, extra).await
}

/// Prompt tokens the child processed for this turn, and the ones it reused.
fn processed(v: &Value) -> (u64, u64) {
    (
        v["timings"]["prompt_n"].as_u64().unwrap(),
        v["timings"]["cache_n"].as_u64().unwrap(),
    )
}

fn kv_cfg(dir: &Path) -> WardenConfig {
    WardenConfig {
        kv_save_dir: Some(dir.to_path_buf()),
        // A whole answer here reads up to ~4,500 prompt tokens: about 90 s
        // on 2 quiet cores, past test_config's 120 s bound when other
        // llama-servers share them. The bound is the warden's watchdog, not
        // what is tested.
        request_timeout: std::time::Duration::from_secs(600),
        // One slot: a restore's greedy answer is then bit-exact (over
        // several slots in one pool a restored conversation's cells may sit
        // in another order, and a near-tie can flip a late token).
        parallel: llm_warden::config::Parallel::Fixed(1),
        ..test_config()
    }
}

/// Waits for the unload a `keep_alive: 0` turn does after its answer.
async fn unloaded(ev: &mut tokio::sync::broadcast::Receiver<llm_warden::status::WardenEvent>) {
    event_or_fail(ev, "the unload after a keep_alive 0 turn", |e| {
        matches!(
            e,
            llm_warden::status::WardenEvent::Unloaded {
                reason: llm_warden::status::UnloadReason::Idle,
                ..
            }
        )
    })
    .await;
}

fn saves(w: &Warden) -> usize {
    w.status().kv_saves.map_or(0, |k| k.count)
}

/// A ~3,000-token conversation unloaded after a turn answers as if
/// uninterrupted and re-reads only the new message.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn an_unloaded_conversation_continues_from_its_saved_cache() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let (w, _dir) = real_smollm_warden(kv_cfg(kv.path()));
    let base = serve_http(&w);
    let opening = vec![
        json!({"role": "system", "content": "You are terse."}),
        json!({"role": "user", "content": format!("{}\nWhich number follows 41?", long_text(160))}),
    ];
    // Uninterrupted: two turns on one child.
    let r1 = turn(&base, "reference", &opening, json!({})).await;
    let prompt_tokens = r1["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        (2800..3400).contains(&prompt_tokens),
        "about 3,000 tokens: {prompt_tokens}"
    );
    let mut next = opening.clone();
    next.push(answer(&r1));
    next.push(json!({"role": "user", "content": "And which follows 99?"}));
    let reference = turn(&base, "reference", &next, json!({})).await;

    // Interrupted: the same conversation under another key, unloaded after
    // its first turn (keep_alive 0), then continued on a new child.
    let mut ev = w.subscribe();
    let k1 = turn(&base, "kept", &opening, json!({"keep_alive": 0})).await;
    assert_eq!(answer(&k1), answer(&r1));
    unloaded(&mut ev).await;
    let st = w.status();
    assert_eq!(st.model, None, "unloaded after the turn");
    assert!(saves(&w) >= 1, "the conversation was saved: {:?}", st.kv_saves);
    let k2 = turn(&base, "kept", &next, json!({})).await;
    assert_eq!(
        answer(&k2),
        answer(&reference),
        "greedy: the same answer as without the unload"
    );
    let (n, cached) = processed(&k2);
    assert!(
        n < 64 && cached > 2800,
        "only the new message was read: processed {n}, reused {cached}"
    );
    let (n_ref, _) = processed(&reference);
    eprintln!("after the unload: processed {n} (uninterrupted: {n_ref}), reused {cached}");
    w.shutdown().await;
}

/// Two conversations taking turns each come back to their cache: over
/// several slots each keeps its own and nothing is saved; over one slot
/// each is saved when the other takes it, and a cap that holds one save
/// evicts the older.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn two_conversations_taking_turns_keep_their_reuse_and_the_cap_evicts() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let (w, _dir) = real_smollm_warden(WardenConfig {
        parallel: llm_warden::config::Parallel::Auto,
        ..kv_cfg(kv.path())
    });
    let base = serve_http(&w);
    let open =
        |topic: &str| vec![json!({"role": "user", "content": format!("{topic}. {}\nSay one word.", long_text(30))})];
    let (a, b) = (open("Apples"), open("Boats"));
    let a1 = turn(&base, "a", &a, json!({})).await;
    let b1 = turn(&base, "b", &b, json!({})).await;
    let more = |mut m: Vec<Value>, first: &Value| {
        m.push(answer(first));
        m.push(json!({"role": "user", "content": "Another word."}));
        m
    };
    let a2 = turn(&base, "a", &more(a.clone(), &a1), json!({})).await;
    let (n, cached) = processed(&a2);
    assert!(
        n < 32 && cached > 500,
        "a came back to its cache: processed {n}, reused {cached}"
    );
    let b2 = turn(&base, "b", &more(b.clone(), &b1), json!({})).await;
    let (n, cached) = processed(&b2);
    assert!(
        n < 32 && cached > 500,
        "b came back to its cache: processed {n}, reused {cached}"
    );
    assert_eq!(saves(&w), 0, "each conversation kept its own slot");
    w.shutdown().await;

    // One slot: the two take it in turns, each saved when the other comes.
    let kv = tempfile::tempdir().unwrap();
    let one = kv_cfg(kv.path());
    let (w, _dir) = real_smollm_warden(one.clone());
    let base = serve_http(&w);
    turn(&base, "a", &a, json!({})).await;
    turn(&base, "b", &b, json!({})).await;
    let a2 = turn(&base, "a", &more(a.clone(), &a1), json!({})).await;
    let (n, cached) = processed(&a2);
    assert!(n < 32 && cached > 500, "a was restored: processed {n}, reused {cached}");
    assert_eq!(saves(&w), 2);
    w.shutdown().await;

    // A cap that holds one save: the second evicts the first, whose
    // conversation is then re-read in full.
    let kv = tempfile::tempdir().unwrap();
    let cfg = WardenConfig {
        kv_save_max_bytes: Some(20 << 20),
        kv_save_dir: Some(kv.path().to_path_buf()),
        ..one
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    turn(&base, "a", &a, json!({})).await;
    turn(&base, "b", &b, json!({})).await;
    // Saving b (when a takes the slot back) pushes the store past the cap:
    // a's older save goes, so a is read in full.
    let a2 = turn(&base, "a", &more(a.clone(), &a1), json!({})).await;
    assert!(processed(&a2).0 > 500, "a's save was evicted: {:?}", processed(&a2));
    let view = w.status().kv_saves.unwrap();
    assert_eq!(view.count, 1, "{view:?}");
    assert_eq!(view.saves[0].conversation, "b", "the newest save stays");
    assert!(view.bytes <= view.cap_bytes);
    w.shutdown().await;
}

/// Across a brake respawn, a save that fits the new window is restored and one
/// that does not is dropped, the turn answered anyway.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_brake_respawn_restores_what_fits_and_drops_what_does_not() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let cfg = forced_critical(kv_cfg(kv.path()));
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    // Q: ~4,500 tokens in the memory-bound 6,400 window; the brake then
    // shrinks it to 4,096 at the turn's end, saving Q first.
    let q_open = vec![
        json!({"role": "user", "content": "Keep this in mind."}),
        json!({"role": "assistant", "content": long_text(230)}),
        json!({"role": "user", "content": "Which number follows 7?"}),
    ];
    let q1 = turn(&base, "q", &q_open, json!({})).await;
    assert!(q1["usage"]["prompt_tokens"].as_u64().unwrap() > 4200);
    assert_eq!(w.status().context_tokens, Some(4096), "the brake shrank the window");
    assert_eq!(saves(&w), 1, "Q was saved before the respawn");
    // P: ~3,000 tokens, read in full in the 4,096 window.
    let p_open = vec![json!({"role": "user", "content": format!("{}\nWhich number follows 3?", long_text(150))})];
    let p1 = turn(&base, "p", &p_open, json!({})).await;
    // Q again, its history compacted (same opening, so the same
    // conversation): its 4,500-token save cannot fit 4,096 and is dropped;
    // the turn is answered from scratch.
    let q2_msgs = vec![
        q_open[0].clone(),
        json!({"role": "user", "content": "Which number follows 8?"}),
    ];
    let q2 = turn(&base, "q", &q2_msgs, json!({})).await;
    assert!(answer(&q2)["content"].is_string());
    // why: only the chat template's opening is shared with P's slot
    assert!(
        processed(&q2).1 < 100,
        "nothing of Q's old cache was used: {:?}",
        processed(&q2)
    );
    assert!(
        w.status().kv_saves.unwrap().saves.iter().all(|s| s.conversation != "q"),
        "the save that did not fit is gone"
    );
    assert_eq!(
        w.status().pool.map(|p| p.dropped),
        Some(1),
        "the status counts the save dropped for the window"
    );
    // P again: its save (made when Q took the slot) fits and is restored.
    let mut p_next = p_open.clone();
    p_next.push(answer(&p1));
    p_next.push(json!({"role": "user", "content": "And 4?"}));
    let p2 = turn(&base, "p", &p_next, json!({})).await;
    let (n, cached) = processed(&p2);
    assert!(
        n < 64 && cached > 2700,
        "P came back to its cache: processed {n}, reused {cached}"
    );
    w.shutdown().await;
}

/// A corrupt save (refused by llama-server) and a truncated one (refused by the
/// store) are read in full and removed.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn corrupt_and_truncated_saves_are_refused_cleanly() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let (w, _dir) = real_smollm_warden(kv_cfg(kv.path()));
    let base = serve_http(&w);
    let first = vec![json!({"role": "user", "content": format!("{}\nSay one word.", long_text(30))})];
    let mut ev = w.subscribe();
    let r1 = turn(&base, "c", &first, json!({"keep_alive": 0})).await;
    unloaded(&mut ev).await;
    let mut next = first.clone();
    next.push(answer(&r1));
    next.push(json!({"role": "user", "content": "Another word."}));
    let bin = || {
        std::fs::read_dir(kv.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "bin"))
            .expect("a saved cache")
    };
    // Corrupt: its header overwritten, size unchanged: llama-server refuses it.
    let path = bin();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[..64].fill(0xAB);
    std::fs::write(&path, &bytes).unwrap();
    let r2 = turn(&base, "c", &next, json!({"keep_alive": 0})).await;
    assert!(processed(&r2).0 > 500, "read in full: {:?}", processed(&r2));
    unloaded(&mut ev).await;
    assert!(answer(&r2)["content"].is_string());
    // Truncated: the store refuses it before the child sees it.
    let path = bin();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let r3 = turn(&base, "c", &next, json!({})).await;
    assert!(processed(&r3).0 > 500, "read in full: {:?}", processed(&r3));
    assert_eq!(answer(&r3), answer(&r2), "greedy: the same answer, cache or not");
    assert_eq!(saves(&w), 0, "both bad saves were removed");
    w.shutdown().await;
}

/// `WARDEN_KV_SAVE=0` saves nothing and shows no store.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn kv_save_off_saves_nothing() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let cfg = WardenConfig {
        kv_save: false,
        ..kv_cfg(kv.path())
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    let first = vec![json!({"role": "user", "content": format!("{}\nSay one word.", long_text(30))})];
    let mut ev = w.subscribe();
    turn(&base, "off", &first, json!({"keep_alive": 0})).await;
    unloaded(&mut ev).await;
    assert!(w.status().kv_saves.is_none());
    assert_eq!(std::fs::read_dir(kv.path()).unwrap().count(), 0);
    w.shutdown().await;
}
