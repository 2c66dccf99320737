//! The settings file's per-model settings, each checked by its effect on
//! what the warden does (over the in-process fake): `parallel` (one turn
//! at a time), `aliases` (a request by another name), `ctx` (the child's
//! `-c`), `idle_timeout_s` (the idle unload in force); and precedence: the
//! environment over the file over the defaults.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use llm_warden::WardenConfig;
use llm_warden::child::fake::{FakeLlama, Script as ChildScript};
use llm_warden::config::file;
use serde_json::json;
use support::*;

fn from_file(text: &str, env: &[(&str, &str)]) -> WardenConfig {
    let f = file::parse(text).unwrap();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    WardenConfig::from_sources(
        move |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
        Some((f, "settings.toml".into())),
    )
    .unwrap()
}

#[actix_rt::test]
async fn per_model_settings_change_what_the_warden_does() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let fake = Arc::new(FakeLlama::new(ChildScript {
        tokens: 6,
        token_delay: Duration::from_millis(20),
        ..ChildScript::default()
    }));
    let cfg = WardenConfig {
        ram_override_bytes: Some(8 << 30),
        ..from_file(
            r#"
[models.m]
aliases = ["gpt-4o-mini"]
parallel = 1
ctx = 4096
idle_timeout_s = 30
"#,
            &[],
        )
    };
    let w = TestWarden::in_process(&fake, dir.path())
        .config(WardenConfig {
            first_token_timeout: test_config().first_token_timeout,
            ..cfg
        })
        .start();
    // An alias is served by its model.
    let t = collect(w.submit(chat(Some("gpt-4o-mini"), 6, true)).unwrap()).await;
    assert!(t.done, "{t:?}");
    let s = w.status();
    assert_eq!(s.model.as_deref(), Some("m"));
    // ctx: the child's -c; parallel: one slot; idle_timeout_s: the unload in force.
    let argv = fake.spawns().last().unwrap().argv.clone();
    let c = argv.iter().position(|a| a == "-c").map(|i| argv[i + 1].clone());
    assert_eq!(c.as_deref(), Some("4096"), "{argv:?}");
    assert_eq!(s.context_tokens, Some(4096));
    assert_eq!(s.slots.len(), 1);
    assert_eq!(s.idle_timeout_s, Some(30.0));
    // One slot: two turns run one after the other.
    let mut ev = w.subscribe();
    let a = w.submit(chat(None, 6, true).conversation(Some("a".into()))).unwrap();
    let b = w.submit(chat(None, 6, true).conversation(Some("b".into()))).unwrap();
    let mut open = 0;
    let mut ends = 0;
    while ends < 2 {
        match event_or_fail(&mut ev, "turn events", |e| {
            matches!(
                e,
                llm_warden::status::WardenEvent::TurnStarted { .. } | llm_warden::status::WardenEvent::TurnEnded { .. }
            )
        })
        .await
        {
            llm_warden::status::WardenEvent::TurnStarted { .. } => {
                open += 1;
                assert_eq!(open, 1, "two turns ran at once over one slot");
            }
            _ => {
                open -= 1;
                ends += 1;
            }
        }
    }
    assert!(collect(a).await.done && collect(b).await.done);
    w.shutdown().await;
}

/// The environment over the file over the defaults; a bad value the file
/// set names the file.
#[test]
fn the_environment_wins_over_the_file_and_the_file_over_the_defaults() {
    let text = "idle_timeout_s = 42\nmax_queue = 7\n";
    let c = from_file(text, &[("WARDEN_MAX_QUEUE", "9")]);
    assert_eq!(c.idle_timeout, Duration::from_secs(42), "the file over the default");
    assert_eq!(c.max_queue, 9, "the environment over the file");
    assert_eq!(from_file("", &[]).max_queue, WardenConfig::default().max_queue);
    let bad = WardenConfig::from_sources(
        |_| None,
        Some((file::parse("parallel = 0\n").unwrap(), "w.toml".into())),
    );
    let e = bad.unwrap_err().to_string();
    assert!(e.contains("w.toml") && e.contains("WARDEN_PARALLEL"), "{e}");
}

/// `llm-warden config check` says a good file is ok and a bad one's line
/// and column, exiting 1.
#[test]
fn config_check_says_where_a_file_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "parallel = 2\n[models.m]\naliases = [\"x\"]\n").unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "parallel = 2\n[models.m]\nextra_args = [\"-c\", \"99\"]\n").unwrap();
    let run = |f: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_llm-warden"))
            .args(["config", "check"])
            .arg(f)
            .output()
            .unwrap()
    };
    let ok = run(&good);
    assert!(ok.status.success(), "{ok:?}");
    assert!(String::from_utf8_lossy(&ok.stdout).contains("ok (1 model setting(s): m)"));
    let no = run(&bad);
    assert_eq!(no.status.code(), Some(1));
    let err = String::from_utf8_lossy(&no.stderr);
    assert!(
        err.contains("bad.toml: line 3, column 14") && err.contains("unknown setting `extra_args`"),
        "{err}"
    );
    // Every problem, not only the first, each where it is.
    let many = dir.path().join("many.toml");
    std::fs::write(
        &many,
        "parralel = 2
idle_timeout_s = \"ten minutes\"
[models.m]
pined = true
",
    )
    .unwrap();
    let no = run(&many);
    assert_eq!(no.status.code(), Some(1));
    let err = String::from_utf8_lossy(&no.stderr);
    for said in [
        "many.toml: line 1, column 12: unknown key `parralel` (did you mean `parallel`?)",
        "many.toml: line 2, column 18: idle_timeout_s = \"ten minutes\" is not valid",
        "many.toml: line 4, column 9: models.\"m\": unknown setting `pined` (did you mean `pinned`?)",
        "many.toml: line 3, column 1: warning: models.\"m\": no model 'm' in the catalog",
        "3 errors a start would refuse, 1 warning",
    ] {
        assert!(err.contains(said), "{said:?} missing from:\n{err}");
    }
}

/// `pinned` keeps a model through the idle reap (and says so in the
/// status); `args` and `chat_template_file` reach the child's argv.
#[actix_rt::test]
async fn pinned_args_and_template_file_change_what_the_warden_does() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let settings = tempfile::tempdir().unwrap();
    std::fs::write(settings.path().join("t.jinja"), "{{ messages }}").unwrap();
    let path = settings.path().join("w.toml");
    std::fs::write(
        &path,
        "[models.m]\npinned = true\nargs = [\"--mlock\"]\nchat_template_file = \"t.jinja\"\n",
    )
    .unwrap();
    let f = file::load(&path).unwrap();
    let cfg = WardenConfig::from_sources(|_| None, Some((f, path))).unwrap();
    let fake = Arc::new(FakeLlama::new(ChildScript::default()));
    let w = TestWarden::in_process(&fake, dir.path())
        .config(WardenConfig {
            idle_timeout: Duration::ZERO,
            ram_override_bytes: Some(8 << 30),
            ..WardenConfig {
                models: cfg.models,
                ..test_config()
            }
        })
        .start();
    let s = load_default(&w).await;
    assert!(s.pinned && s.idle_timeout_s.is_none(), "{s:?}");
    let argv = fake.spawns().last().unwrap().argv.clone();
    assert!(argv.iter().any(|a| a == "--mlock"), "{argv:?}");
    let t = argv
        .iter()
        .position(|a| a == "--chat-template-file")
        .map(|i| argv[i + 1].clone());
    assert!(t.is_some_and(|t| t.ends_with("t.jinja")), "{argv:?}");
    let mut ev = w.subscribe();
    w.queue_reap();
    let e = event_or_fail(&mut ev, "the reap check", |e| {
        matches!(e, llm_warden::status::WardenEvent::ReapChecked { .. })
    })
    .await;
    assert_eq!(
        e,
        llm_warden::status::WardenEvent::ReapChecked { reaped: false },
        "a pinned model is never reaped"
    );
    assert!(w.status().child_pid.is_some());
    w.shutdown().await;
}

/// A template file that is not there, or a flag the warden owns, is
/// refused at start with where.
#[test]
fn a_missing_template_file_or_an_owned_flag_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("w.toml");
    std::fs::write(&p, "[models.m]\nchat_template_file = \"gone.jinja\"\n").unwrap();
    let e = file::load(&p).unwrap_err();
    assert!(
        e.to_string().contains("line 2, column 1") && e.message.contains("gone.jinja"),
        "{e}"
    );
    std::fs::write(&p, "[models.m]\nargs = [\"--port\", \"1\"]\n").unwrap();
    let e = file::load(&p).unwrap_err();
    assert!(e.message.contains("`--port` is refused"), "{e}");
}
