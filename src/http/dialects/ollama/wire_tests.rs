//! The NDJSON wire over scripted child events: lines, the last line's
//! reason and durations, notices, errors, whole bodies.

use serde_json::{Value, json};

use super::*;

fn wire(api: Api, target: Target, window: Option<u32>, num_ctx: Option<u64>) -> Ndjson {
    let status = EngineStatus {
        context_tokens: window,
        ..EngineStatus::default()
    };
    let (tx, rx) = tokio::sync::watch::channel(status);
    // The sender may go: the receiver keeps the last value.
    drop(tx);
    Ndjson::new(api, target, "smollm2:latest".into(), Instant::now(), num_ctx, rx)
}

fn sse(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// Every line `bytes` holds, parsed.
fn lines(bytes: Option<Bytes>) -> Vec<Value> {
    let Some(b) = bytes else { return Vec::new() };
    assert!(b.ends_with(b"\n"), "a line ends with a newline");
    b.split(|c| *c == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_chat_stream_becomes_lines() {
    let mut w = wire(Api::Chat, Target::Chat, Some(8192), Some(16384));
    // why: a role-only first chunk says nothing
    assert!(
        w.event(sse(&json!({"choices": [{"delta": {"role": "assistant"}}]})))
            .is_none()
    );
    let got = lines(w.event(sse(&json!({"choices": [{"delta": {"content": "Par"}}]}))));
    assert_eq!(
        (
            got[0]["message"]["content"].as_str(),
            got[0]["done"].as_bool(),
            got[0]["model"].as_str()
        ),
        (Some("Par"), Some(false), Some("smollm2:latest"))
    );
    // why: a notice is a line of its own that Ollama's clients read as empty text
    let n = lines(w.notice(&Notice::Loaded {
        model: "smollm2".into(),
        load_ms: 250,
    }));
    assert_eq!(
        (n[0]["message"]["content"].as_str(), n[0]["warden"]["t"].as_str()),
        (Some(""), Some("loaded"))
    );
    let fin = json!({"choices": [{"delta": {}, "finish_reason": "length"}],
                     "timings": {"prompt_n": 9, "prompt_ms": 10.0, "predicted_n": 3, "predicted_ms": 30.0}});
    assert!(w.event(sse(&fin)).is_none());
    let last = lines(w.event(Bytes::from_static(b"data: [DONE]\n\n")));
    let l = &last[0];
    assert_eq!(
        (l["done"].as_bool(), l["done_reason"].as_str()),
        (Some(true), Some("length"))
    );
    // why: the counts and durations are the child's, the load the warden's (ns)
    assert_eq!(
        (
            l["prompt_eval_count"].as_u64(),
            l["eval_count"].as_u64(),
            l["eval_duration"].as_u64(),
            l["load_duration"].as_u64()
        ),
        (Some(9), Some(3), Some(30_000_000), Some(250_000_000))
    );
    assert!(l["total_duration"].as_u64().is_some());
    // why: a num_ctx beyond the window is said capped
    assert_eq!(l["warden"][0]["t"], "num_ctx_capped");
    assert!(l["created_at"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn tool_calls_come_whole_before_the_end() {
    let mut w = wire(Api::Chat, Target::Chat, None, None);
    for d in [
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{\"a\""}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}, "finish_reason": "tool_calls"}]}),
    ] {
        assert!(w.event(sse(&d)).is_none());
    }
    let last = lines(w.event(Bytes::from_static(b"data: [DONE]\n\n")));
    assert_eq!(
        last[0]["message"]["tool_calls"],
        json!([{"function": {"name": "f", "arguments": {"a": 1}}}])
    );
    assert_eq!(last[0]["done_reason"], "stop");
    assert!(last[0].get("warden").is_none());
}

#[tokio::test]
async fn generate_and_infill_streams() {
    let mut w = wire(Api::Generate, Target::Completions, None, None);
    let got = lines(w.event(sse(&json!({"choices": [{"text": " Paris"}]}))));
    assert_eq!(got[0]["response"], " Paris");
    assert!(got[0].get("message").is_none());
    // why: infill's stream has no [DONE]: its stop is the end
    let mut w = wire(Api::Generate, Target::Infill, None, None);
    assert_eq!(
        lines(w.event(sse(&json!({"content": "x", "stop": false}))))[0]["response"],
        "x"
    );
    let last = lines(w.event(sse(&json!({"content": "", "stop": true, "stop_type": "limit"}))));
    assert_eq!(
        (last.len(), last[0]["done"].as_bool(), last[0]["done_reason"].as_str()),
        (1, Some(true), Some("length"))
    );
}

#[tokio::test]
async fn errors_end_the_stream_in_ollama_shape() {
    let mut w = wire(Api::Chat, Target::Chat, None, None);
    let e = ApiError {
        status: 500,
        message: "the model server died".into(),
        kind: "server_error",
        code: "child_crashed".into(),
        param: None,
        raw: Some("tail".into()),
    };
    // why: Ollama's clients raise on a line with "error"; code and raw ride beside
    let got = lines(Some(w.error(&e)));
    assert_eq!(
        got[0],
        json!({"error": "the model server died", "code": "child_crashed", "raw": "tail"})
    );
    // why: the child's own error event is said the same way, as the warden reads it
    let got = lines(w.event(sse(
        &json!({"error": {"code": 400, "message": "bad", "type": "invalid_request_error"}}),
    )));
    assert!(got[0]["error"].as_str().is_some_and(|m| m.contains("bad")), "{got:?}");
    assert!(got[0]["code"].as_str().is_some_and(|c| !c.is_empty()), "{got:?}");
}

#[tokio::test]
async fn a_whole_answer_is_one_object() {
    let mut w = wire(Api::Generate, Target::Chat, None, None);
    let body = json!({"choices": [{"message": {"content": "Paris", "reasoning_content": "hm"}, "finish_reason": "stop"}],
                      "timings": {"prompt_n": 5, "prompt_ms": 1.0, "predicted_n": 2, "predicted_ms": 2.0}});
    let n = [Notice::Loaded {
        model: "m".into(),
        load_ms: 3,
    }];
    let v: Value = serde_json::from_slice(&w.whole(Bytes::from(body.to_string()), &n).unwrap()).unwrap();
    assert_eq!(
        (v["response"].as_str(), v["thinking"].as_str(), v["done"].as_bool()),
        (Some("Paris"), Some("hm"), Some(true))
    );
    assert_eq!(
        (v["eval_count"].as_u64(), v["load_duration"].as_u64()),
        (Some(2), Some(3_000_000))
    );
    // why: a whole answer's notices are an array in `warden`
    assert_eq!(v["warden"][0]["t"], "loaded");
}
