//! The settings file applied live by the `llm-warden serve` binary over
//! the real llama-server and SmolLM2, through SIGHUP (the
//! watch itself is off here, so each reload happens when the test says;
//! `tests/fake/live_settings.rs` drives the watch): a model and an alias
//! appear while an answer streams, which ends whole; the resident keeps
//! its window until its next load, which takes the new one; a broken file
//! keeps the last good settings and `/warden/status` says the line and
//! column; a variable bound at start is named as needing a restart;
//! `POST /warden/reload` and `llm-warden reload` do the same as SIGHUP.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// SIGHUP to `pid`, then the status once `done` holds of it (10 s at most).
async fn reload_until(pid: u32, base: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    // SAFETY: a signal to the test's own child process.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGHUP) }, 0);
    for _ in 0..100 {
        let s = json_of(reqwest::Client::new().get(format!("{base}/warden/status"))).await;
        if done(&s) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within 10 s of the SIGHUP");
}

/// The binary's environment here: `server` as its llama-server, no watch
/// (each reload happens when the test says), no other tool's store, and
/// `more`.
fn quiet<'a>(server: &'a str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("WARDEN_LLAMA_SERVER", server),
        ("WARDEN_WATCH_S", "0"),
        ("WARDEN_STORE_OLLAMA", "0"),
        ("WARDEN_STORE_HF", "0"),
        ("WARDEN_STORE_LMSTUDIO", "0"),
        ("WARDEN_STORE_LLAMA_CACHE", "0"),
    ];
    env.extend_from_slice(more);
    env
}

/// A four-token chat to `model`: its status and answer.
async fn hi(base: &str, model: &str) -> (u16, Value) {
    post(
        base,
        "/v1/chat/completions",
        json!({"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
    )
    .await
}

async fn models(base: &str) -> Vec<String> {
    let m = json_of(reqwest::Client::new().get(format!("{base}/v1/models"))).await;
    m["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

fn resident_ctx(s: &Value, model: &str) -> Option<u64> {
    s["residents"].as_array()?.iter().find(|r| r["model"] == model)?["context_tokens"].as_u64()
}

#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_live_edit_reaches_the_binary_and_never_cuts_a_streaming_answer() {
    let (server, model) = (real_llama_server(), real_model(SMOLLM2));
    let dir = real_smollm_dir(&model);
    let home = tempfile::tempdir().unwrap();
    let settings = home.path().join("config.toml");
    save(&settings, "[models.smollm2]\nctx = 2048\n");
    let server = server.display().to_string();
    let (proc, base) = spawn_warden_binary_with(
        &[
            "--config",
            settings.to_str().unwrap(),
            "--models-dir",
            dir.path().to_str().unwrap(),
            "--model",
            "smollm2",
        ],
        &quiet(&server, &[]),
    )
    .await;
    let pid = proc.id().unwrap();
    let http = reqwest::Client::new();

    // An answer streams while the file and the directory change.
    let mut stream = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Count from one to one hundred in words."}],
            "max_tokens": 400,
            "ignore_eos": true,
            "stream": true,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    // Until the first token (a notice of the load comes before it).
    let mut text = String::new();
    while !text.contains("\"content\"") {
        let c = stream.chunk().await.unwrap().expect("the stream's first token");
        text.push_str(std::str::from_utf8(&c).unwrap());
    }
    std::os::unix::fs::symlink(&model, dir.path().join("second.gguf")).unwrap();
    save(&settings, "[models.smollm2]\nctx = 4096\naliases = [\"gpt-4o-mini\"]\n");
    let s = reload_until(pid, &base, "the edit applied", |s| s["settings"]["reloads"] == 1).await;
    assert!(s["settings"]["error"].is_null(), "{s}");
    // The resident keeps the window it was loaded with, and the answer was
    // streaming through the reload.
    assert_eq!(resident_ctx(&s, "smollm2"), Some(2048), "{s}");
    let busy = s["residents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model"] == "smollm2")
        .unwrap()["busy_slots"]
        .clone();
    assert_eq!(busy, 1, "the answer still streams: {s}");
    let ids = models(&base).await;
    assert!(ids.contains(&"second".to_string()), "{ids:?}");
    // The stream ends whole: every chunk, the finish, [DONE], no error.
    while let Some(c) = stream.chunk().await.unwrap() {
        text.push_str(std::str::from_utf8(&c).unwrap());
    }
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert!(text.contains("\"finish_reason\":\"length\""), "{text}");
    assert!(!text.contains("\"error\""), "{text}");

    // The alias and the new model answer.
    let (code, v) = hi(&base, "gpt-4o-mini").await;
    assert_eq!(code, 200, "{v}");
    let (code, v) = hi(&base, "second").await;
    assert_eq!(code, 200, "{v}");

    // A broken file: the status says where; the last good settings serve.
    save(&settings, "[models.smollm2]\nctx = \"big\"\n");
    let s = reload_until(pid, &base, "the refusal", |s| !s["settings"]["error"].is_null()).await;
    let e = &s["settings"]["error"];
    assert_eq!((e["line"].as_u64(), e["column"].as_u64()), (Some(2), Some(7)), "{s}");
    assert_eq!(e["file"], settings.display().to_string(), "{s}");
    let (code, v) = hi(&base, "gpt-4o-mini").await;
    assert_eq!(code, 200, "the last good alias serves: {v}");

    // Mended, with a variable bound at start: named, its running value kept.
    save(
        &settings,
        "max_resident = 1\n\n[models.smollm2]\nctx = 4096\naliases = [\"gpt-4o-mini\"]\n",
    );
    let s = reload_until(pid, &base, "the mended file", |s| s["settings"]["error"].is_null()).await;
    assert_eq!(s["settings"]["restart_needed"], json!(["WARDEN_MAX_RESIDENT"]), "{s}");
    // Both models stay resident: the cap of one did not apply.
    assert!(resident_ctx(&s, "second").is_some(), "{s}");

    // The route and the command reload without a signal (Windows has
    // none): a refusal is a 422 that says where; mended, it applies.
    save(&settings, "[models.smollm2]\nctx = \"big\"\n");
    let (code, v) = post(&base, "/warden/reload", json!({})).await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["error"]["code"], "settings_refused", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("line 2, column 7"),
        "{v}"
    );
    save(
        &settings,
        "max_resident = 1\n\n[models.smollm2]\nctx = 4096\naliases = [\"gpt-4o-mini\"]\n",
    );
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-warden"))
        .arg("reload")
        .env("WARDEN_URL", &base)
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said} {}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("reloaded"), "{said}");

    // The resident's next load takes the new window.
    let (code, _) = post(&base, "/warden/unload", json!({"model": "smollm2"})).await;
    assert_eq!(code, 200);
    let (code, v) = post(&base, "/warden/load", json!({"model": "smollm2"})).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["context_tokens"], 4096, "{v}");
}

/// A warden started before its first model: it serves (saying there is
/// none yet), and a model that lands in its directory answers after a
/// reload, with its own engine.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_warden_started_with_no_model_serves_the_first_one_that_arrives() {
    let (server, model) = (real_llama_server(), real_model(SMOLLM2));
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = server.display().to_string();
    let (_proc, base) = spawn_warden_binary_with(
        &["--models-dir", dir.path().to_str().unwrap()],
        &quiet(&server, &[("XDG_CONFIG_HOME", home.path().to_str().unwrap())]),
    )
    .await;
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    let (code, v) = post(&base, "/v1/chat/completions", chat.clone()).await;
    assert_eq!(code, 404, "no model yet: {v}");
    assert!(models(&base).await.is_empty());
    std::os::unix::fs::symlink(&model, dir.path().join("first.gguf")).unwrap();
    let (code, v) = post(&base, "/warden/reload", json!({})).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["applied"]["added"], json!(["first"]), "{v}");
    let (code, v) = post(&base, "/v1/chat/completions", chat).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["model"], "first", "{v}");
}
