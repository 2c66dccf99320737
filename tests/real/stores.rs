//! A real model in another tool's store, as that tool lays it out, served
//! by the real llama-server: SmolLM2 as an Ollama blob (no `.gguf` name,
//! named by a manifest) and as a Hugging Face cache snapshot (a symlink
//! into `blobs/`).

use crate::support;

use llm_warden::catalog::Source;
use llm_warden::catalog::stores::Stores;
use support::*;

#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_real_model_in_ollamas_and_the_hubs_layout_answers() {
    let (server, model) = (real_llama_server(), real_model(SMOLLM2));
    let root = tempfile::tempdir().unwrap();
    let ollama = root.path().join("ollama");
    std::fs::create_dir_all(ollama.join("blobs")).unwrap();
    std::os::unix::fs::symlink(&model, ollama.join("blobs/sha256-5m011m2")).unwrap();
    let m = ollama.join("manifests/registry.ollama.ai/library/smollm2");
    std::fs::create_dir_all(&m).unwrap();
    // Its template, system and params layers, as `ollama create` writes them.
    let template = "{{ .System }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n<|im_start|>assistant\n";
    std::fs::write(ollama.join("blobs/sha256-7e3"), template).unwrap();
    std::fs::write(ollama.join("blobs/sha256-5y5"), "You are a careful assistant.").unwrap();
    std::fs::write(ollama.join("blobs/sha256-9a2"), r#"{"num_ctx": 1024, "stop": [" "]}"#).unwrap();
    let manifest = serde_json::json!({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:5m011m2"},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:7e3"},
        {"mediaType": "application/vnd.ollama.image.system", "digest": "sha256:5y5"},
        {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:9a2"}]});
    std::fs::write(m.join("135m"), manifest.to_string()).unwrap();
    let repo = root
        .path()
        .join("hub/models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF");
    std::fs::create_dir_all(repo.join("snapshots/abc")).unwrap();
    std::os::unix::fs::symlink(&model, repo.join("snapshots/abc/smollm2-135m-instruct-q4_1.gguf")).unwrap();
    let stores = Stores {
        ollama: Some(ollama),
        hugging_face: Some(root.path().join("hub")),
        ..Stores::none()
    };
    let own = tempfile::tempdir().unwrap();
    let w = TestWarden::real_cpu(server, own.path())
        .config(test_config())
        .stores(stores)
        .start();
    for (id, source) in [
        ("smollm2:135m", Source::Ollama),
        ("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", Source::HuggingFace),
    ] {
        assert_eq!(w.catalog().source_of(id), source, "{id}");
        let t = collect(w.submit(chat(Some(id), 8, true)).unwrap()).await;
        assert!(t.done && !t.text().is_empty(), "{id}: {t:?}");
    }
    // Ollama's layers are that model's settings, by their effect on the
    // real child: its window ceiling, and a stop of a space that ends the
    // answer at its first word (the hub's copy of the same file has none).
    let ollama_ctx = w
        .status()
        .residents
        .iter()
        .find(|r| r.model == "smollm2:135m")
        .unwrap()
        .context_tokens;
    assert_eq!(ollama_ctx, Some(1024));
    let long = |id: &'static str| {
        let req = llm_warden::TurnRequest::new(
            llm_warden::status::Route::Chat,
            serde_json::json!({"max_tokens": 24, "temperature": 0,
                "messages": [{"role": "user", "content": "Write two sentences about the sea."}]})
            .as_object()
            .unwrap()
            .clone(),
        )
        .model(Some(id.to_string()))
        .stream(true);
        collect(w.submit(req).unwrap())
    };
    let (ollama_answer, hub_answer) = (
        long("smollm2:135m").await,
        long("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF").await,
    );
    assert!(!ollama_answer.text().trim().contains(' '), "{:?}", ollama_answer.text());
    assert!(hub_answer.text().trim().contains(' '), "{:?}", hub_answer.text());
    // Ollama's /api/show says its own template and system.
    let base = serve_http(&w);
    let (s, v) = post(&base, "/api/show", serde_json::json!({"model": "smollm2:135m"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["template"], template, "{v}");
    assert_eq!(v["system"], "You are a careful assistant.", "{v}");
    assert!(
        v["parameters"]
            .as_str()
            .is_some_and(|p| p.contains("num_ctx 1024") && p.contains("stop \" \"")),
        "{v}"
    );
    w.shutdown().await;
}

/// Ollama's `/api/show` says the model's own chat template, its details
/// from the header (family, parameter size, quantization) and its
/// settings as parameters; `/api/tags` the same details.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn ollamas_show_says_the_template_the_details_and_the_settings() {
    let cfg = llm_warden::WardenConfig::from_sources(
        |_| None,
        Some((
            llm_warden::config::file::parse("[models.smollm2]\nparallel = 2\nctx = 4096\n").unwrap(),
            "w.toml".into(),
        )),
    )
    .unwrap();
    let (w, _dir) = real_smollm_warden(llm_warden::WardenConfig {
        models: cfg.models,
        ..test_config()
    });
    let base = serve_http(&w);
    let (s, v) = post(&base, "/api/show", serde_json::json!({"model": "smollm2"})).await;
    assert_eq!(s, 200, "{v}");
    assert!(
        v["template"].as_str().is_some_and(|t| t.contains("<|im_start|>")),
        "{v}"
    );
    assert_eq!(v["parameters"], "num_ctx 4096\nnum_parallel 2");
    assert!(
        v["modelfile"]
            .as_str()
            .is_some_and(|m| m.contains("PARAMETER num_ctx 4096") && m.contains("TEMPLATE"))
    );
    let d = &v["details"];
    assert_eq!(
        (d["family"].as_str(), d["quantization_level"].as_str()),
        (Some("llama"), Some("Q4_1")),
        "{d}"
    );
    assert!(d["parameter_size"].as_str().is_some_and(|p| !p.is_empty()), "{d}");
    let tags: serde_json::Value = json_of(reqwest::Client::new().get(format!("{base}/api/tags"))).await;
    assert_eq!(tags["models"][0]["details"], *d);
    w.shutdown().await;
}

/// Sampling defaults and a system prompt from the settings, by their effect
/// on the real child: a default `stop` of a space ends the answer at its
/// first word unless the request sets its own, and a long system prompt is
/// read in every chat that has none.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn sampling_defaults_and_a_system_prompt_reach_the_child() {
    let (server, model) = (real_llama_server(), real_model(SMOLLM2));
    let dir = tempfile::tempdir().unwrap();
    for id in ["plain", "tuned"] {
        std::os::unix::fs::symlink(&model, dir.path().join(format!("{id}.gguf"))).unwrap();
    }
    let system = "You are a careful assistant. ".repeat(12);
    let text =
        format!("[models.tuned]\nsystem = \"{system}\"\n[models.tuned.sampling]\nstop = [\" \"]\ntemperature = 0\n");
    let f = llm_warden::config::file::parse(&text).unwrap();
    let w = TestWarden::real_cpu(server, dir.path())
        .default_model("plain")
        .config(llm_warden::WardenConfig {
            models: f.models,
            ..test_config()
        })
        .start();
    let base = serve_http(&w);
    let ask = |model: &'static str, extra: serde_json::Value| {
        let base = base.clone();
        async move {
            let mut body = serde_json::json!({"model": model, "max_tokens": 24, "temperature": 0,
                "messages": [{"role": "user", "content": "Write two sentences about the sea."}]});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let (s, v) = post(&base, "/v1/chat/completions", body).await;
            assert_eq!(s, 200, "{v}");
            v
        }
    };
    let plain = ask("plain", serde_json::json!({})).await;
    let tuned = ask("tuned", serde_json::json!({})).await;
    let answer = |v: &serde_json::Value| {
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        answer(&plain).trim().contains(' '),
        "no default on the plain model: {:?}",
        answer(&plain)
    );
    assert!(
        !answer(&tuned).trim().contains(' '),
        "the default stop ended it at a word: {:?}",
        answer(&tuned)
    );
    let own = ask("tuned", serde_json::json!({"stop": ["\n"]})).await;
    assert!(
        answer(&own).trim().contains(' '),
        "the request's own stop wins: {:?}",
        answer(&own)
    );
    let read = |v: &serde_json::Value| v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        read(&tuned) > read(&plain) + 40,
        "the system prompt was read: {} vs {}",
        read(&tuned),
        read(&plain)
    );
    w.shutdown().await;
}
