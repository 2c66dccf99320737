//! A model whose GGUF has no chat template (a base model, or one converted
//! without it): listed as `completion`, and a chat to it refused before any
//! load with a 400 `no_chat_template` saying what to do; a template named
//! in its settings makes it a chat model, given to its child as
//! `--chat-template NAME`.

use crate::support;

use std::sync::Arc;

use llm_warden::child::fake::{FakeLlama, Script as ChildScript};
use serde_json::json;
use support::*;

/// A llama-shaped GGUF like the fake chat models, without a chat template.
fn untemplated(dir: &std::path::Path, id: &str) {
    write_small_llama(&dir.join(format!("{id}.gguf")), 8192, false, 64);
}

/// The `kind` `/v1/models` lists for `id`.
async fn listed_kind(base: &str, id: &str) -> serde_json::Value {
    let models = json_of(reqwest::Client::new().get(format!("{base}/v1/models"))).await;
    let m = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("{id} listed: {models}"))
        .clone();
    m["kind"].clone()
}

#[actix_rt::test]
async fn a_model_without_a_chat_template_serves_completions_only_unless_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    untemplated(dir.path(), "base");
    let fake = Arc::new(FakeLlama::new(ChildScript::default()));
    let w = TestWarden::in_process(&fake, dir.path()).config(test_config()).start();
    let base = serve_http(&w);
    assert_eq!(listed_kind(&base, "base").await, "completion");
    let chat = json!({"model": "base", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let (status, v) = post(&base, "/v1/chat/completions", &chat).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("no_chat_template")),
        "{v}"
    );
    let said = v["error"]["message"].as_str().unwrap();
    assert!(
        said.contains("chat_template = \"chatml\"") && said.contains("/v1/completions"),
        "{said}"
    );
    assert!(fake.spawns().is_empty(), "refused before any load");
    // Anthropic's dialect is a chat too.
    let messages = json!({"model": "base", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]});
    let (status, v) = post(&base, "/v1/messages", &messages).await;
    assert_eq!(status, 400, "{v}");
    w.shutdown().await;

    // Named in its settings: a chat model, its child told the template.
    let settings = dir.path().join("config.toml");
    std::fs::write(&settings, "[models.base]\nchat_template = \"chatml\"\n").unwrap();
    let w = TestWarden::in_process(&fake, dir.path())
        .config(test_config())
        .settings(&settings)
        .start();
    let base = serve_http(&w);
    assert_eq!(listed_kind(&base, "base").await, "chat");
    let (status, v) = post(&base, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{v}");
    let argv = fake.spawns().last().expect("a child for the chat").argv.clone();
    assert!(argv.windows(2).any(|a| a == ["--chat-template", "chatml"]), "{argv:?}");
    w.shutdown().await;
}
