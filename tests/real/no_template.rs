//! Gemma 3 270M, whose GGUF has no chat template, over the real
//! llama-server: a chat is refused (400 `no_chat_template`) where
//! llama-server itself would have rendered it with ChatML and answered
//! noise; raw completions and Ollama's generate (the prompt as given) are
//! served; a template named in its settings makes it a chat model.

use crate::support;

use serde_json::json;
use support::*;

#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn gemma_without_a_template_completes_and_chats_once_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(real_model(GEMMA3), dir.path().join("gemma.gguf")).unwrap();
    let w = TestWarden::real_cpu(real_llama_server(), dir.path())
        .default_model("gemma")
        .start();
    let base = serve_http(&w);
    let ask = json!({"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 8});
    let (status, v) = post(&base, "/v1/chat/completions", &ask).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("no_chat_template")),
        "{v}"
    );
    assert_eq!(w.status().child_pid, None, "refused before the load");
    let (status, v) = post(
        &base,
        "/v1/completions",
        json!({"prompt": "The capital of France is", "max_tokens": 4}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    // Ollama's generate sends the prompt as given, as Ollama does for a
    // model whose template is the prompt alone.
    let generate =
        json!({"model": "gemma", "prompt": "The capital of France is", "stream": false, "options": {"num_predict": 4}});
    let (status, v) = post(&base, "/api/generate", generate).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["response"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    w.shutdown().await;

    let settings = dir.path().join("config.toml");
    std::fs::write(&settings, "[models.gemma]\nchat_template = \"gemma\"\n").unwrap();
    let w = TestWarden::real_cpu(real_llama_server(), dir.path())
        .default_model("gemma")
        .settings(&settings)
        .start();
    let base = serve_http(&w);
    let (status, v) = post(&base, "/v1/chat/completions", &ask).await;
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap_or_default();
    assert!(
        !text.contains("<|im_start|>") && !text.contains("<|im_end|>"),
        "{text:?}"
    );
    w.shutdown().await;
}
