//! The dialects' HTTP surface over the fake child (and an MLX warden that
//! never starts one): each dialect's 400 for malformed bodies, the Ollama
//! translation's NDJSON and a death mid-stream ending it with Ollama's error
//! line (code and raw), keep-alive in Ollama's forms, server detection and
//! the model management refusals, a refused key and an unknown route in the
//! path's dialect, and the routes mlx_vlm.server cannot serve answering 501
//! in each dialect's shape.

use crate::support;

use std::path::Path;

use llm_warden::engines::{Backend, MlxEngine};
use llm_warden::{Warden, WardenConfig};
use serde_json::{Value, json};
use support::*;

fn serve(dir: &Path, cfg: WardenConfig) -> (Warden, String) {
    let w = TestWarden::fake(dir).config(cfg).start();
    let base = serve_http(&w);
    (w, base)
}

/// The NDJSON lines of an answer.
async fn ndjson(base: &str, path: &str, body: Value) -> Vec<Value> {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().await.unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A malformed body is a 400 naming the field, in the shape of the route's
/// dialect; the engine never sees it.
#[actix_rt::test]
async fn malformed_bodies_answer_400_in_each_dialects_shape() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({}));
    let (w, base) = serve(dir.path(), test_config());
    let anthropic = |param: &str| json!({"type": "error", "param": param});
    // (path, body, param, shape: the pointer to the message, and to param)
    let rows = [
        // why: Anthropic's shape, {"type": "error", "error": {...}}
        (
            "/v1/messages",
            json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2147483648u64}),
            "max_tokens",
            "/error/message",
            "/error/param",
        ),
        (
            "/v1/messages/count_tokens",
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            "messages[0].role",
            "/error/message",
            "/error/param",
        ),
        (
            "/v1/messages",
            json!({"messages": [{"role": "user", "content": "x"}], "stop_sequences": [1]}),
            // why: the typed request names the item, as chat's `stop[1]`
            "stop_sequences[0]",
            "/error/message",
            "/error/param",
        ),
        // why: OpenAI's shape for Responses and the counters
        (
            "/v1/responses",
            json!({"input": "x", "max_output_tokens": -1}),
            "max_output_tokens",
            "/error/message",
            "/error/param",
        ),
        (
            "/v1/responses/input_tokens",
            json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
            "input[0].content[0].text",
            "/error/message",
            "/error/param",
        ),
        (
            "/v1/chat/completions/input_tokens",
            json!({"messages": []}),
            "messages",
            "/error/message",
            "/error/param",
        ),
        (
            "/apply-template",
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            "messages[0].role",
            "/error/message",
            "/error/param",
        ),
        // why: Ollama's shape, {"error": "..."}, its field beside
        (
            "/api/chat",
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "options": {"top_k": "many"}}),
            "options.top_k",
            "/error",
            "/param",
        ),
        (
            "/api/generate",
            json!({"model": "m", "prompt": "x", "stream": "yes"}),
            "stream",
            "/error",
            "/param",
        ),
        (
            "/api/chat",
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "keep_alive": "soon"}),
            "keep_alive",
            "/error",
            "/param",
        ),
        // why: images for a model without a projector are refused here, where llama-server would answer 500
        (
            "/api/chat",
            json!({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}),
            "",
            "/error",
            "/code",
        ),
        // why: the front door decides on the model it resolved, and names the image's part
        (
            "/v1/messages",
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "aGk="}}]}]}),
            "messages[0].content[0]",
            "/error/message",
            "/error/param",
        ),
        // why: counting an image's tokens needs the projector too (the same check beside a turn)
        (
            "/v1/messages/count_tokens",
            json!({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                                {"role": "user", "content": [{"type": "text", "text": "z"}, {"type": "image", "source": {"type": "url", "url": "http://x/i.png"}}]}]}),
            "messages[2].content[1]",
            "/error/message",
            "/error/param",
        ),
        (
            "/v1/responses",
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,aGk="}]}]}),
            "input[0].content[0]",
            "/error/message",
            "/error/param",
        ),
        // why: the translated body still passes chat's own rules
        (
            "/api/chat",
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "options": {"seed": -4}}),
            "seed",
            "/error",
            "/param",
        ),
    ];
    for (i, (path, body, param, message, at)) in rows.into_iter().enumerate() {
        let (s, v) = post(&base, path, body).await;
        assert_eq!(s, 400, "row {i}: {v}");
        assert!(
            v.pointer(message)
                .and_then(Value::as_str)
                .is_some_and(|m| !m.is_empty()),
            "row {i}: {v}"
        );
        // An empty param: the refusal names no field, its code says why.
        let want = if param.is_empty() { "unsupported_value" } else { param };
        assert_eq!(v.pointer(at).and_then(Value::as_str), Some(want), "row {i}: {v}");
        if path.starts_with("/v1/messages") {
            assert_eq!(v["type"], anthropic(want)["type"], "row {i}: {v}");
            assert_eq!(v["error"]["type"], "invalid_request_error", "row {i}: {v}");
        }
    }
    assert_eq!(w.status().child_pid, None, "no refused body reached the engine");
    w.shutdown().await;
}

/// An Ollama chat streams NDJSON (the loading notices as lines of their
/// own), ends with the reason and durations; a child that dies mid-stream
/// ends it with Ollama's error line carrying the code and the child's tail.
#[actix_rt::test]
async fn ollama_ndjson_and_a_death_mid_stream() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 4}));
    fake_model(dir.path(), "dies", json!({"tokens": 8, "die_after": 2}));
    let (w, base) = serve(dir.path(), test_config());
    let lines = ndjson(
        &base,
        "/api/chat",
        json!({"model": "m:latest", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(lines[0]["warden"]["t"], "loading", "{lines:?}");
    assert_eq!(lines[1]["warden"]["t"], "loaded", "{lines:?}");
    let last = lines.last().unwrap();
    assert_eq!(
        (last["done"].as_bool(), last["model"].as_str()),
        (Some(true), Some("m:latest")),
        "{last}"
    );
    assert!(last["load_duration"].as_u64().is_some_and(|n| n > 0), "{last}");
    let text: String = lines.iter().filter_map(|l| l["message"]["content"].as_str()).collect();
    assert!(!text.is_empty(), "{lines:?}");
    // why: a whole answer is one object
    let (s, whole) = post(
        &base,
        "/api/generate",
        json!({"model": "m", "prompt": "hi", "stream": false}),
    )
    .await;
    assert_eq!(
        (s, whole["done"].as_bool(), whole["response"].as_str().is_some()),
        (200, Some(true), true),
        "{whole}"
    );
    let lines = ndjson(
        &base,
        "/api/chat",
        json!({"model": "dies", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    let last = lines.last().unwrap();
    assert!(last["error"].as_str().is_some_and(|e| !e.is_empty()), "{lines:?}");
    assert!(last["code"].as_str().is_some_and(|c| !c.is_empty()), "{last}");
    assert!(last["raw"].as_str().is_some(), "the child's tail rides beside: {last}");
    w.shutdown().await;
}

/// Ollama's keep-alive forms set the idle deadline; a bare load says `load`.
#[actix_rt::test]
async fn keep_alive_in_ollamas_forms() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 2}));
    let (w, base) = serve(dir.path(), test_config());
    // (keep_alive, the status's keep_alive_s)
    let rows = [
        // why: a duration string, a number of seconds, negative forever
        (json!("5m"), 300.0),
        (json!(90), 90.0),
        (json!(-1), -1.0),
        (json!("1h30m"), 5400.0),
    ];
    for (i, (k, secs)) in rows.into_iter().enumerate() {
        let body =
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false, "keep_alive": k});
        let (s, v) = post(&base, "/api/chat", body).await;
        assert_eq!(s, 200, "row {i}: {v}");
        assert_eq!(w.status().keep_alive_s, Some(secs), "row {i}");
    }
    let (s, v) = post(&base, "/api/generate", json!({"model": "m", "keep_alive": "2m"})).await;
    assert_eq!((s, v["done_reason"].as_str()), (200, Some("load")), "{v}");
    assert_eq!(w.status().keep_alive_s, Some(120.0));
    w.shutdown().await;
}

/// `/` and `HEAD /` answer as Ollama does; the version; the management
/// routes and embeddings refuse with what to do instead; a refused key and
/// an unknown route take the path's dialect.
#[actix_rt::test]
async fn detection_refusals_and_shapes_before_a_handler() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({}));
    let (w, base) = serve(dir.path(), test_config());
    let c = reqwest::Client::new();
    let r = c.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (200, "Ollama is running".to_string())
    );
    assert_eq!(c.head(format!("{base}/")).send().await.unwrap().status(), 200);
    let v: Value = c
        .get(format!("{base}/api/version"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(v["version"].as_str().is_some_and(|s| s.split('.').count() == 3), "{v}");
    // A pull names a Hugging Face model; one of Ollama's registry is refused
    // with what to do (tests/fake/pull.rs pulls one).
    let (s, v) = post(&base, "/api/pull", json!({"model": "llama3.2"})).await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("hf.co/ORG/NAME")), "{v}");
    for (path, says) in [("/api/create", "Modelfile"), ("/api/push", "registry")] {
        let (s, v) = post(&base, path, json!({"model": "m"})).await;
        assert_eq!((s, v["code"].as_str()), (501, Some("unsupported_route")), "{path}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| e.contains(says)), "{path}: {v}");
    }
    let r = c
        .delete(format!("{base}/api/delete"))
        .json(&json!({"model": "m"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 501);
    // A copy is an alias in the settings file: with none in use, a 501
    // that says how to have one (tests/fake/live_settings.rs: with one).
    let (s, v) = post(&base, "/api/copy", json!({"source": "m", "destination": "m2"})).await;
    assert_eq!((s, v["code"].as_str()), (501, Some("unsupported_route")), "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("settings file")), "{v}");
    // The embeddings are served (tests/real/embeddings_http.rs); a model the
    // catalog does not hold is Ollama's 404 there too.
    let (s, v) = post(&base, "/api/embed", json!({"model": "nope", "input": "x"})).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("model_not_found")), "{v}");
    let (s, v) = post(&base, "/api/nothing", json!({})).await;
    assert_eq!((s, v["error"].is_string()), (404, true), "{v}");
    let (s, v) = post(&base, "/api/show", json!({"model": "nope"})).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("model_not_found")), "{v}");
    w.shutdown().await;

    let cfg = WardenConfig {
        api_key: Some("sesame".into()),
        ..test_config()
    };
    let (w, base) = serve(dir.path(), cfg);
    let (s, v) = post(&base, "/v1/messages", json!({})).await;
    assert_eq!(
        (s, v["type"].as_str(), v["error"]["type"].as_str()),
        (401, Some("error"), Some("authentication_error")),
        "{v}"
    );
    let (s, v) = post(&base, "/api/chat", json!({})).await;
    assert_eq!(
        (s, v["code"].as_str(), v["error"].is_string()),
        (401, Some("invalid_api_key"), true),
        "{v}"
    );
    // why: Anthropic's SDKs send the key as x-api-key
    let r = c
        .get(format!("{base}/api/tags"))
        .header("x-api-key", "sesame")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    w.shutdown().await;
}

/// On the MLX engine, whose mlx_vlm.server has only chat, every dialect
/// route but Ollama's chat answers 501 `unsupported_route` in its own shape,
/// before any child starts.
#[actix_rt::test]
async fn mlx_refuses_what_its_server_cannot_serve_in_each_dialect() {
    let dir = tempfile::tempdir().unwrap();
    let engine = MlxEngine {
        python: "/nonexistent/python".into(),
        runner: "/nonexistent/runner.py".into(),
        cache_home: dir.path().into(),
    };
    let w = TestWarden::backend(Backend::Mlx(engine), dir.path()).start();
    let base = serve_http(&w);
    let user = json!([{"role": "user", "content": "x"}]);
    // (path, body, pointer to the code)
    let rows = [
        (
            "/v1/messages",
            json!({"messages": user, "max_tokens": 4}),
            "/error/code",
        ),
        ("/v1/messages/count_tokens", json!({"messages": user}), "/error/code"),
        ("/v1/responses", json!({"input": "x"}), "/error/code"),
        ("/v1/responses/input_tokens", json!({"input": "x"}), "/error/code"),
        (
            "/v1/chat/completions/input_tokens",
            json!({"messages": user}),
            "/error/code",
        ),
        ("/apply-template", json!({"messages": user}), "/error/code"),
        // why: a raw generate is a raw completion, which mlx_vlm.server lacks
        ("/api/generate", json!({"prompt": "x", "raw": true}), "/code"),
    ];
    for (i, (path, body, code)) in rows.into_iter().enumerate() {
        let (s, v) = post(&base, path, body).await;
        assert_eq!(
            (s, v.pointer(code).and_then(Value::as_str)),
            (501, Some("unsupported_route")),
            "row {i} {path}: {v}"
        );
    }
    assert_eq!(w.status().child_pid, None);
    w.shutdown().await;
}

/// A model resolved once (`Warden::resolve`) is what the turn runs: `submit`
/// takes the carried entry and capabilities as they are instead of looking
/// the model up again (here, capabilities that say embedding refuse a
/// chat turn on a chat model), and a catalog change after the resolve does
/// not move the turn. The route is refused before the model, resolved or
/// not.
#[actix_rt::test]
async fn a_turn_runs_the_model_its_face_resolved() {
    use llm_warden::law::route::Route;
    use llm_warden::law::types::ModelKind;
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 2}));
    let w = TestWarden::fake(dir.path()).start();
    assert_eq!(w.resolve(Some("nope")).unwrap_err().code(), "model_not_found");
    let mut r = w.resolve(Some("m")).unwrap();
    assert_eq!(r.entry.id, "m");
    r.caps.kind = ModelKind::Embedding;
    let e = w.submit(chat(None, 2, false).resolved(r.clone())).unwrap_err();
    assert_eq!(e.code(), "wrong_model_kind", "the carried capabilities decide: {e}");
    assert_eq!(w.queue_depth(), 0);
    // The true value runs, named by its entry whatever the request said.
    let ok = collect(
        w.submit(chat(Some("other"), 2, true).resolved(w.resolve(None).unwrap()))
            .unwrap(),
    )
    .await;
    assert!(ok.done && ok.error.is_none(), "{ok:?}");
    assert_eq!(w.status().model.as_deref(), Some("m"));
    w.shutdown().await;

    // MLX serves chat only: a completion is refused for its route first,
    // even for a model that is not there.
    let engine = MlxEngine {
        python: "/nonexistent/python".into(),
        runner: "/nonexistent/runner.py".into(),
        cache_home: dir.path().into(),
    };
    let empty = tempfile::tempdir().unwrap();
    let w = TestWarden::backend(Backend::Mlx(engine), empty.path()).start();
    let e = w.resolve_for(Route::Completions, Some("nope")).unwrap_err();
    assert_eq!(e.code(), "unsupported_route");
    assert_eq!(
        w.resolve_for(Route::Chat, Some("nope")).unwrap_err().code(),
        "model_not_found"
    );
    w.shutdown().await;
}

/// An embedder's turn that needs what its model cannot take (an image and
/// no projector, an infill and no fill-in-the-middle tokens) is refused by
/// `submit` itself, on the model it resolved, before it queues or loads.
#[actix_rt::test]
async fn submit_refuses_what_the_resolved_model_cannot_take() {
    use llm_warden::law::request_chat::Needs;
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({}));
    let w = TestWarden::fake(dir.path()).start();
    let rows = [
        (
            Needs::image_at(Some("messages[0].content[1]".into())),
            "messages[0].content[1]",
        ),
        (Needs::infill(true), "model"),
    ];
    for (i, (needs, param)) in rows.into_iter().enumerate() {
        let e = w.submit(chat(Some("m"), 4, false).needs(needs)).unwrap_err();
        let api = e.to_api();
        assert_eq!(
            (api.status, api.code.as_str(), api.param.as_deref()),
            (400, "unsupported_value", Some(param)),
            "row {i}: {e}"
        );
        assert!(
            api.message.contains("'m'"),
            "row {i}: the model is named: {}",
            api.message
        );
    }
    assert_eq!(w.status().child_pid, None, "nothing was loaded for a refused turn");
    assert_eq!(w.queue_depth(), 0);
    // The default model with nothing needed still answers.
    let ok = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert!(ok.done && ok.error.is_none(), "{ok:?}");
    w.shutdown().await;
}
