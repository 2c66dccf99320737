//! The MLX engine against a real `mlx_vlm.server` 0.7.10 on this machine's
//! CPU, serving the real SmolLM2 converted from its GGUF (`build-llama.sh
//! mlx`): load and a coherent streamed answer; the memory bound applied and
//! read back from the child; a prefix-cache reset with a barrier after an
//! abandoned turn; a release under forced pressure, and lasting critical
//! pressure at idle unloading the model, with the brake's log lines; a
//! model whose config.json names no trained window, bounded by memory
//! alone; a reload with one engine for every model.

use crate::support;

use llm_warden::TurnEvent;
use llm_warden::config::ForcedPressure;
use llm_warden::engines::{Backend, MlxEngine};
use llm_warden::status::WardenEvent;
use llm_warden::{Warden, WardenConfig};
use support::*;

/// The MLX engine and the converted model directory; fails the test,
/// naming what is missing, without them.
fn mlx_setup(cfg: &WardenConfig) -> (Backend, std::path::PathBuf) {
    let dir = cfg.models_dir().join("mlx");
    let engine = MlxEngine::build(cfg).unwrap_or_else(|e| missing(&e.to_string()));
    let config = dir.join("SmolLM2-135M-Instruct/config.json");
    if !config.is_file() {
        missing(&format!("{} is missing (run ./build-llama.sh mlx)", config.display()));
    }
    (Backend::Mlx(engine), dir)
}

/// A warden over the real mlx_vlm.server serving the converted SmolLM2.
fn mlx_warden(cfg: WardenConfig) -> Warden {
    let (backend, dir) = mlx_setup(&cfg);
    TestWarden::backend(backend, &dir).config(cfg).start()
}

fn ask(conversation: &str, text: &str, max_tokens: u32) -> llm_warden::TurnRequest {
    let mut r = chat(None, max_tokens, true);
    r.body.insert(
        "messages".into(),
        serde_json::json!([{"role": "user", "content": text}]),
    );
    r.conversation = Some(conversation.into());
    r
}

/// The child's live `max_kv_size`, asked with its own key (from its
/// environment).
async fn child_max_kv_size(pid: u32, port: u16) -> Option<u64> {
    let key = env_of(pid, "MLX_VLM_SERVER_API_KEY")?;
    let v: serde_json::Value = llm_warden::child::client::shared_http_client()
        .get(format!("http://127.0.0.1:{port}/v1/settings"))
        .bearer_auth(key)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    v.pointer("/current/max_kv_size").and_then(|x| x.as_u64())
}

/// A coherent streamed answer, and the memory bound (1.3 GiB of RAM stands
/// in for the machine's) applied and read back from the child itself.
#[actix_rt::test]
#[ignore = "needs the MLX environment and the converted SmolLM2 (./build-llama.sh mlx); ./test.sh runs it"]
async fn load_answer_and_the_memory_bound() {
    let cfg = WardenConfig {
        ram_override_bytes: Some((1.3 * (1u64 << 30) as f64) as u64),
        ..test_config()
    };
    let w = mlx_warden(cfg);
    let mut r = ask("france", "What is the capital of France?", 16);
    r.body.insert("temperature".into(), serde_json::json!(0));
    let t = collect(w.submit(r).unwrap()).await;
    assert!(t.done, "{t:?}");
    assert!(t.text().contains("Paris"), "{}", t.text());
    let s = w.status();
    let bound = s.memory_bound_tokens.expect("1.3 GiB bounds SmolLM2's float32 KV");
    assert!((4096..8192).contains(&bound), "bound {bound}");
    assert_eq!(
        s.context_tokens,
        Some(bound),
        "the handle follows what the child enforces"
    );
    assert_eq!(
        child_max_kv_size(s.child_pid.unwrap(), s.port.unwrap()).await,
        Some(bound as u64)
    );
    // mlx_vlm.server has no raw completion or tokenizer: refused before the
    // queue (501), and the child is untouched.
    let mut raw = chat(None, 4, false);
    raw.route = llm_warden::law::route::Route::Completions;
    let e = w.submit(raw).expect_err("no completions on MLX").to_api();
    assert_eq!((e.status, e.code.as_str()), (501, "unsupported_route"));
    let base = serve_http(&w);
    let r = reqwest::Client::new()
        .post(format!("{base}/tokenize"))
        .json(&serde_json::json!({"content": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 501);
    assert_eq!(w.status().child_pid, s.child_pid);
    w.shutdown().await;
}

/// A turn abandoned mid-stream, then a turn of another conversation: a
/// barrier goes first, then the reset; the answer completes.
#[actix_rt::test]
#[ignore = "needs the MLX environment and the converted SmolLM2 (./build-llama.sh mlx); ./test.sh runs it"]
async fn reset_with_a_barrier_after_an_abandoned_turn() {
    let w = mlx_warden(test_config());
    let mut ev = w.subscribe();
    assert!(collect(w.submit(ask("a", "Say hi.", 4)).unwrap()).await.done);
    // The same conversation's next turn: no reset.
    let mut rx = w.submit(ask("a", "Tell me a long story about the sea.", 200)).unwrap();
    loop {
        if let TurnEvent::Chunk(_) = recv_or_fail(&mut rx, "a first token").await {
            break;
        }
    }
    drop(rx);
    let e = event_or_fail(&mut ev, "the abandoned end", |e| {
        matches!(
            e,
            WardenEvent::TurnEnded {
                outcome: llm_warden::status::TurnOutcome::Abandoned,
                ..
            }
        )
    })
    .await;
    drop(e);
    let t = collect(w.submit(ask("b", "Say hello.", 4)).unwrap()).await;
    assert!(t.done, "{t:?}");
    let reset = event_or_fail(&mut ev, "the reset", |e| matches!(e, WardenEvent::PrefixReset { .. })).await;
    assert_eq!(
        reset,
        WardenEvent::PrefixReset {
            reason: "conversation_change",
            barrier: true
        }
    );
    // Back to "a": a reset again, no barrier now.
    assert!(collect(w.submit(ask("a", "Say hi.", 4)).unwrap()).await.done);
    let reset = event_or_fail(&mut ev, "the second reset", |e| {
        matches!(e, WardenEvent::PrefixReset { .. })
    })
    .await;
    assert_eq!(
        reset,
        WardenEvent::PrefixReset {
            reason: "conversation_change",
            barrier: false
        }
    );
    w.shutdown().await;
}

/// The captured log's lines written since `from` (a length of
/// `captured_log()` taken before): this test's alone, as the real tests run
/// one at a time.
fn log_since(from: usize) -> Vec<String> {
    captured_log()[from..].lines().map(str::to_string).collect()
}

/// Forced critical pressure after a long turn: the turn's end releases
/// (reset + one-token request) and the child gives memory back; the brake
/// says so at INFO.
#[actix_rt::test]
#[ignore = "needs the MLX environment and the converted SmolLM2 (./build-llama.sh mlx); ./test.sh runs it"]
async fn forced_pressure_releases_memory() {
    let cfg = WardenConfig {
        force_pressure: Some(ForcedPressure::Critical),
        ..test_config()
    };
    capture_log();
    let from = captured_log().len();
    let w = mlx_warden(cfg);
    let mut ev = w.subscribe();
    assert!(collect(w.submit(ask("long", "Hi.", 2)).unwrap()).await.done);
    let pid = w.status().child_pid.unwrap();
    let long = "The lighthouse keeper watched the sea and counted every wave that came. ".repeat(100);
    let t = collect(w.submit(ask("long", &format!("{long} Summarize."), 4)).unwrap()).await;
    assert!(t.done, "{t:?}");
    // The release's reset, then the brake's record of it.
    let reset = event_or_fail(&mut ev, "the release's reset", |e| {
        matches!(e, WardenEvent::PrefixReset { reason: "memory", .. })
    })
    .await;
    drop(reset);
    let e = event_or_fail(&mut ev, "the release", |e| matches!(e, WardenEvent::Brake { .. })).await;
    assert!(
        matches!(&e, WardenEvent::Brake { action, point: "turn_end", .. } if action == "release"),
        "{e:?}"
    );
    assert_eq!(w.status().child_pid, Some(pid), "a release never respawns");
    assert!(
        t.notices
            .iter()
            .all(|n| !matches!(n, llm_warden::Notice::MemoryWarning { reason: "acted" })),
        "a release says nothing"
    );
    let lines = log_since(from);
    assert!(
        lines.iter().any(|l| l.contains(" INFO ")
            && l.contains("[MLX_Engine] Memory brake: point=turn_end, level=critical, action=release, window=")
            && l.contains("excess_mib=")),
        "the release's INFO line: {lines:#?}"
    );
    w.shutdown().await;
}

/// Lasting critical pressure while idle: the brake acts once and arms,
/// then unloads the model, said as a WARNING; the next message reloads it.
#[actix_rt::test]
#[ignore = "needs the MLX environment and the converted SmolLM2 (./build-llama.sh mlx); ./test.sh runs it"]
async fn lasting_critical_pressure_at_idle_unloads_with_a_warning() {
    let cfg = WardenConfig {
        force_pressure: Some(ForcedPressure::Critical),
        brake_tick: std::time::Duration::from_millis(200),
        ..test_config()
    };
    capture_log();
    let from = captured_log().len();
    let w = mlx_warden(cfg);
    let mut ev = w.subscribe();
    assert!(collect(w.submit(ask("away", "Hi.", 2)).unwrap()).await.done);
    event_or_fail(&mut ev, "the brake's unload", |e| {
        matches!(
            e,
            WardenEvent::Unloaded {
                reason: llm_warden::status::UnloadReason::Brake,
                ..
            }
        )
    })
    .await;
    // The line follows the unload's event.
    let said = "[MLX_Engine] Memory brake: point=idle, level=critical, action=unload, window=";
    poll_until(
        "the unload's line",
        std::time::Duration::from_secs(30),
        || log_since(from).iter().any(|l| l.contains(said)),
        || log_since(from).join("\n"),
    )
    .await;
    let lines = log_since(from);
    let unload = lines.iter().find(|l| l.contains(said)).expect("found above");
    assert!(unload.contains(" WARN "), "an unload is a WARNING: {unload}");
    assert!(unload.contains("the model reloads at the next message"), "{unload}");
    assert_eq!(w.status().child_pid, None, "{unload}");
    w.shutdown().await;
}

/// A model whose config.json names no trained window
/// (`max_position_embeddings`): the ceiling alone bounds it, applied and
/// read back from the child, which waits 3660 s a token and keeps
/// mlx-vlm's own prefix-cache pool size.
#[actix_rt::test]
#[ignore = "needs the MLX environment and the converted SmolLM2 (./build-llama.sh mlx); ./test.sh runs it"]
async fn a_model_without_a_trained_window_is_bounded_by_memory_alone() {
    let cfg = WardenConfig {
        ram_override_bytes: Some(2 << 30),
        ..test_config()
    };
    capture_log();
    let from = captured_log().len();
    let (backend, converted) = mlx_setup(&cfg);
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("untrained");
    std::fs::create_dir(&model).unwrap();
    let smol = converted.join("SmolLM2-135M-Instruct");
    for f in std::fs::read_dir(&smol).unwrap() {
        let f = f.unwrap();
        if f.file_name() != "config.json" {
            std::os::unix::fs::symlink(f.path(), model.join(f.file_name())).unwrap();
        }
    }
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(smol.join("config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("max_position_embeddings");
    std::fs::write(model.join("config.json"), config.to_string()).unwrap();
    let w = TestWarden::backend(backend, dir.path()).config(cfg).start();
    let mut r = ask("untrained", "What is the capital of France?", 16);
    r.body.insert("temperature".into(), serde_json::json!(0));
    let t = collect(w.submit(r).unwrap()).await;
    assert!(t.done, "{t:?}");
    assert!(t.text().contains("Paris"), "{}", t.text());
    let s = w.status();
    let bound = s.memory_bound_tokens.expect("no trained window: memory bounds it");
    assert!(bound >= 4096, "bound {bound}");
    assert_eq!(s.context_tokens, Some(bound));
    let (pid, port) = (s.child_pid.unwrap(), s.port.unwrap());
    assert_eq!(child_max_kv_size(pid, port).await, Some(bound as u64));
    assert_eq!(env_of(pid, "MLX_VLM_TOKEN_QUEUE_TIMEOUT").as_deref(), Some("3660"));
    assert_eq!(env_of(pid, "APC_NUM_BLOCKS"), None);
    let lines = log_since(from);
    assert!(
        lines.iter().any(
            |l| l.contains("[MLX_Engine] Window bounded by memory: trained=unknown, ceiling=")
                && l.contains(&format!("bound={bound}"))
        ),
        "{lines:#?}"
    );
    w.shutdown().await;
}

/// One engine serves every model on MLX: a reload that finds the loaded
/// model gone unloads it and refuses it by name, and a model that appears
/// under another id is served by the same engine.
#[actix_rt::test]
#[ignore = "needs the MLX environment and the converted SmolLM2 (./build-llama.sh mlx); ./test.sh runs it"]
async fn a_reload_in_one_engine_mode_unloads_the_model_that_left() {
    let cfg = WardenConfig {
        watch_period: std::time::Duration::from_millis(200),
        ..test_config()
    };
    let (backend, converted) = mlx_setup(&cfg);
    let dir = tempfile::tempdir().unwrap();
    let smol = converted.join("SmolLM2-135M-Instruct");
    std::os::unix::fs::symlink(&smol, dir.path().join("smol")).unwrap();
    let settings = dir.path().join("config.toml");
    save(&settings, "");
    let w = TestWarden::backend(backend, dir.path())
        .config(cfg)
        .settings(&settings)
        .start();
    let mut ev = w.subscribe();
    let mut first = ask("left", "Hi.", 2);
    first.model = Some("smol".into());
    assert!(collect(w.submit(first).unwrap()).await.done);
    assert_eq!(w.status().model.as_deref(), Some("smol"));

    // The model leaves, and comes back under another id.
    std::os::unix::fs::symlink(&smol, dir.path().join("again")).unwrap();
    std::fs::remove_file(dir.path().join("smol")).unwrap();
    event_or_fail(
        &mut ev,
        "the model that left unloaded",
        |e| matches!(e, WardenEvent::Unloaded { model, .. } if model == "smol"),
    )
    .await;
    let mut gone = ask("left", "Hi.", 2);
    gone.model = Some("smol".into());
    let e = w.submit(gone).expect_err("a model that left is not served");
    assert_eq!(e.code(), "model_not_found");
    let mut back = ask("again", "Hi.", 2);
    back.model = Some("again".into());
    let t = collect(w.submit(back).unwrap()).await;
    assert!(t.done, "{t:?}");
    assert_eq!(w.status().model.as_deref(), Some("again"));
    w.shutdown().await;
}
