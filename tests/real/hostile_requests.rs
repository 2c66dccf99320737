//! The requests a hostile client sent that llama-server b10883 answered
//! with a 500 or with unbounded work, against the real llama-server and
//! SmolLM2 over HTTP: each is now a 400 `invalid_request_error` naming the
//! field, before any turn (the child keeps its pid); the token bound the
//! warden folds is the one the child obeys; and a short conversation with
//! a large `max_tokens` is not saved to the KV store (the child's own count
//! decides, not the request's size).

use crate::support;

use llm_warden::WardenConfig;
use serde_json::{Value, json};
use support::*;

fn user(content: Value) -> Value {
    json!({"messages": [{"role": "user", "content": content}], "max_tokens": 4})
}

fn chat(extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// Each of the 500s is a 400 naming its field, the child untouched.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn the_childs_500s_are_400s_that_name_the_field() {
    let (w, _dir) = real_smollm_warden(test_config());
    let base = serve_http(&w);
    let (s, _) = post(&base, "/v1/chat/completions", &chat(json!({}))).await;
    assert_eq!(s, 200);
    let pid = w.status().child_pid;
    let rows: Vec<(Value, &str)> = vec![
        (user(json!([{"type": "text"}])), "messages[0].content[0].text"),
        (
            user(json!([{"type": "text", "text": 1}])),
            "messages[0].content[0].text",
        ),
        (chat(json!({"tools": "calc"})), "tools"),
        (chat(json!({"tools": [3]})), "tools[0]"),
        (
            chat(json!({"tools": [{"type": "function", "function": {"name": 5}}]})),
            "tools[0].function.name",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": "x"}], "max_tokens": 4}),
            "messages[1].tool_calls",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [1]}], "max_tokens": 4}),
            "messages[1].tool_calls[0]",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a", "name": 7}], "max_tokens": 4}),
            "messages[0].name",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": "a", "reasoning_content": 3}, {"role": "user", "content": "b"}]}),
            "messages[0].reasoning_content",
        ),
        (chat(json!({"reasoning_format": 7})), "reasoning_format"),
        (
            user(json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}])),
            "messages[0].content[0]",
        ),
        (
            user(json!([{"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}])),
            "messages[0].content[0]",
        ),
        // The bound: a native field of the wrong type, and numbers past i32.
        (chat(json!({"n_predict": "x"})), "n_predict"),
        (
            chat(json!({"max_completion_tokens": u64::MAX})),
            "max_completion_tokens",
        ),
        (chat(json!({"max_tokens": 4_294_967_300u64})), "max_tokens"),
        (json!({"prompt": "a", "n_predict": -1}), "n_predict"),
    ];
    for (i, (body, param)) in rows.iter().enumerate() {
        let path = if body.get("prompt").is_some() {
            "/v1/completions"
        } else {
            "/v1/chat/completions"
        };
        let (s, e) = post(&base, path, body).await;
        let err = &e["error"];
        assert_eq!(
            (s, err["type"].as_str(), err["param"].as_str()),
            (400, Some("invalid_request_error"), Some(*param)),
            "row {i}: {e}"
        );
        assert!(
            err["message"].as_str().is_some_and(|m| m.contains(param)),
            "row {i}: {e}"
        );
    }
    assert_eq!(w.status().child_pid, pid, "no request reached the child as a crash");
    w.shutdown().await;
}

/// The warden's bound is the one the child obeys: of `n_predict: 50` and
/// `max_tokens: 3` (llama-server alone takes the first present, 50), the
/// answer has 3 tokens; and with no bound at all the answer is bounded by
/// the window.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn the_folded_bound_is_what_the_child_generates() {
    let cfg = WardenConfig {
        ctx_pin: Some(4096),
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    let body = json!({
        "messages": [{"role": "user", "content": "Count from one to one hundred in words."}],
        "n_predict": 50, "max_tokens": 3, "ignore_eos": true, "temperature": 0,
    });
    let (s, a) = post(&base, "/v1/chat/completions", &body).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["usage"]["completion_tokens"], 3, "{a}");
    let (s, a) = post(
        &base,
        "/v1/completions",
        &json!({"prompt": "One, two,", "max_completion_tokens": 2, "max_tokens": 9, "ignore_eos": true}),
    )
    .await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["usage"]["completion_tokens"], 2, "{a}");
    w.shutdown().await;
}

/// A conversation of a few dozen tokens asked with `max_tokens: 400` is
/// under the 256-token threshold as the child counts it: an unload does
/// not save it.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_short_conversation_is_not_saved_whatever_its_max_tokens() {
    let kv = tempfile::tempdir().unwrap();
    let cfg = WardenConfig {
        kv_save_dir: Some(kv.path().to_path_buf()),
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    let mut ev = w.subscribe();
    let body = json!({
        "messages": [{"role": "user", "content": "Say yes."}],
        "max_tokens": 400, "temperature": 0, "keep_alive": 0,
    });
    let (s, a) = post(&base, "/v1/chat/completions", &body).await;
    assert_eq!(s, 200, "{a}");
    let held = a["usage"]["total_tokens"].as_u64().unwrap();
    assert!(held < 256, "a short conversation: {held} tokens");
    event_or_fail(&mut ev, "the unload after a keep_alive 0 turn", |e| {
        matches!(e, llm_warden::status::WardenEvent::Unloaded { .. })
    })
    .await;
    assert_eq!(
        w.status().kv_saves.map_or(0, |k| k.count),
        0,
        "nothing saved for {held} tokens"
    );
    w.shutdown().await;
}
