//! Table tests of the Responses body checks and decided changes.

use serde_json::json;

use super::*;
use crate::http::reply::Wire;

#[test]
fn bad_bodies_are_refused_with_the_field_named() {
    // (body, code, param)
    let rows = [
        (json!({}), "missing_required_parameter", Some("input")),
        (json!({"input": 5}), "invalid_type", Some("input")),
        (json!({"input": []}), "empty_input", Some("input")),
        (json!({"input": [5]}), "invalid_type", Some("input[0]")),
        // why: nothing is stored, so there is nothing to continue
        (
            json!({"input": "hi", "previous_response_id": "resp_1"}),
            "unsupported_value",
            Some("previous_response_id"),
        ),
        (
            json!({"input": "hi", "instructions": 5}),
            "invalid_type",
            Some("instructions"),
        ),
        // why: max_output_tokens is a count below 2^31, never wrapped
        (
            json!({"input": "hi", "max_output_tokens": -1}),
            "invalid_value",
            Some("max_output_tokens"),
        ),
        (
            json!({"input": "hi", "max_output_tokens": 4294967296u64}),
            "invalid_value",
            Some("max_output_tokens"),
        ),
        (
            json!({"input": "hi", "temperature": "warm"}),
            "invalid_type",
            Some("temperature"),
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
            "missing_required_parameter",
            Some("input[0].content[0].text"),
        ),
        // why: the chat parser after the converter would throw a type error (a 500)
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]}),
            "invalid_type",
            Some("input[0].content[0].text"),
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "unsupported_value",
            Some("input[0].content[0].type"),
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]}),
            "invalid_value",
            Some("input[0].content[0].type"),
        ),
        (
            json!({"input": [{"role": "wizard", "content": "x"}]}),
            "invalid_value",
            Some("input[0].role"),
        ),
        // why: a role and a type that make no item the converter classifies
        (
            json!({"input": [{"type": "message", "content": "x"}]}),
            "invalid_value",
            Some("input[0]"),
        ),
        // why: an item type the converter does not read (OpenAI's stored items)
        (
            json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
            "unsupported_value",
            Some("input[0].type"),
        ),
        (
            json!({"input": [{"role": "user"}]}),
            "missing_required_parameter",
            Some("input[0].content"),
        ),
        (
            json!({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}),
            "missing_required_parameter",
            Some("input[0].arguments"),
        ),
        (
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]}),
            "invalid_type",
            Some("input[0].output"),
        ),
        (
            json!({"input": [{"type": "reasoning", "summary": []}]}),
            "invalid_type",
            Some("input[0]"),
        ),
        (
            json!({"input": "hi", "tools": [{"type": "function"}]}),
            "missing_required_parameter",
            Some("tools[0].name"),
        ),
        (
            json!({"input": "hi", "text": {"format": {"type": "json_schema"}}}),
            "invalid_type",
            Some("text.format.schema"),
        ),
        (
            json!({"input": "hi", "text": {"format": {"type": "xml"}}}),
            "unsupported_value",
            Some("text.format.type"),
        ),
    ];
    for (i, (body, code, param)) in rows.into_iter().enumerate() {
        let e = responses_request(body.to_string().as_bytes(), true).expect_err(&format!("row {i} should fail"));
        assert_eq!(
            (e.status, e.code.as_str(), e.param.as_deref()),
            (400, code, param),
            "row {i}: {}",
            e.message
        );
    }
}

#[test]
fn decided_changes() {
    let r = responses_request(
        json!({"model": "m", "input": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": [{"type": "input_text", "text": "c"}, {"type": "input_image", "image_url": "data:image/png;base64,aGk="}]}],
               "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
               "tools": [{"type": "web_search"}], "stream": true})
        .to_string()
        .as_bytes(),
        true,
    )
    .unwrap();
    assert!(r.stream && r.has_answer);
    // why: the image is named by its path in the 400 of a model without a projector
    assert_eq!(r.image.as_deref(), Some("input[2].content[1]"));
    // why: the SDKs' short assistant entry gets the type llama-server needs to classify it
    assert_eq!(r.body["input"][1]["type"], "message");
    // why: structured output is chat's response_format, which the converter passes
    assert_eq!(
        r.body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}})
    );
    assert!(!r.body.contains_key("text"));
    // why: hosted tools are left for llama-server, which skips them
    assert_eq!(r.body["tools"][0]["type"], "web_search");
    // why: a null is absent: a null instructions would be an empty system prompt
    let nulls = responses_request(
        br#"{"input": "hi", "instructions": null, "previous_response_id": null}"#,
        true,
    )
    .unwrap();
    assert!(!nulls.body.contains_key("instructions") && !nulls.body.contains_key("previous_response_id"));
    // why: one decode for both routes: the counter reads the generating fields' shapes too, not their bound
    let e = responses_request(br#"{"input": "hi", "max_output_tokens": -1}"#, false).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("max_output_tokens"));
    let counted = responses_request(br#"{"input": "hi", "max_output_tokens": 7}"#, false).unwrap();
    assert!(!counted.body.contains_key("n_predict"), "the counter folds no bound");
    let plain = responses_request(br#"{"input": "hi", "stream": true}"#, false).unwrap();
    assert!(!plain.stream && !plain.has_answer && plain.model.is_none());
}

#[test]
fn a_stream_error_is_an_error_event_the_sdks_raise() {
    let e = ApiError {
        status: 500,
        message: "died".into(),
        kind: "server_error",
        code: "child_crashed".into(),
        param: None,
        raw: Some("tail".into()),
    };
    let got = String::from_utf8(Responses::default().error(&e).to_vec()).unwrap();
    let data: Value = serde_json::from_str(got.strip_prefix("event: error\ndata: ").unwrap().trim_end()).unwrap();
    // why: the Responses error event's fields, and `error`, which the SDKs raise as an APIError
    assert_eq!(
        (data["type"].as_str(), data["code"].as_str(), data["message"].as_str()),
        (Some("error"), Some("child_crashed"), Some("died"))
    );
    assert_eq!(data["error"]["raw"], "tail");
}
