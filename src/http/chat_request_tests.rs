//! Table tests of chat's typed request: a row per shape, each body read
//! the way the route reads it (`validate::chat_request`: the field table,
//! then the typed request and its rules).

use serde_json::{Value, json};

use crate::http::validate::chat_request;

/// The route's reading of a body: the 400's code and field, if refused.
fn check(body: &Value) -> Option<(String, String)> {
    let e = chat_request(body.to_string().as_bytes()).err()?;
    assert!(
        e.message.contains(e.param.as_deref().unwrap_or_default()),
        "the message names the field: {e:?}"
    );
    Some((e.code, e.param.unwrap_or_default()))
}

fn chat(extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn user(content: Value) -> Value {
    json!({"messages": [{"role": "user", "content": content}]})
}

#[test]
fn every_shape_refuses_what_the_child_would_fail_or_misread() {
    type Row = (Value, Option<(&'static str, &'static str)>);
    let rows: Vec<Row> = vec![
        // why: the cases, each a 500 from the child
        (
            user(json!([{"type": "text"}])),
            Some(("missing_required_parameter", "messages[0].content[0].text")),
        ),
        (
            user(json!([{"type": "text", "text": 5}])),
            Some(("invalid_type", "messages[0].content[0].text")),
        ),
        (chat(json!({"tools": {"a": 1}})), Some(("invalid_type", "tools"))),
        (chat(json!({"tools": [5]})), Some(("invalid_type", "tools[0]"))),
        (
            chat(json!({"tools": [{"type": "function", "function": {"name": 3}}]})),
            Some(("invalid_type", "tools[0].function.name")),
        ),
        (
            chat(json!({"tools": [{"type": "function", "function": {}}]})),
            Some(("missing_required_parameter", "tools[0].function.name")),
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": "x"}]}),
            Some(("invalid_type", "messages[0].tool_calls")),
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [7]}]}),
            Some(("invalid_type", "messages[0].tool_calls[0]")),
        ),
        (
            json!({"messages": [{"role": "user", "content": "a", "name": 4}]}),
            Some(("invalid_type", "messages[0].name")),
        ),
        (
            json!({"messages": [{"role": "assistant", "content": "a", "reasoning_content": []}]}),
            Some(("invalid_type", "messages[0].reasoning_content")),
        ),
        (json!({}), Some(("missing_required_parameter", "messages"))),
        (json!({"messages": []}), Some(("empty_messages", "messages"))),
        (json!({"messages": "hi"}), Some(("invalid_type", "messages"))),
        (json!({"messages": [1]}), Some(("invalid_type", "messages[0]"))),
        (
            json!({"messages": [{"content": "x"}]}),
            Some(("missing_required_parameter", "messages[0].role")),
        ),
        (
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            Some(("invalid_value", "messages[0].role")),
        ),
        (
            json!({"messages": [{"role": "user"}]}),
            Some(("missing_required_parameter", "messages[0].content")),
        ),
        (user(json!(5)), Some(("invalid_type", "messages[0].content"))),
        // why: an assistant turn may carry only tool calls
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            None,
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}]}),
            Some((
                "missing_required_parameter",
                "messages[0].tool_calls[0].function.arguments",
            )),
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "web", "function": {"name": "f", "arguments": "{}"}}]}]}),
            Some(("unsupported_value", "messages[0].tool_calls[0].type")),
        ),
        (
            user(json!([{"type": "video_frame"}])),
            Some(("unsupported_value", "messages[0].content[0].type")),
        ),
        (
            user(json!([{"text": "a"}])),
            Some(("missing_required_parameter", "messages[0].content[0].type")),
        ),
        (
            user(json!([{"type": "image_url", "image_url": "http://x"}])),
            Some(("invalid_type", "messages[0].content[0].image_url")),
        ),
        (
            user(json!([{"type": "image_url", "image_url": {}}])),
            Some(("missing_required_parameter", "messages[0].content[0].image_url.url")),
        ),
        (
            user(json!([{"type": "input_audio", "input_audio": {"data": "AAA", "format": 1}}])),
            Some(("invalid_type", "messages[0].content[0].input_audio.format")),
        ),
        (
            chat(json!({"tool_choice": "sometimes"})),
            Some(("invalid_value", "tool_choice")),
        ),
        (
            chat(json!({"tool_choice": {"type": "function"}})),
            Some(("missing_required_parameter", "tool_choice.function")),
        ),
        (chat(json!({"tool_choice": "auto"})), None),
        (
            chat(json!({"response_format": {"type": "yaml"}})),
            // why: a format the child cannot produce, named by its type
            Some(("unsupported_value", "response_format.type")),
        ),
        (
            chat(json!({"response_format": {"type": "json_schema", "json_schema": {"schema": "s"}}})),
            Some(("invalid_type", "response_format.json_schema.schema")),
        ),
        (chat(json!({"response_format": {"type": "json_object"}})), None),
        // why: a null content is a message the child takes (as before the typed request)
        (json!({"messages": [{"role": "user", "content": null}]}), None),
        // why: the child dumps an object of arguments itself
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}]}),
            None,
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": 5}}]}]}),
            Some(("invalid_type", "messages[0].tool_calls[0].function.arguments")),
        ),
        (
            chat(json!({"tool_choice": {"type": "function", "function": {"name": 1}}})),
            Some(("invalid_type", "tool_choice.function.name")),
        ),
        (
            user(json!([{"type": "input_video", "input_video": {"url": "file:///v.mp4"}}])),
            None,
        ),
    ];
    for (i, (body, want)) in rows.into_iter().enumerate() {
        let got = check(&body);
        let got = got.as_ref().map(|(c, p)| (c.as_str(), p.as_str()));
        assert_eq!(got, want, "row {i}: {body}");
    }
}

#[test]
fn media_parts_are_the_needs_of_the_model() {
    let r = chat_request(
        user(json!([
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,BBBB"}},
        ]))
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    // why: the first part needing each is the one a refusal names
    assert_eq!(r.needs.image.as_deref(), Some("messages[0].content[1]"));
    assert_eq!(r.needs.audio.as_deref(), Some("messages[0].content[2]"));
    assert_eq!(r.needs.video, None);
}
