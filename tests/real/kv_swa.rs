//! Conversations that survive the warden's interruptions on every model
//! shape, against the real llama-server: Gemma 3 270M (sliding window) is
//! run with `--swa-full`, and after an idle reap, a switch to another
//! conversation and a manual unload its next turn answers exactly as an
//! uninterrupted run and re-reads only the new message (the child's own
//! `prompt_n`); a recurrent model (a tiny Mamba written by
//! `scripts/gen_mamba_model.py`) is said not to be kept, and nothing is
//! saved for it; a restore the child does not reuse is one WARNING.

#![allow(clippy::await_holding_lock)] // SERIAL's guard spans each test

use crate::support;

use std::path::Path;

use llm_warden::law::kv_keep::REUSE_SLACK_TOKENS;
use llm_warden::{Warden, WardenConfig};
use serde_json::{Value, json};
use support::*;

/// One test at a time: each reads a long prompt on a small machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A greedy turn of at most 12 tokens (`support::conversation_turn`).
async fn turn(base: &str, conversation: &str, messages: &[Value], extra: Value) -> Value {
    conversation_turn(base, conversation, messages, 12, extra).await
}

/// Prompt tokens the child processed for this turn.
fn processed(v: &Value) -> u64 {
    v["timings"]["prompt_n"].as_u64().unwrap()
}

/// A warden over the real llama-server with `file` (a model of the build
/// cache, or a path) as its only and default model `m`.
fn real_warden(model: &Path, kv: &Path) -> (Warden, tempfile::TempDir) {
    let server = real_llama_server();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(model, dir.path().join("m.gguf")).unwrap();
    // One slot: a restore's greedy answer is then bit-exact. Over several
    // slots in one pool a restored conversation's cells may sit in another
    // order among the others', and a tiny model's near-tie can flip a late
    // token (llama.cpp sums attention over the cells in their order).
    let cfg = WardenConfig {
        kv_save_dir: Some(kv.to_path_buf()),
        parallel: llm_warden::config::Parallel::Fixed(1),
        models: gemma_chat_models(&["m"]),
        ..test_config()
    };
    let w = TestWarden::real_cpu(server, dir.path())
        .default_model("m")
        .config(cfg)
        .start();
    (w, dir)
}

/// The live child's command line.
fn child_argv(w: &Warden) -> Vec<String> {
    let pid = w.status().child_pid.expect("a child runs");
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap()
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

async fn unloaded(ev: &mut tokio::sync::broadcast::Receiver<llm_warden::status::WardenEvent>, reason: &str) {
    event_or_fail(
        ev,
        "the unload",
        |e| matches!(e, llm_warden::status::WardenEvent::Unloaded { reason: r, .. } if *r == reason),
    )
    .await;
}

/// The same conversation's next turn after each interruption answers as
/// the uninterrupted run and processes at most its prompt tokens plus the
/// slack: a reap (`keep_alive: 0`), another conversation's turn, a manual
/// unload.
#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn a_sliding_window_conversation_survives_a_reap_a_switch_and_an_unload() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let gemma = real_model(GEMMA3);
    let (w, _dir) = real_warden(&gemma, kv.path());
    let base = serve_http(&w);
    let opening = vec![
        json!({"role": "system", "content": "You are terse."}),
        json!({"role": "user", "content": format!("{}\nWhich number follows 41?", long_text(90))}),
    ];
    let follow = ["And which follows 99?", "And 12?", "And 60?"];
    // Uninterrupted: every turn on one child, one conversation.
    let mut msgs = opening.clone();
    let r1 = turn(&base, "reference", &msgs, json!({})).await;
    let first_read = r1["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(first_read > 1400, "well past the 1024-cell sliding cache: {first_read}");
    let st = w.status();
    let keep = st.kv_keep.expect("a model is loaded");
    assert_eq!((keep.kept, keep.how), (true, "swa_full"), "{keep:?}");
    assert!(child_argv(&w).iter().any(|a| a == "--swa-full"), "{:?}", child_argv(&w));
    let mut reference = vec![r1.clone()];
    for q in follow {
        msgs.push(answer(reference.last().unwrap()));
        msgs.push(json!({"role": "user", "content": q}));
        reference.push(turn(&base, "reference", &msgs, json!({})).await);
    }

    // Interrupted: the same conversation under another key.
    let mut ev = w.subscribe();
    let mut msgs = opening.clone();
    let k1 = turn(&base, "kept", &msgs, json!({"keep_alive": 0})).await;
    assert_eq!(answer(&k1), answer(&r1));
    unloaded(&mut ev, "idle").await;
    let next = |msgs: &mut Vec<Value>, i: usize| {
        msgs.push(answer(&reference[i - 1]));
        msgs.push(json!({"role": "user", "content": follow[i - 1]}));
    };
    let check = |i: usize, got: &Value, after: &str| {
        assert_eq!(
            answer(got),
            answer(&reference[i]),
            "greedy: after {after}, the answer of the uninterrupted run"
        );
        let (n, n_ref) = (processed(got), processed(&reference[i]));
        eprintln!("after {after}: processed {n} prompt tokens (uninterrupted: {n_ref})");
        assert!(
            n <= n_ref + u64::from(REUSE_SLACK_TOKENS),
            "after {after}: processed {n}, uninterrupted {n_ref}"
        );
    };
    // 1. After the idle reap.
    next(&mut msgs, 1);
    check(1, &turn(&base, "kept", &msgs, json!({})).await, "an idle reap");
    // 2. After another conversation took the slot.
    turn(
        &base,
        "other",
        &[json!({"role": "user", "content": "Say hi."})],
        json!({}),
    )
    .await;
    next(&mut msgs, 2);
    check(2, &turn(&base, "kept", &msgs, json!({})).await, "a switch");
    // 3. After a manual unload.
    w.unload().await.unwrap();
    unloaded(&mut ev, "request").await;
    next(&mut msgs, 3);
    check(3, &turn(&base, "kept", &msgs, json!({})).await, "an unload");
    w.shutdown().await;
}

/// Across a brake respawn (forced critical pressure on a window whose KV is
/// the pressure's cause: with `--swa-full` Gemma's KV is the full formula
/// like any model's), the restored conversation re-reads only the new
/// message.
#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn a_sliding_window_conversation_survives_a_brake_respawn() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let gemma = real_model(GEMMA3);
    let server = real_llama_server();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&gemma, dir.path().join("m.gguf")).unwrap();
    // 2 GiB standing in for the machine's RAM: the full-size sliding cache
    // fits the trained 32,768 (so the plan keeps it, and the conversation
    // is kept), its 576 MiB of KV is over a tenth of the RAM (so the brake
    // calls the pressure its own), and the brake can halve the window. At
    // 1 GiB the plan would choose the small cache instead (the test below).
    let cfg = WardenConfig {
        ram_override_bytes: Some(2 << 30),
        models: gemma_chat_models(&["m"]),
        ..forced_critical(WardenConfig {
            kv_save_dir: Some(kv.path().to_path_buf()),
            ..test_config()
        })
    };
    let w = TestWarden::real_cpu(server, dir.path())
        .default_model("m")
        .config(cfg)
        .start();
    let base = serve_http(&w);
    let mut msgs = vec![json!({"role": "user", "content": format!("{}\nWhich number follows 41?", long_text(90))})];
    let first = turn(&base, "braked", &msgs, json!({})).await;
    let bound = w.status().memory_bound_tokens;
    let window = w.status().context_tokens;
    assert!(
        w.status().brake.last_action.is_some(),
        "the brake acted at the turn's end (window {window:?}, memory bound {bound:?}): {:?}",
        w.status().brake
    );
    assert!(
        w.status().kv_saves.is_some_and(|k| k.count >= 1),
        "saved before the respawn"
    );
    msgs.push(answer(&first));
    msgs.push(json!({"role": "user", "content": "And which follows 99?"}));
    let second = turn(&base, "braked", &msgs, json!({})).await;
    let n = processed(&second);
    eprintln!("after the brake (window {window:?}, memory bound {bound:?}): processed {n}");
    // why: the uninterrupted run of this shape processes 36 (the test above)
    assert!(
        n <= 36 + u64::from(REUSE_SLACK_TOKENS),
        "processed {n} after the brake respawn"
    );
    w.shutdown().await;
}

/// A recurrent model's cache cannot be used again: the status says so with
/// its reason, its child gets no slot directory, and an unload saves nothing.
#[actix_rt::test]
#[ignore = "needs the real llama-server and the Python clients (gguf-py: ./build-llama.sh clients); ./test.sh runs it"]
async fn a_recurrent_model_is_said_not_kept_and_nothing_is_saved() {
    let _one = serial();
    let py = client_python();
    let made = tempfile::tempdir().unwrap();
    let mamba = made.path().join("mamba.gguf");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gen_mamba_model.py");
    let out = std::process::Command::new(&py)
        .arg(&script)
        .arg(&mamba)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    capture_log();
    let kv = tempfile::tempdir().unwrap();
    let (w, _dir) = real_warden(&mamba, kv.path());
    let base = serve_http(&w);
    let mut ev = w.subscribe();
    // Long enough to be worth saving (one token per byte here).
    let long = vec![json!({"role": "user", "content": long_text(20)})];
    let r = turn(&base, "m", &long, json!({"keep_alive": 0, "max_tokens": 4})).await;
    assert!(r["usage"]["prompt_tokens"].as_u64().unwrap() > 400, "{r}");
    unloaded(&mut ev, "idle").await;
    assert_eq!(std::fs::read_dir(kv.path()).unwrap().count(), 0, "nothing saved");
    // Loaded again: what the status says, and the child's argv.
    turn(&base, "m", &long, json!({"max_tokens": 1})).await;
    let keep = w.status().kv_keep.expect("a model is loaded");
    assert!(!keep.kept);
    assert_eq!(keep.how, "recurrent");
    assert!(keep.reason.unwrap().contains("recurrent"), "{keep:?}");
    assert!(
        !child_argv(&w)
            .iter()
            .any(|a| a == "--slot-save-path" || a == "--swa-full")
    );
    // The wire says the same.
    let s: Value = reqwest::get(format!("{base}/warden/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(s["kv_keep"]["kept"], false, "{s}");
    // And the log, once per load (two loads here; the log is the test
    // binary's, so only the recurrent model's lines count).
    let said = captured_log()
        .lines()
        .filter(|l| l.contains("conversations on this model are not kept across reloads") && l.contains("recurrent"))
        .count();
    assert_eq!(said, 2, "{}", captured_log());
    w.shutdown().await;
}

/// A restore the child does not reuse (here a history edited after its
/// first sentence, same conversation key) is one WARNING naming the
/// conversation, the tokens restored, the tokens re-read and the reason.
#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn a_restore_the_child_does_not_reuse_is_one_warning() {
    let _one = serial();
    capture_log();
    let kv = tempfile::tempdir().unwrap();
    let (w, _dir) = real_warden(&real_model(SMOLLM2), kv.path());
    let base = serve_http(&w);
    let mut ev = w.subscribe();
    let facts = |word: &str| long_text(20).replace("number", word);
    let first = vec![json!({"role": "user", "content": facts("number")})];
    turn(
        &base,
        "edited-history",
        &first,
        json!({"keep_alive": 0, "max_tokens": 4}),
    )
    .await;
    unloaded(&mut ev, "idle").await;
    let edited = vec![
        json!({"role": "user", "content": format!("Fact 0: the number 0 is followed by 1. {}", facts("integer"))}),
        json!({"role": "assistant", "content": "ok"}),
        json!({"role": "user", "content": "next"}),
    ];
    let r = turn(&base, "edited-history", &edited, json!({"max_tokens": 4})).await;
    let (n, reused) = (processed(&r), r["timings"]["cache_n"].as_u64().unwrap());
    assert!(
        n > 200 && reused < 100,
        "the edit cost a re-read: processed {n}, reused {reused}"
    );
    let log = captured_log();
    // This conversation's lines only: the log is the test binary's, and
    // other tests' conversations may have been warned about before.
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("was not reused") && l.contains("\"edited-history\""))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    let w1 = warnings[0];
    assert!(w1.contains("WARN") && w1.contains("\"edited-history\""), "{w1}");
    assert!(w1.contains(&format!("reread_tokens={n}")), "{w1}");
    assert!(
        w1.contains("saved_tokens=") && w1.contains("history was edited"),
        "{w1}"
    );
    w.shutdown().await;
}

/// Short of memory (1 GiB), the full-size sliding cache would bind Gemma's
/// window at 14,336 tokens: the warden runs the small cache instead (no
/// `--swa-full`) at the trained 32,768, says its conversations are not
/// kept, writes no save, and a conversation is re-read after an unload.
#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn a_sliding_model_short_of_memory_runs_its_small_cache_and_says_so() {
    let _one = serial();
    let kv = tempfile::tempdir().unwrap();
    let server = real_llama_server();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(real_model(GEMMA3), dir.path().join("m.gguf")).unwrap();
    let cfg = WardenConfig {
        kv_save_dir: Some(kv.path().to_path_buf()),
        ram_override_bytes: Some(1 << 30),
        models: gemma_chat_models(&["m"]),
        ..test_config()
    };
    let w = TestWarden::real_cpu(server, dir.path())
        .default_model("m")
        .config(cfg)
        .start();
    let base = serve_http(&w);
    let s = load_default(&w).await;
    assert_eq!(s.context_tokens, Some(32_768), "the small cache's window");
    let keep = s.kv_keep.expect("a model is loaded");
    assert_eq!((keep.kept, keep.how), (false, "sliding_window"), "{keep:?}");
    assert!(keep.reason.unwrap().contains("re-read after an unload"));
    assert!(
        !child_argv(&w).iter().any(|a| a == "--swa-full"),
        "{:?}",
        child_argv(&w)
    );
    let opening = vec![json!({"role": "user", "content": format!("{}\nWhich number follows 41?", long_text(80))})];
    let mut ev = w.subscribe();
    let r1 = turn(&base, "small", &opening, json!({"keep_alive": 0})).await;
    unloaded(&mut ev, "idle").await;
    assert_eq!(w.status().kv_saves.map_or(0, |k| k.count), 0, "nothing saved");
    let mut next = opening.clone();
    next.push(answer(&r1));
    next.push(json!({"role": "user", "content": "And which follows 99?"}));
    let r2 = turn(&base, "small", &next, json!({})).await;
    assert!(processed(&r2) > 1400, "re-read after the unload: {}", processed(&r2));
    w.shutdown().await;
}
