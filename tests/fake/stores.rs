//! The models other tools keep, laid out as each tool lays them out, each
//! listed with its id and source and serving a chat (over the in-process
//! fake): an Ollama manifest and blob, a Hugging Face cache snapshot whose
//! file is a symlink into `blobs/`, an LM Studio folder, llama.cpp's cache.
//! The stores are never written to.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use llm_warden::catalog::Source;
use llm_warden::catalog::stores::Stores;
use llm_warden::child::fake::{FakeLlama, Script as ChildScript};
use support::*;

/// An Ollama template layer (Go template syntax).
const OLLAMA_TEMPLATE: &str = "{{ if .System }}<|system|>{{ .System }}{{ end }}<|user|>{{ .Prompt }}<|assistant|>";

/// Every store in one tree, as each tool lays it out.
fn lay_out(root: &Path) -> Stores {
    let ollama = root.join("ollama");
    std::fs::create_dir_all(ollama.join("blobs")).unwrap();
    write_llama_gguf(&ollama.join("blobs/sha256-abc"), 4096);
    // Its template, system and params layers, as `ollama create` writes them.
    std::fs::write(ollama.join("blobs/sha256-def"), OLLAMA_TEMPLATE).unwrap();
    std::fs::write(ollama.join("blobs/sha256-s01"), "You are a tiny model.").unwrap();
    std::fs::write(
        ollama.join("blobs/sha256-p01"),
        r#"{"num_ctx": 2048, "temperature": 0.3, "stop": ["<|end|>"]}"#,
    )
    .unwrap();
    let manifest = serde_json::json!({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:abc"},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:def"},
        {"mediaType": "application/vnd.ollama.image.system", "digest": "sha256:s01"},
        {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:p01"}]});
    let m = ollama.join("manifests/registry.ollama.ai/library/tiny");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("latest"), manifest.to_string()).unwrap();

    let hub = root.join("hub");
    let repo = hub.join("models--org--tiny-GGUF");
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("snapshots/r1")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "r1").unwrap();
    write_llama_gguf(&repo.join("blobs/0123"), 4096);
    std::os::unix::fs::symlink("../../blobs/0123", repo.join("snapshots/r1/tiny-Q4_K_M.gguf")).unwrap();

    let lms = root.join("lmstudio");
    std::fs::create_dir_all(lms.join("pub/tiny-GGUF")).unwrap();
    write_llama_gguf(&lms.join("pub/tiny-GGUF/tiny-Q8_0.gguf"), 4096);

    let cache = root.join("llama-cache");
    std::fs::create_dir_all(&cache).unwrap();
    write_llama_gguf(&cache.join("org_tiny_tiny-Q4_0.gguf"), 4096);

    Stores {
        ollama: Some(ollama),
        hugging_face: Some(hub),
        lm_studio: Some(lms),
        llama_cache: Some(cache),
    }
}

/// A listing of every file under `root` with its size and mtime.
fn snapshot(root: &Path) -> Vec<(std::path::PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else {
                out.push((p, m.len(), m.modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[actix_rt::test]
async fn every_store_is_listed_with_its_id_and_serves_a_chat() {
    let stores_dir = tempfile::tempdir().unwrap();
    let stores = lay_out(stores_dir.path());
    let before = snapshot(stores_dir.path());
    let own = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeLlama::new(ChildScript::default()));
    let w = TestWarden::in_process(&fake, own.path())
        .config(test_config())
        .stores(stores)
        .start();
    let cat = w.catalog();
    let mut listed: Vec<(String, Source)> = cat
        .entries()
        .iter()
        .map(|e| (e.id.clone(), cat.source_of(&e.id)))
        .collect();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        listed,
        [
            ("org/tiny-GGUF".to_string(), Source::HuggingFace),
            ("org_tiny_tiny-Q4_0".into(), Source::LlamaCache),
            ("pub/tiny-GGUF".into(), Source::LmStudio),
            ("tiny:latest".into(), Source::Ollama),
        ]
    );
    for (id, _) in &listed {
        let t = collect(w.submit(chat(Some(id), 4, true)).unwrap()).await;
        assert!(t.done, "{id}: {t:?}");
        assert_eq!(
            w.status().residents.iter().filter(|r| &r.model == id).count(),
            1,
            "{id} loaded"
        );
    }
    // Ollama's layers are the model's settings: its window ceiling, its
    // system prompt and sampling defaults reach the child; a request's own
    // value wins.
    let argv = fake
        .spawns()
        .into_iter()
        .find(|s| s.argv.iter().any(|a| a.contains("sha256-abc")))
        .unwrap()
        .argv;
    let c = argv.iter().position(|a| a == "-c").map(|i| argv[i + 1].clone());
    assert_eq!(c.as_deref(), Some("2048"), "num_ctx: {argv:?}");
    let sent = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r["messages"].is_array())
        .unwrap();
    assert_eq!(
        sent["messages"][0],
        serde_json::json!({"role": "system", "content": "You are a tiny model."})
    );
    assert_eq!(sent["stop"], serde_json::json!(["<|end|>"]), "{sent}");
    assert_eq!(sent["temperature"], 0, "the request's own temperature wins: {sent}");
    w.shutdown().await;
    assert_eq!(snapshot(stores_dir.path()), before, "the stores were written to");
}

/// A store model's verdict is kept per file, and a file that changes is
/// judged again: a truncated download is unusable, the finished one at the
/// same path serves.
#[test]
fn a_finished_download_is_judged_again() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("llama-cache");
    std::fs::create_dir_all(&cache).unwrap();
    let file = cache.join("late.gguf");
    std::fs::write(&file, b"GGUF").unwrap();
    let stores = Stores {
        llama_cache: Some(cache.clone()),
        ..Stores::none()
    };
    let scan = || {
        let mut c = llm_warden::catalog::Catalog::default();
        c.add_stores(&stores);
        c
    };
    let first = scan();
    assert_eq!(first.unusable().len(), 1, "{:?}", first.entries());
    assert_eq!(scan().unusable().len(), 1, "the kept verdict");
    write_llama_gguf(&file, 4096);
    let done = scan();
    assert!(done.unusable().is_empty(), "{:?}", done.unusable());
    assert!(done.get("late").is_some());
}
