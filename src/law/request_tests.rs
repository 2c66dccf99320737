//! Table tests of `request` and `request_chat`: a row per rule of the
//! field table (chat's nested shapes are `http::chat_request`'s rows), and
//! the projector decision.

use serde_json::{Value, json};

use super::*;
use crate::law::request_chat::{Capabilities, Needs};

/// The field table's check of a body.
fn check(route: Route, body: Value) -> Result<(), (&'static str, String)> {
    let body = body.as_object().expect("rows are objects").clone();
    check_fields(route, &body).map_err(|v| {
        assert!(v.message.contains(&v.param), "the message names the field: {v:?}");
        (v.code, v.param)
    })
}

fn chat(extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[test]
fn every_rule_refuses_what_the_child_would_fail_or_misread() {
    type Row = (Route, Value, Option<(&'static str, &'static str)>);
    let rows: Vec<Row> = vec![
        (
            Route::Chat,
            chat(json!({"reasoning_format": 1})),
            Some(("invalid_type", "reasoning_format")),
        ),
        // why: an unknown reasoning format is a runtime error (500) in the child
        (
            Route::Chat,
            chat(json!({"reasoning_format": "x"})),
            Some(("invalid_value", "reasoning_format")),
        ),
        // why: a wrong-typed n_predict made the child drop max_tokens too
        (
            Route::Chat,
            chat(json!({"n_predict": "x", "max_tokens": 4})),
            Some(("invalid_type", "n_predict")),
        ),
        // why: 2^64-1 became -1 (unbounded) in the child's int32
        (
            Route::Chat,
            chat(json!({"max_completion_tokens": u64::MAX})),
            Some(("invalid_value", "max_completion_tokens")),
        ),
        // why: 4294967300 wrapped to 4
        (
            Route::Chat,
            chat(json!({"max_tokens": 4_294_967_300u64})),
            Some(("invalid_value", "max_tokens")),
        ),
        // why: -1 is llama.cpp's "unbounded"; no request buys that
        (
            Route::Completions,
            json!({"prompt": "a", "n_predict": -1}),
            Some(("invalid_value", "n_predict")),
        ),
        (
            Route::Chat,
            chat(json!({"max_tokens": 2.5})),
            Some(("invalid_type", "max_tokens")),
        ),
        (
            Route::Chat,
            chat(json!({"max_tokens": "9"})),
            Some(("invalid_type", "max_tokens")),
        ),
        (Route::Chat, chat(json!({"max_tokens": i32::MAX})), None),
        // why: one slot runs one sequence
        (Route::Chat, chat(json!({"n": 2})), Some(("unsupported_value", "n"))),
        (Route::Chat, chat(json!({"n": 0})), Some(("unsupported_value", "n"))),
        (Route::Chat, chat(json!({"n": 1})), None),
        // why: the child's slot ids are 0 (and -1, its choice)
        (
            Route::Chat,
            chat(json!({"id_slot": 3})),
            Some(("invalid_value", "id_slot")),
        ),
        // why: probabilities are in [0, 1]
        (
            Route::Chat,
            chat(json!({"top_p": 1.5})),
            Some(("invalid_value", "top_p")),
        ),
        (Route::Infill, json!({"min_p": -0.1}), Some(("invalid_value", "min_p"))),
        (
            Route::Chat,
            chat(json!({"temperature": -1})),
            Some(("invalid_value", "temperature")),
        ),
        (
            Route::Chat,
            chat(json!({"temperature": "hot"})),
            Some(("invalid_type", "temperature")),
        ),
        // why: above OpenAI's 2 is still a temperature llama.cpp honours
        (Route::Chat, chat(json!({"temperature": 5})), None),
        (
            Route::Chat,
            chat(json!({"seed": 4_294_967_296u64})),
            Some(("invalid_value", "seed")),
        ),
        (Route::Chat, chat(json!({"seed": -1})), None),
        (Route::Chat, chat(json!({"stop": 5})), Some(("invalid_type", "stop"))),
        (
            Route::Chat,
            chat(json!({"stop": ["a", 1]})),
            Some(("invalid_type", "stop[1]")),
        ),
        (Route::Chat, chat(json!({"stop": "a"})), None),
        (
            Route::Chat,
            chat(json!({"stream": "yes"})),
            Some(("invalid_type", "stream")),
        ),
        (
            Route::Chat,
            chat(json!({"logit_bias": 3})),
            Some(("invalid_type", "logit_bias")),
        ),
        (Route::Chat, chat(json!({"lora": {}})), Some(("invalid_type", "lora"))),
        (
            Route::Chat,
            chat(json!({"json_schema": "x"})),
            Some(("invalid_type", "json_schema")),
        ),
        // why: logprobs is a switch in chat and a count in completions
        (
            Route::Chat,
            chat(json!({"logprobs": 3})),
            Some(("invalid_type", "logprobs")),
        ),
        (Route::Completions, json!({"prompt": "a", "logprobs": 3}), None),
        (
            Route::Chat,
            chat(json!({"top_logprobs": 21})),
            Some(("invalid_value", "top_logprobs")),
        ),
        // why: null is absent, as in the child
        (
            Route::Chat,
            chat(json!({"max_tokens": null, "stop": null, "tools": null})),
            None,
        ),
        // why: unknown fields pass through as extensions
        (Route::Chat, chat(json!({"mirostat_whatever": {"x": 1}})), None),
    ];
    for (i, (route, body, want)) in rows.into_iter().enumerate() {
        let got = check(route, body.clone());
        let got = got.as_ref().map_err(|(c, p)| (*c, p.as_str())).err();
        assert_eq!(got, want, "row {i}: {body}");
    }
}

#[test]
fn media_parts_need_a_projector_that_reads_them() {
    // A text part, an image part, an audio part (as `http::chat_request`
    // reads them from a message's content).
    let needs = Needs {
        image: Some("messages[0].content[1]".into()),
        audio: Some("messages[0].content[2]".into()),
        video: None,
        infill: false,
    };
    let none = Capabilities::default();
    let vision = Capabilities { vision: true, ..none };
    let both = Capabilities { audio: true, ..vision };
    let rows = [
        // why: no projector: the image is the first part it cannot read
        (none, Some("messages[0].content[1]")),
        // why: a vision projector still cannot hear
        (vision, Some("messages[0].content[2]")),
        (both, None),
    ];
    for (i, (caps, want)) in rows.into_iter().enumerate() {
        let got = needs.unmet(caps, "m");
        assert_eq!(got.as_ref().map(|v| v.param.as_str()), want, "row {i}");
        if let Some(v) = got {
            assert_eq!(v.code, "unsupported_value", "row {i}");
            assert!(
                v.message.contains("projector") && v.message.contains("'m'"),
                "row {i}: {}",
                v.message
            );
        }
    }
}

#[test]
fn an_infill_needs_the_fill_in_the_middle_tokens() {
    let none = Capabilities::default();
    let fim = Capabilities { fim: true, ..none };
    let rows = [
        // why: an infill on a model without FIM tokens names the model
        (Needs::infill(true), none, Some("model")),
        (Needs::infill(true), fim, None),
        // why: a plain completion needs no FIM tokens
        (Needs::infill(false), none, None),
        // why: an image with no projector is named before the infill
        (
            Needs {
                infill: true,
                ..Needs::image_at(Some("messages[0].content[0]".into()))
            },
            none,
            Some("messages[0].content[0]"),
        ),
    ];
    for (i, (needs, caps, want)) in rows.into_iter().enumerate() {
        let got = needs.unmet(caps, "m");
        assert_eq!(got.as_ref().map(|v| v.param.as_str()), want, "row {i}");
        if let Some(v) = got.filter(|v| v.param == "model") {
            assert!(v.message.contains("fill-in-the-middle") && v.message.contains("'m'"), "row {i}");
        }
    }
}

#[test]
fn the_token_bound_folds_three_fields_and_the_window() {
    let rows: [(Value, Option<u32>, u32); 7] = [
        // why: absent, the whole window (llama-server's own default)
        (json!({}), Some(8192), 8192),
        // why: a request below the window keeps its bound
        (json!({"max_tokens": 16}), Some(8192), 16),
        // why: the window caps a request that asks for more
        (json!({"max_tokens": 100_000}), Some(8192), 8192),
        // why: two fields: the tighter one, whatever their order in the child
        (json!({"max_tokens": 40, "max_completion_tokens": 8}), Some(8192), 8),
        (json!({"n_predict": 50, "max_tokens": 5}), Some(8192), 5),
        // why: 0 evaluates the prompt and generates nothing, as in the child
        (json!({"n_predict": 0}), Some(8192), 0),
        // why: a window the warden does not know is bounded by the spec's floor
        (json!({}), None, UNKNOWN_WINDOW_BOUND),
    ];
    for (i, (body, window, want)) in rows.into_iter().enumerate() {
        let body = body.as_object().unwrap().clone();
        check_fields(Route::Chat, &body).unwrap();
        assert_eq!(token_bound(requested_bound(&body), window), want, "row {i}");
    }
}

#[test]
fn each_rule_has_a_reason_and_no_field_is_ruled_twice_for_a_route() {
    for r in RULES {
        assert!(!r.why.is_empty(), "{}", r.field);
        for route in Route::ALL {
            let n = RULES
                .iter()
                .filter(|o| o.field == r.field && o.scope.covers(route))
                .count();
            assert!(n <= 1, "{} is ruled {n} times on {route:?}", r.field);
        }
    }
}
