//! Table tests of `reply`: llama-server's answers in Ollama's terms.

use serde_json::json;

use super::*;

#[test]
fn events_and_bodies_are_read_per_route() {
    let timings = json!({"prompt_n": 9, "prompt_ms": 12.5, "predicted_n": 4, "predicted_ms": 40.0});
    // (target, streamed?, data, text, thinking, finish)
    let rows = [
        // why: a chat delta's content and reasoning
        (
            Target::Chat,
            true,
            json!({"choices": [{"delta": {"content": "Pa", "reasoning_content": "hm"}}]}),
            "Pa",
            "hm",
            None,
        ),
        // why: the last chat chunk carries the finish
        (
            Target::Chat,
            true,
            json!({"choices": [{"delta": {}, "finish_reason": "length"}], "timings": timings}),
            "",
            "",
            Some("length"),
        ),
        (
            Target::Completions,
            true,
            json!({"choices": [{"text": "ris", "finish_reason": null}]}),
            "ris",
            "",
            None,
        ),
        // why: infill's native stream says its end with stop and stop_type
        (
            Target::Infill,
            true,
            json!({"content": "x", "stop": false}),
            "x",
            "",
            None,
        ),
        (
            Target::Infill,
            true,
            json!({"content": "", "stop": true, "stop_type": "limit"}),
            "",
            "",
            Some("limit"),
        ),
        (
            Target::Chat,
            false,
            json!({"choices": [{"message": {"content": "Paris"}, "finish_reason": "stop"}]}),
            "Paris",
            "",
            Some("stop"),
        ),
        // why: a whole infill always finishes
        (Target::Infill, false, json!({"content": "y"}), "y", "", Some("stop")),
    ];
    for (i, (target, streamed, data, text, thinking, finish)) in rows.into_iter().enumerate() {
        let p = if streamed {
            piece(target, &data)
        } else {
            whole(target, &data)
        };
        assert_eq!(
            (p.text.as_str(), p.thinking.as_str(), p.finish.as_deref()),
            (text, thinking, finish),
            "row {i}"
        );
    }
}

#[test]
fn done_reasons() {
    let rows = [
        // why: a length limit under either name
        (Some("length"), "length"),
        (Some("limit"), "length"),
        // why: a tool call, a stop word and the end of text are all Ollama's stop
        (Some("tool_calls"), "stop"),
        (Some("word"), "stop"),
        (Some("eos"), "stop"),
        (Some("stop"), "stop"),
        (None, "stop"),
    ];
    for (i, (finish, want)) in rows.into_iter().enumerate() {
        assert_eq!(done_reason(finish), want, "row {i}");
    }
}

#[test]
fn durations_come_from_the_timings() {
    let t = json!({"prompt_n": 9, "prompt_ms": 12.5, "predicted_n": 4, "predicted_ms": 40.25});
    let u = json!({"prompt_tokens": 30, "completion_tokens": 4});
    // why: timings give counts and times in nanoseconds; the caller's total and load pass
    assert_eq!(
        durations(Some(&t), Some(&u), 99, 7),
        Durations {
            total_duration: 99,
            load_duration: 7,
            prompt_eval_count: 9,
            prompt_eval_duration: 12_500_000,
            eval_count: 4,
            eval_duration: 40_250_000,
        }
    );
    // why: without timings, usage's counts still say what was done
    let d = durations(None, Some(&u), 1, 0);
    assert_eq!((d.prompt_eval_count, d.eval_count, d.eval_duration), (30, 4, 0));
}

#[test]
fn tool_calls_join_and_take_ollama_shape() {
    let mut calls = ToolCalls::default();
    calls.add(&[json!({"index": 0, "id": "c", "function": {"name": "get_", "arguments": "{\"ci"}})]);
    calls.add(&[json!({"index": 0, "function": {"name": "weather", "arguments": "ty\": \"Paris\"}"}})]);
    // why: streamed deltas join by index; arguments become an object
    assert_eq!(
        calls.ollama(),
        [json!({"function": {"name": "get_weather", "arguments": {"city": "Paris"}}})]
    );
    // why: arguments that are not JSON stay text rather than being lost
    let whole = tool_calls_out(&[json!({"function": {"name": "f", "arguments": "not json"}})]);
    assert_eq!(whole, [json!({"function": {"name": "f", "arguments": "not json"}})]);
    assert!(ToolCalls::default().ollama().is_empty());
}

#[test]
fn names_num_ctx_and_timestamps() {
    let exists = |id: &str| id == "smollm2" || id == "tagged:v1";
    let rows = [
        ("smollm2", "smollm2"),
        // why: Ollama's clients add :latest to an untagged name
        ("smollm2:latest", "smollm2"),
        // why: another tag is part of the name
        ("tagged:v1", "tagged:v1"),
        ("nope:latest", "nope:latest"),
    ];
    for (i, (name, want)) in rows.into_iter().enumerate() {
        assert_eq!(catalog_name(name, exists), want, "row {i}");
    }
    // (asked, window, capped)
    let rows = [
        // why: within the window the request has what it asked for
        (Some(2048), Some(8192), false),
        (Some(8192), Some(8192), false),
        // why: beyond the window it is capped, and said
        (Some(16384), Some(8192), true),
        (None, Some(8192), false),
        (Some(16384), None, false),
    ];
    for (i, (asked, window, capped)) in rows.into_iter().enumerate() {
        assert_eq!(num_ctx(asked, window).is_some(), capped, "row {i}");
    }
    assert_eq!(
        num_ctx(Some(16384), Some(8192)),
        Some(json!({"t": "num_ctx_capped", "num_ctx": 16384, "window": 8192}))
    );
    let rows = [
        (0, "1970-01-01T00:00:00.000Z"),
        // why: a leap day, with milliseconds
        (951_782_400_123, "2000-02-29T00:00:00.123Z"),
        (1_714_566_896_789, "2024-05-01T12:34:56.789Z"),
        (253_402_300_799_000, "9999-12-31T23:59:59.000Z"),
    ];
    for (i, (ms, want)) in rows.into_iter().enumerate() {
        assert_eq!(rfc3339(ms), want, "row {i}");
    }
}
