//! Table tests of the Messages body checks and Anthropic's wire.

use serde_json::json;

use super::*;

#[test]
fn bad_bodies_are_refused_with_the_field_named() {
    let user = json!([{"role": "user", "content": "hi"}]);
    // (body, count route?, code, param)
    let rows = [
        (json!({}), false, "missing_required_parameter", Some("messages")),
        (json!({"messages": []}), false, "empty_messages", Some("messages")),
        (json!({"messages": "hi"}), false, "invalid_type", Some("messages")),
        // why: Anthropic's roles are user and assistant only; system is its own field
        (
            json!({"messages": [{"role": "system", "content": "x"}]}),
            false,
            "invalid_value",
            Some("messages[0].role"),
        ),
        (
            json!({"messages": [{"role": "user"}]}),
            false,
            "missing_required_parameter",
            Some("messages[0].content"),
        ),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            false,
            "invalid_type",
            Some("messages[0].content"),
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            false,
            "missing_required_parameter",
            Some("messages[0].content[0].text"),
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}),
            false,
            "invalid_type",
            Some("messages[0].content[0].text"),
        ),
        // why: llama-server would skip a document without a word
        (
            json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}),
            false,
            "unsupported_value",
            Some("messages[0].content[0].type"),
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}),
            false,
            "unsupported_value",
            Some("messages[0].content[0].source.type"),
        ),
        (
            json!({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}]}),
            false,
            "missing_required_parameter",
            Some("messages[0].content[0].name"),
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text"}]}]}]}),
            false,
            "missing_required_parameter",
            Some("messages[0].content[0].content[0].text"),
        ),
        (
            json!({"messages": user, "system": 5}),
            false,
            "invalid_type",
            Some("system"),
        ),
        // why: a system prompt is text; the refusal names the type it cannot read
        (
            json!({"messages": user, "system": [{"type": "image"}]}),
            false,
            "unsupported_value",
            Some("system[0].type"),
        ),
        (
            json!({"messages": user, "system": ["x"]}),
            false,
            "invalid_type",
            Some("system[0]"),
        ),
        (
            json!({"messages": [{"content": "x"}]}),
            false,
            "missing_required_parameter",
            Some("messages[0].role"),
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"data": "aGk="}}]}]}),
            false,
            "missing_required_parameter",
            Some("messages[0].content[0].source.type"),
        ),
        // why: a block's fields keep their shape whatever its type
        (
            json!({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}]}),
            false,
            "invalid_type",
            Some("messages[0].content[0].input"),
        ),
        // why: max_tokens is a count below 2^31, never wrapped
        (
            json!({"messages": user, "max_tokens": -1}),
            false,
            "invalid_value",
            Some("max_tokens"),
        ),
        (
            json!({"messages": user, "max_tokens": 2147483648u64}),
            false,
            "invalid_value",
            Some("max_tokens"),
        ),
        (
            json!({"messages": user, "max_tokens": "64"}),
            false,
            "invalid_type",
            Some("max_tokens"),
        ),
        (
            json!({"messages": user, "temperature": "hot"}),
            false,
            "invalid_type",
            Some("temperature"),
        ),
        (
            json!({"messages": user, "top_k": 1.5}),
            false,
            "invalid_type",
            Some("top_k"),
        ),
        (
            json!({"messages": user, "stop_sequences": "\n"}),
            false,
            "invalid_type",
            Some("stop_sequences"),
        ),
        (
            json!({"messages": user, "stream": "yes"}),
            false,
            "invalid_type",
            Some("stream"),
        ),
        (
            json!({"messages": user, "tools": [{"input_schema": {}}]}),
            false,
            "missing_required_parameter",
            Some("tools[0].name"),
        ),
        (
            json!({"messages": user, "tool_choice": "auto"}),
            false,
            "invalid_type",
            Some("tool_choice"),
        ),
        (
            json!({"messages": user, "thinking": {"type": "enabled", "budget_tokens": -5}}),
            false,
            "invalid_value",
            Some("thinking.budget_tokens"),
        ),
        (
            json!({"model": 3, "messages": user}),
            false,
            "invalid_type",
            Some("model"),
        ),
        // why: the counter checks the prompt's shape as the turn does
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            true,
            "invalid_type",
            Some("messages[0].content"),
        ),
        // why: one decode for both routes: the counter reads the body the turn would, its generating fields' shapes too
        (
            json!({"messages": user, "stop_sequences": [1]}),
            true,
            "invalid_type",
            Some("stop_sequences[0]"),
        ),
    ];
    for (i, (body, count, code, param)) in rows.into_iter().enumerate() {
        let e = messages_request(body.to_string().as_bytes(), !count).expect_err(&format!("row {i} should fail"));
        assert_eq!(
            (e.status, e.code.as_str(), e.param.as_deref()),
            (400, code, param),
            "row {i}: {}",
            e.message
        );
    }
}

#[test]
fn good_bodies_keep_their_fields() {
    let r = messages_request(
        json!({"model": "m", "max_tokens": 16, "stream": true, "keep_alive": "5m", "system": [{"type": "text", "text": "s"}],
               "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "text", "text": "b"}, {"type": "redacted_thinking", "data": "x"}]},
                            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}}]}],
               "top_k": 5, "metadata": {"user_id": "u"}})
        .to_string()
        .as_bytes(),
        true,
    )
    .unwrap();
    assert_eq!(r.model.as_deref(), Some("m"));
    assert!(r.stream && r.has_answer);
    // why: the image is named by its path in the 400 of a model without a projector
    assert_eq!(r.image.as_deref(), Some("messages[2].content[0]"));
    assert!(r.keep_alive.is_some());
    // why: the child names its own model; keep_alive is the warden's
    assert!(!r.body.contains_key("model") && !r.body.contains_key("keep_alive"));
    assert_eq!(r.body["top_k"], 5);
    // why: the counter never streams
    let c = messages_request(
        br#"{"messages": [{"role": "user", "content": "a"}], "stream": true}"#,
        false,
    )
    .unwrap();
    assert!(!c.stream && !c.has_answer && c.image.is_none());
    // why: the counter skips the sampling rules: a bound the turn would refuse is no shape error
    let c = messages_request(
        br#"{"messages": [{"role": "user", "content": "a"}], "max_tokens": 2147483648}"#,
        false,
    );
    assert!(c.is_ok(), "{c:?}");
}

#[test]
fn errors_take_anthropic_shape() {
    // (status, Anthropic type)
    let rows = [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        // why: a full queue or a stopping engine is Anthropic's overloaded
        (503, "overloaded_error"),
        (500, "api_error"),
        (502, "api_error"),
        // why: a route the engine does not serve is the request's fault
        (501, "invalid_request_error"),
    ];
    for (i, (status, kind)) in rows.into_iter().enumerate() {
        let e = ApiError {
            status,
            message: "m".into(),
            kind: "server_error",
            code: "c".into(),
            param: None,
            raw: Some("tail".into()),
        };
        let b = error_body(&e);
        assert_eq!(
            (
                b["type"].as_str(),
                b["error"]["type"].as_str(),
                b["error"]["code"].as_str(),
                b["error"]["raw"].as_str()
            ),
            (Some("error"), Some(kind), Some("c"), Some("tail")),
            "row {i}"
        );
    }
}

#[test]
fn the_wire_reshapes_only_errors() {
    let mut w = Anthropic;
    let delta = Bytes::from_static(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n");
    // why: the child's Messages events pass byte for byte
    assert_eq!(w.event(delta.clone()), Some(delta));
    // why: the child's own error event (OpenAI's object) becomes Anthropic's
    let child =
        Bytes::from_static(b"event: error\ndata: {\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}\n\n");
    let got = String::from_utf8(w.event(child).unwrap().to_vec()).unwrap();
    let data: Value = serde_json::from_str(got.strip_prefix("event: error\ndata: ").unwrap().trim_end()).unwrap();
    assert_eq!(
        (
            data["type"].as_str(),
            data["error"]["type"].as_str(),
            data["error"]["message"].as_str()
        ),
        (Some("error"), Some("api_error"), Some("boom"))
    );
    // why: the warden's own failure ends the stream the same way, with code and raw
    let e = ApiError {
        status: 500,
        message: "the model server died".into(),
        kind: "server_error",
        code: "child_crashed".into(),
        param: None,
        raw: Some("tail".into()),
    };
    let got = String::from_utf8(w.error(&e).to_vec()).unwrap();
    assert!(
        got.starts_with("event: error\ndata: {") && got.ends_with("\n\n"),
        "{got}"
    );
    assert!(
        got.contains("\"code\":\"child_crashed\"") && got.contains("\"raw\":\"tail\""),
        "{got}"
    );
    // why: notices are comments, which Anthropic's SDKs skip
    let n = w.notice(&Notice::Loading { model: "m".into() }).unwrap();
    assert!(n.starts_with(b": warden "), "{n:?}");
}
