//! The natively relayed dialects against the real llama-server and SmolLM2
//! over HTTP: the loading notices as SSE comments in a Messages stream; the
//! token counters and `/apply-template` answered while that stream runs;
//! a child killed mid-stream ending a Messages and a Responses stream with
//! each dialect's error event (code and the child's tail); and two Messages
//! conversations taking turns, each coming back to its saved KV cache, with
//! the keep-alive they asked for.

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use llm_warden::WardenConfig;
use llm_warden::status::{EngineState, WardenEvent};
use serde_json::{Value, json};
use support::*;

/// `support::post_with`, in a conversation when one is named.
async fn post(base: &str, path: &str, body: Value, conversation: Option<&str>) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = conversation.map(|c| ("X-Warden-Conversation", c)).into_iter().collect();
    post_with(base, path, body, &headers).await
}

/// A long greedy Messages or Responses stream's request.
fn long(path: &str) -> Value {
    let ask = "Count from one to one thousand.";
    match path {
        "/v1/messages" => json!({"messages": [{"role": "user", "content": ask}], "max_tokens": 400,
                                 "stream": true, "temperature": 0, "ignore_eos": true}),
        _ => json!({"input": ask, "max_output_tokens": 400, "stream": true, "temperature": 0, "ignore_eos": true}),
    }
}

/// How long a stream may stay silent before the test calls it a hang.
const SILENCE: Duration = Duration::from_secs(60);

/// The next piece of `body`, or `None` at its end; fails after `SILENCE`
/// without one, naming `what` was awaited.
async fn next_chunk(
    body: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    what: &str,
) -> Option<bytes::Bytes> {
    tokio::time::timeout(SILENCE, body.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: the stream stayed silent for {SILENCE:?}"))
        .map(Result::unwrap)
}

/// Reads `body` until `needle` has arrived; what was read.
async fn read_until(
    body: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    needle: &str,
) -> String {
    let mut seen = String::new();
    while !seen.contains(needle) {
        let chunk = next_chunk(body, needle).await.expect("the stream went on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

/// The counters and the template never wait behind a generation: each is
/// answered while a Messages stream still runs (queued, it would come only
/// after the turn). That stream, the first request, carries the loading
/// notices as comments before Anthropic's first event.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn counters_and_the_template_answer_beside_a_messages_stream() {
    let (w, _dir) = real_smollm_warden(test_config());
    let base = serve_http(&w);
    let mut ev = w.subscribe();
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/messages"))
        .json(&long("/v1/messages"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let mut body = r.bytes_stream();
    let seen = read_until(&mut body, "event: content_block_delta").await;
    assert!(seen.starts_with(": warden {\"t\":\"loading\""), "{seen}");
    assert!(seen.contains(": warden {\"t\":\"loaded\""), "{seen}");
    assert!(
        seen.find("event: message_start") > seen.find("\"t\":\"loaded\""),
        "{seen}"
    );
    assert_eq!(w.status().state, EngineState::Generating);
    let user = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let (s, a) = post(&base, "/v1/messages/count_tokens", json!({"messages": user}), None).await;
    assert_eq!(s, 200, "{a}");
    let (s, c) = post(
        &base,
        "/v1/chat/completions/input_tokens",
        json!({"messages": user}),
        None,
    )
    .await;
    assert_eq!(s, 200, "{c}");
    let (s, r) = post(&base, "/v1/responses/input_tokens", json!({"input": user}), None).await;
    assert_eq!(s, 200, "{r}");
    let (s, t) = post(&base, "/apply-template", json!({"messages": user}), None).await;
    assert_eq!(s, 200, "{t}");
    // why: the same prompt through three dialects is the same token count
    let n = a["input_tokens"].as_u64().unwrap();
    assert!(n > 5 && c["input_tokens"] == n && r["input_tokens"] == n, "{a} {c} {r}");
    assert!(
        t["prompt"].as_str().unwrap().contains("What is the capital of France?"),
        "{t}"
    );
    assert_eq!(w.status().state, EngineState::Generating, "the turn was still running");
    assert!(
        !std::iter::from_fn(|| ev.try_recv().ok()).any(|e| matches!(e, WardenEvent::TurnEnded { .. })),
        "no turn ended before the counters answered"
    );
    drop(body);
    w.shutdown().await;
}

/// A child killed mid-stream ends a Messages stream with Anthropic's
/// `event: error` and a Responses stream with its `event: error`, each
/// carrying the warden's code and the child's output tail.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_death_mid_stream_ends_each_stream_with_its_dialects_error() {
    // why: the error's shape is what a turn that does not go on ends with
    let cfg = WardenConfig {
        resume_turns: 0,
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    // (path, the first token's event, the pointer to the code, to the tail)
    let rows = [
        (
            "/v1/messages",
            "event: content_block_delta",
            "/error/code",
            "/error/raw",
        ),
        (
            "/v1/responses",
            "event: response.output_text.delta",
            "/code",
            "/error/raw",
        ),
    ];
    for (path, first, code, raw) in rows {
        let r = reqwest::Client::new()
            .post(format!("{base}{path}"))
            .json(&long(path))
            .send()
            .await
            .unwrap();
        let mut body = r.bytes_stream();
        read_until(&mut body, first).await;
        let pid = w.status().child_pid.expect("a child answers");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let mut rest = String::new();
        while let Some(chunk) = next_chunk(&mut body, "the end after the kill").await {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
        let last = rest.trim_end().rsplit("\n\n").next().unwrap();
        let data = last
            .strip_prefix("event: error\ndata: ")
            .unwrap_or_else(|| panic!("{path}: the stream ends with an error event: {last}"));
        let v: Value = serde_json::from_str(data).unwrap();
        assert!(
            v.pointer(code).and_then(Value::as_str).is_some_and(|c| !c.is_empty()),
            "{path}: {v}"
        );
        assert!(
            v.pointer(raw).and_then(Value::as_str).is_some(),
            "{path}: the tail rides beside: {v}"
        );
        if path == "/v1/messages" {
            assert_eq!(v["type"], "error", "{v}");
        }
    }
    w.shutdown().await;
}

/// Two Messages conversations taking turns on the one slot: each comes
/// back to its saved KV cache (Anthropic's `cache_read_input_tokens`), as
/// chat's do.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn messages_conversations_come_back_to_their_kv() {
    let kv = tempfile::tempdir().unwrap();
    let cfg = WardenConfig {
        kv_save_dir: Some(kv.path().to_path_buf()),
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    let open =
        |topic: &str| vec![json!({"role": "user", "content": format!("{topic}. {}\nSay one word.", long_text(30))})];
    let turn = |messages: &Vec<Value>| json!({"messages": messages, "max_tokens": 8, "temperature": 0});
    let (mut a, mut b) = (open("Apples"), open("Boats"));
    for (conv, m) in [("a", &mut a), ("b", &mut b)] {
        let mut body = turn(m);
        // why: keep_alive is honoured in every dialect, in Ollama's forms
        body["keep_alive"] = json!("7m");
        let (s, v) = post(&base, "/v1/messages", body, Some(conv)).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(w.status().keep_alive_s, Some(420.0));
        m.push(json!({"role": "assistant", "content": v["content"].clone()}));
        m.push(json!({"role": "user", "content": "Another word."}));
    }
    for (conv, m) in [("a", &a), ("b", &b)] {
        let (s, v) = post(&base, "/v1/messages", turn(m), Some(conv)).await;
        assert_eq!(s, 200, "{v}");
        let (read, reused) = (
            v["usage"]["input_tokens"].as_u64().unwrap(),
            v["usage"]["cache_read_input_tokens"].as_u64().unwrap(),
        );
        assert!(
            read < 48 && reused > 500,
            "{conv} came back to its cache: read {read}, reused {reused}"
        );
    }
    // Over the default four slots each kept its own: nothing went to disk.
    assert_eq!(w.status().kv_saves.map(|k| k.count), Some(0));
    let held: Vec<_> = w.status().slots.into_iter().filter_map(|s| s.conversation).collect();
    assert_eq!(held.len(), 2, "two slots hold the two conversations: {held:?}");
    w.shutdown().await;
}
