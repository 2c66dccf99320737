//! The settings file and the models directory applied live,
//! over the in-process fake, through the warden's own watch: a model that
//! appears is served, a changed window reaches a resident at its next load
//! (not before), a broken file keeps the last good settings and says where
//! it broke, a model that leaves is refused at once and unloaded once its
//! streaming turn has ended whole.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use llm_warden::WardenConfig;
use llm_warden::child::fake::{FakeLlama, Script as ChildScript};
use llm_warden::status::WardenEvent;
use serde_json::json;
use support::*;

/// The test configuration, watching every 50 ms.
fn watched() -> WardenConfig {
    WardenConfig {
        ram_override_bytes: Some(8 << 30),
        watch_period: Duration::from_millis(50),
        ..test_config()
    }
}

/// The `-c` of the fake's last spawn of `model`.
fn last_ctx(fake: &FakeLlama, model: &str) -> Option<String> {
    let spawns = fake.spawns();
    let argv = &spawns
        .iter()
        .rev()
        .find(|s| s.argv.iter().any(|a| a.contains(&format!("{model}.gguf"))))?
        .argv;
    argv.iter().position(|a| a == "-c").map(|i| argv[i + 1].clone())
}

/// One test's directory: `models/` with a heavy fake model of each of
/// `ids`, and `config.toml` holding `settings`.
struct Site {
    _dir: tempfile::TempDir,
    models: std::path::PathBuf,
    settings: std::path::PathBuf,
}

fn site(ids: &[&str], settings: &str) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    for id in ids {
        heavy_model(&models, id, json!({}));
    }
    let path = dir.path().join("config.toml");
    save(&path, settings);
    Site {
        _dir: dir,
        models,
        settings: path,
    }
}

/// The in-process fake, answering four tokens.
fn four_tokens() -> Arc<FakeLlama> {
    Arc::new(FakeLlama::new(ChildScript {
        tokens: 4,
        ..ChildScript::default()
    }))
}

async fn applied(ev: &mut tokio::sync::broadcast::Receiver<WardenEvent>, what: &str) -> WardenEvent {
    event_or_fail(ev, what, |e| matches!(e, WardenEvent::SettingsApplied { .. })).await
}

#[actix_rt::test]
async fn a_live_edit_adds_a_model_changes_a_window_at_the_next_load_and_a_broken_file_keeps_the_last_good() {
    let site = site(&["m"], "[models.m]\nctx = 4096\n");
    let (models, settings) = (&site.models, &site.settings);
    let fake = four_tokens();
    let w = TestWarden::in_process(&fake, models)
        .config(watched())
        .settings(settings)
        .default_model("m")
        .start();
    let mut ev = w.subscribe();
    let s = load_default(&w).await;
    assert_eq!(s.context_tokens, Some(4096));
    assert_eq!(last_ctx(&fake, "m").as_deref(), Some("4096"));

    // The edit: m's window, and a model that appears with an alias.
    heavy_model(models, "n", json!({}));
    save(
        settings,
        "[models.m]\nctx = 2048\n\n[models.n]\naliases = [\"helper\"]\n",
    );
    // The watch may meet the new model file before the settings file is
    // saved: the edit is applied in one reading or two.
    let (mut added, mut changed) = (Vec::new(), Vec::new());
    while !(added.contains(&"n".to_string()) && changed.contains(&"m".to_string())) {
        let WardenEvent::SettingsApplied {
            added: a, changed: c, ..
        } = applied(&mut ev, "the edit applied").await
        else {
            unreachable!()
        };
        added.extend(a);
        changed.extend(c);
    }
    assert_eq!(added, vec!["n".to_string()]);
    // The resident keeps its window until its next load.
    assert_eq!(w.status().context_tokens, Some(4096));
    // The new model serves, by its alias too, beside m.
    let t = collect(w.submit(chat(Some("helper"), 4, true)).unwrap()).await;
    assert!(t.done, "{t:?}");
    assert!(w.catalog().get("n").is_some());
    // m's next load takes the new window.
    assert!(w.unload_model(Some("m")).await.unwrap());
    let s = w.load(Some("m".into()), None).await.unwrap();
    assert_eq!(s.context_tokens, Some(2048));
    assert_eq!(last_ctx(&fake, "m").as_deref(), Some("2048"));

    // A broken file: said with its line and column, the last good settings
    // keep serving (n still there, m's window still 2048 at a load).
    save(settings, "[models.m]\nctx = 2048\nparallel = \"many\"\n");
    let e = event_or_fail(&mut ev, "the refusal", |e| {
        matches!(e, WardenEvent::SettingsRefused { .. })
    })
    .await;
    let WardenEvent::SettingsRefused { problem } = e else {
        unreachable!()
    };
    assert_eq!((problem.line, problem.column), (Some(3), Some(12)), "{problem}");
    assert!(problem.message.contains("parallel"), "{problem}");
    let status = w.status().settings.expect("the settings' status");
    assert_eq!(status.error.as_ref(), Some(&problem));
    assert!(w.catalog().get("n").is_some(), "the last good catalog serves");
    assert!(w.unload_model(Some("m")).await.unwrap());
    let s = w.load(Some("m".into()), None).await.unwrap();
    assert_eq!(s.context_tokens, Some(2048), "the last good window");

    // Mended: the error clears.
    save(settings, "[models.m]\nctx = 2048\n");
    applied(&mut ev, "the mended file applied").await;
    assert_eq!(w.status().settings.unwrap().error, None);
    w.shutdown().await;
}

/// A settings file read mid-write (an editor that writes it in place) is
/// read again a moment later before any refusal is said: the whole file
/// applies, and no refusal reached the log, the status or the events.
#[actix_rt::test]
async fn a_file_read_mid_write_is_read_again_before_a_refusal_is_said() {
    // One line, so that any first half of it is not TOML.
    let site = site(&["m"], "models = { m = { ctx = 4096 } }\n");
    let (models, settings) = (&site.models, &site.settings);
    let fake = four_tokens();
    let tear = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let w = TestWarden::in_process(&fake, models)
        .config(watched())
        .settings(settings)
        .tearing(&tear)
        .default_model("m")
        .start();
    let mut ev = w.subscribe();
    // The next reading sees half a file (the old one or the new one,
    // whichever the watch meets), then the edit lands.
    tear.store(true, std::sync::atomic::Ordering::SeqCst);
    save(settings, "models = { m = { ctx = 2048 } }\n");
    let e = event_or_fail(&mut ev, "the edit's verdict", |e| {
        matches!(
            e,
            WardenEvent::SettingsApplied { .. } | WardenEvent::SettingsRefused { .. }
        )
    })
    .await;
    let WardenEvent::SettingsApplied { changed, .. } = e else {
        panic!("a half-written file was said as refused: {e:?}")
    };
    assert_eq!(changed, vec!["m".to_string()]);
    assert!(
        !tear.load(std::sync::atomic::Ordering::SeqCst),
        "the watch read the file half-written once"
    );
    assert_eq!(w.status().settings.unwrap().error, None);
    let s = w.load(None, None).await.unwrap();
    assert_eq!(s.context_tokens, Some(2048));
    w.shutdown().await;
}

#[actix_rt::test]
async fn a_model_that_leaves_finishes_its_streaming_turn_whole_then_unloads() {
    let site = site(&["m", "keep"], "");
    let (models, settings) = (&site.models, &site.settings);
    let fake = Arc::new(FakeLlama::new(ChildScript {
        tokens: 30,
        token_delay: Duration::from_millis(20),
        ..ChildScript::default()
    }));
    let w = TestWarden::in_process(&fake, models)
        .config(watched())
        .settings(settings)
        .default_model("keep")
        .start();
    let mut ev = w.subscribe();
    let mut rx = w.submit(chat(Some("m"), 30, true)).unwrap();
    first_chunk(&mut rx).await;
    // The model's files leave while its answer streams.
    std::fs::remove_file(models.join("m.gguf")).unwrap();
    let WardenEvent::SettingsApplied { removed, .. } = applied(&mut ev, "the removal applied").await else {
        unreachable!()
    };
    assert_eq!(removed, vec!["m".to_string()]);
    // New requests are refused at once.
    let refused = w
        .submit(chat(Some("m"), 4, true))
        .expect_err("a model that left is not served");
    assert_eq!(refused.code(), "model_not_found");
    // The running turn is whole.
    let rest = collect(rx).await;
    assert!(rest.done, "the streaming turn ended whole: {rest:?}");
    assert!(rest.error.is_none(), "{rest:?}");
    // The other model still serves; the same request's whole answer there
    // has as many chunks as the first one and the rest here.
    let whole = collect(w.submit(chat(None, 30, true)).unwrap()).await;
    assert!(whole.done, "{whole:?}");
    assert_eq!(rest.chunks.len() + 1, whole.chunks.len(), "no chunk lost");
    // Then its child unloads, and its engine leaves the status.
    event_or_fail(
        &mut ev,
        "m unloaded",
        |e| matches!(e, WardenEvent::Unloaded { model, .. } if model == "m"),
    )
    .await;
    for _ in 0..100 {
        if w.status().settings.is_some_and(|s| s.leaving.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = w.status();
    assert!(s.settings.as_ref().unwrap().leaving.is_empty(), "{:?}", s.settings);
    assert!(s.residents.iter().all(|r| r.model != "m"), "{:?}", s.residents);
    w.shutdown().await;
}

/// Ollama's `/api/copy` is an alias written into the settings file in use
/// (its comment kept) and served at once; a name taken or a model unknown
/// is refused, and the file is not touched then.
#[actix_rt::test]
async fn an_ollama_copy_is_an_alias_in_the_settings_file() {
    let site = site(&["m", "other"], "# my settings\n[models.m]\nctx = 4096\n");
    let (models, settings) = (&site.models, &site.settings);
    let fake = four_tokens();
    let w = TestWarden::in_process(&fake, models)
        .config(WardenConfig {
            watch_period: Duration::ZERO,
            ..watched()
        })
        .settings(settings)
        .default_model("m")
        .start();
    let base = serve_http(&w);
    let (s, v) = post(
        &base,
        "/api/copy",
        json!({"source": "m:latest", "destination": "assistant"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let text = std::fs::read_to_string(settings).unwrap();
    assert_eq!(
        text,
        "# my settings\n[models.m]\nctx = 4096\naliases = [\"assistant\"]\n"
    );
    let t = collect(w.submit(chat(Some("assistant"), 4, true)).unwrap()).await;
    assert!(t.done, "{t:?}");
    assert_eq!(w.status().model.as_deref(), Some("m"));
    // Again: nothing more is written.
    let (s, _) = post(&base, "/api/copy", json!({"source": "m", "destination": "assistant"})).await;
    assert_eq!(s, 200);
    assert_eq!(std::fs::read_to_string(settings).unwrap(), text);
    // Taken by another model, or an unknown source: refused, file as it was.
    let (s, v) = post(
        &base,
        "/api/copy",
        json!({"source": "other", "destination": "assistant"}),
    )
    .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_value")), "{v}");
    let (s, v) = post(&base, "/api/copy", json!({"source": "nope", "destination": "x"})).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("model_not_found")), "{v}");
    let (s, v) = post(&base, "/api/copy", json!({"source": "m"})).await;
    assert_eq!((s, v["param"].as_str()), (400, Some("destination")), "{v}");
    assert_eq!(std::fs::read_to_string(settings).unwrap(), text);
    w.shutdown().await;
}
