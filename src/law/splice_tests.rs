//! The joint, over events shaped as b10883 sends them (`server-task.cpp`).

use super::*;

/// Parses the SSE events of `out` into (event name, data).
fn parsed(out: &[Bytes]) -> Vec<(Option<String>, Value)> {
    let mut p = crate::sse::SseParser::new();
    let mut evs = Vec::new();
    for b in out {
        p.push(b, &mut evs).unwrap();
    }
    evs.iter()
        .map(|e| (e.event.clone(), serde_json::from_slice(&e.data).unwrap_or(Value::Null)))
        .collect()
}

fn chat_chunk(id: &str, delta: Value, finish: Value) -> Value {
    json!({"choices": [{"finish_reason": finish, "index": 0, "delta": delta}], "created": 1, "id": id,
           "model": "m", "object": "chat.completion.chunk"})
}

fn feed(t: &mut Transcript, d: Dialect, events: &[(Option<&str>, Value)]) {
    for (name, v) in events {
        t.read(d, *name, &serde_json::to_vec(v).unwrap());
    }
}

fn splice_all(s: &mut Splice, events: &[(Option<&str>, Value)]) -> Vec<(Option<String>, Value)> {
    let mut out = vec![];
    for (name, v) in events {
        let data = serde_json::to_vec(v).unwrap();
        out.extend(s.pass(*name, &data, &Bytes::from(data.clone())));
    }
    parsed(&out)
}

#[test]
fn chat_continues_under_the_first_id_without_a_second_start() {
    let mut t = Transcript::default();
    feed(
        &mut t,
        Dialect::Chat,
        &[
            (None, chat_chunk("chatcmpl-A", json!({"role": "assistant", "content": null}), Value::Null)),
            (None, chat_chunk("chatcmpl-A", json!({"content": "The capital"}), Value::Null)),
            (None, chat_chunk("chatcmpl-A", json!({"content": " of"}), Value::Null)),
        ],
    );
    assert_eq!((t.text.as_str(), t.sent, t.id.as_deref(), t.opaque), ("The capital of", 3, Some("chatcmpl-A"), None));
    let mut s = Splice::new(Dialect::Chat, t, 3, None);
    let out = splice_all(
        &mut s,
        &[
            // why: the continuation's own opening chunk is a second start
            (None, chat_chunk("chatcmpl-B", json!({"role": "assistant", "content": null}), Value::Null)),
            (None, chat_chunk("chatcmpl-B", json!({"content": " France"}), Value::Null)),
            (None, chat_chunk("chatcmpl-B", json!({}), json!("stop"))),
            (
                None,
                json!({"choices": [], "id": "chatcmpl-B", "object": "chat.completion.chunk",
                       "usage": {"completion_tokens": 2, "prompt_tokens": 33, "total_tokens": 35}}),
            ),
        ],
    );
    assert_eq!(out.len(), 3, "{out:?}");
    assert!(out.iter().all(|(_, v)| v["id"] == "chatcmpl-A"), "{out:?}");
    assert_eq!(out[0].1["choices"][0]["delta"], json!({"content": " France"}));
    assert_eq!(out[1].1["choices"][0]["finish_reason"], "stop");
    // why: the 3 tokens sent before count as answer, not prompt; the total stays
    assert_eq!(
        out[2].1["usage"],
        json!({"completion_tokens": 5, "prompt_tokens": 30, "total_tokens": 35})
    );
    let whole = s.transcript();
    assert_eq!((whole.text.as_str(), whole.sent), ("The capital of France", 6));
    // why: [DONE] passes as it is
    let done = s.pass(None, b"[DONE]", &Bytes::from_static(b"data: [DONE]\n\n"));
    assert_eq!(done, vec![Bytes::from_static(b"data: [DONE]\n\n")]);
}

#[test]
fn a_begun_tool_call_or_reasoning_is_opaque() {
    let mut t = Transcript::default();
    feed(
        &mut t,
        Dialect::Chat,
        &[(None, chat_chunk("c", json!({"tool_calls": [{"index": 0}]}), Value::Null))],
    );
    assert_eq!(t.opaque, Some("a tool call"));
    let mut t = Transcript::default();
    feed(
        &mut t,
        Dialect::Messages,
        &[(
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        )],
    );
    assert_eq!(t.opaque, Some("reasoning"));
    let mut t = Transcript::default();
    feed(
        &mut t,
        Dialect::Responses,
        &[(
            Some("response.output_item.added"),
            json!({"type": "response.output_item.added", "item": {"type": "function_call", "id": "fc_1"}}),
        )],
    );
    assert_eq!(t.opaque, Some("a tool call"));
}

fn messages_before() -> Transcript {
    let mut t = Transcript::default();
    feed(
        &mut t,
        Dialect::Messages,
        &[
            (
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": "msg_A", "usage": {"input_tokens": 20}}}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}),
            ),
        ],
    );
    t
}

#[test]
fn messages_keep_one_start_and_close_the_block_once() {
    let t = messages_before();
    assert_eq!((t.text.as_str(), t.opened, t.id.as_deref()), ("Hello", true, Some("msg_A")));
    let end = [
        (
            Some("message_delta"),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
        ),
        (Some("message_stop"), json!({"type": "message_stop"})),
    ];
    // The continuation generated text: its own stop closes the block.
    let mut s = Splice::new(Dialect::Messages, t.clone(), 1, None);
    let mut events = vec![
        (Some("message_start"), json!({"type": "message_start", "message": {"id": "msg_B"}})),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " world"}}),
        ),
        (Some("content_block_stop"), json!({"type": "content_block_stop", "index": 0})),
    ];
    events.extend(end.clone());
    let out = splice_all(&mut s, &events);
    let names: Vec<_> = out.iter().map(|(n, _)| n.clone().unwrap()).collect();
    assert_eq!(
        names,
        ["content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    );
    assert_eq!(out[2].1["usage"]["output_tokens"], 2);
    assert_eq!(s.transcript().text, "Hello world");
    // The continuation generated nothing: the block is closed here, once.
    let mut s = Splice::new(Dialect::Messages, t, 1, None);
    let out = splice_all(&mut s, &end);
    let names: Vec<_> = out.iter().map(|(n, _)| n.clone().unwrap()).collect();
    assert_eq!(names, ["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(out[0].1, json!({"type": "content_block_stop", "index": 0}));
}

fn responses_before() -> Transcript {
    let mut t = Transcript::default();
    feed(
        &mut t,
        Dialect::Responses,
        &[
            (
                Some("response.created"),
                json!({"type": "response.created", "response": {"id": "resp_A", "status": "in_progress"}}),
            ),
            (
                Some("response.output_item.added"),
                json!({"type": "response.output_item.added", "item": {"id": "msg_A", "type": "message", "content": []}}),
            ),
            (
                Some("response.content_part.added"),
                json!({"type": "response.content_part.added", "item_id": "msg_A", "part": {"type": "output_text", "text": ""}}),
            ),
            (
                Some("response.output_text.delta"),
                json!({"type": "response.output_text.delta", "item_id": "msg_A", "delta": "Hello"}),
            ),
        ],
    );
    t
}

fn completed(id: &str, output: Value) -> (Option<&'static str>, Value) {
    (
        Some("response.completed"),
        json!({"type": "response.completed", "response": {"id": id, "output": output,
               "usage": {"input_tokens": 21, "output_tokens": 1, "total_tokens": 22}}}),
    )
}

#[test]
fn responses_name_the_first_stream_and_carry_the_whole_text() {
    let t = responses_before();
    assert_eq!((t.item.as_deref(), t.id.as_deref(), t.opened), (Some("msg_A"), Some("resp_A"), true));
    let mut s = Splice::new(Dialect::Responses, t.clone(), 1, None);
    let part = json!({"type": "output_text", "annotations": [], "logprobs": [], "text": " world"});
    let out = splice_all(
        &mut s,
        &[
            (Some("response.created"), json!({"type": "response.created", "response": {"id": "resp_B"}})),
            (Some("response.in_progress"), json!({"type": "response.in_progress", "response": {"id": "resp_B"}})),
            (
                Some("response.output_item.added"),
                json!({"type": "response.output_item.added", "item": {"id": "msg_B", "type": "message"}}),
            ),
            (
                Some("response.content_part.added"),
                json!({"type": "response.content_part.added", "item_id": "msg_B", "part": {"text": ""}}),
            ),
            (
                Some("response.output_text.delta"),
                json!({"type": "response.output_text.delta", "item_id": "msg_B", "delta": " world"}),
            ),
            (
                Some("response.output_text.done"),
                json!({"type": "response.output_text.done", "item_id": "msg_B", "text": " world"}),
            ),
            (
                Some("response.content_part.done"),
                json!({"type": "response.content_part.done", "item_id": "msg_B", "part": part.clone()}),
            ),
            (
                Some("response.output_item.done"),
                json!({"type": "response.output_item.done", "item": {"id": "msg_B", "type": "message", "content": [part.clone()]}}),
            ),
            completed(
                "resp_B",
                json!([{"id": "msg_B", "type": "message", "content": [part]}]),
            ),
        ],
    );
    let names: Vec<_> = out.iter().map(|(n, _)| n.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(out[0].1["item_id"], "msg_A");
    assert_eq!(out[1].1["text"], "Hello world");
    assert_eq!(out[2].1["part"]["text"], "Hello world");
    assert_eq!(out[3].1["item"]["id"], "msg_A");
    assert_eq!(out[3].1["item"]["content"][0]["text"], "Hello world");
    let r = &out[4].1["response"];
    assert_eq!((r["id"].as_str(), r["output"][0]["id"].as_str()), (Some("resp_A"), Some("msg_A")));
    assert_eq!(r["output"][0]["content"][0]["text"], "Hello world");
    assert_eq!(r["usage"], json!({"input_tokens": 20, "output_tokens": 2, "total_tokens": 22}));
}

/// The child died after the last token: the continuation generates
/// nothing, and its end says nothing of the message; the joint does.
#[test]
fn responses_whose_continuation_is_empty_still_end_the_message() {
    let mut s = Splice::new(Dialect::Responses, responses_before(), 1, None);
    let out = splice_all(
        &mut s,
        &[
            (Some("response.created"), json!({"type": "response.created", "response": {"id": "resp_B"}})),
            completed("resp_B", json!([])),
        ],
    );
    let names: Vec<_> = out.iter().map(|(n, _)| n.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(out[0].1["text"], "Hello");
    assert_eq!(out[3].1["response"]["output"][0]["content"][0]["text"], "Hello");
    assert_eq!(out[3].1["response"]["output"][0]["id"], "msg_A");
}

#[test]
fn completions_and_infill_count_the_whole_answer() {
    let mut t = Transcript::default();
    feed(
        &mut t,
        Dialect::Completions,
        &[(None, json!({"id": "cmpl-A", "choices": [{"text": "one two", "index": 0, "finish_reason": null}]}))],
    );
    let mut s = Splice::new(Dialect::Completions, t, 2, None);
    let out = splice_all(
        &mut s,
        &[(
            None,
            json!({"id": "cmpl-B", "choices": [{"text": " three", "index": 0, "finish_reason": "length"}],
                   "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}}),
        )],
    );
    assert_eq!(out[0].1["id"], "cmpl-A");
    assert_eq!(out[0].1["usage"]["completion_tokens"], 3);
    assert_eq!(s.transcript().text, "one two three");

    let mut t = Transcript::default();
    feed(&mut t, Dialect::Infill, &[(None, json!({"content": "x = ", "stop": false}))]);
    let mut s = Splice::new(Dialect::Infill, t, 2, None);
    let out = splice_all(
        &mut s,
        &[(None, json!({"content": "1", "stop": true, "tokens_predicted": 1, "tokens_evaluated": 12}))],
    );
    assert_eq!((out[0].1["tokens_predicted"].as_u64(), out[0].1["tokens_evaluated"].as_u64()), (Some(3), Some(10)));
}

#[test]
fn continuation_bodies() {
    let obj = |v: Value| v.as_object().unwrap().clone();
    // (name, dialect, body, expected body or error)
    let rows: Vec<(&str, Dialect, Value, Result<Value, &str>)> = vec![
        (
            "chat: the text becomes the assistant's answer begun",
            Dialect::Chat,
            json!({"messages": [{"role": "user", "content": "hi"}]}),
            Ok(json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}],
                       "continue_final_message": true, "add_generation_prompt": false})),
        ),
        (
            "chat: a prefill of the client's own is continued, not doubled",
            Dialect::Chat,
            json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure: "}]}),
            Ok(json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure: Hel"}],
                       "continue_final_message": true, "add_generation_prompt": false})),
        ),
        (
            "chat: a prefill in parts gets one more part",
            Dialect::Chat,
            json!({"messages": [{"role": "assistant", "content": [{"type": "text", "text": "A"}]}]}),
            Ok(json!({"messages": [{"role": "assistant", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "Hel"}]}],
                       "continue_final_message": true, "add_generation_prompt": false})),
        ),
        (
            "chat: an assistant's tool calls cannot be continued",
            Dialect::Chat,
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}]}),
            Err("the request's last message is the assistant's with tool calls"),
        ),
        (
            "messages: as chat",
            Dialect::Messages,
            json!({"max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}),
            Ok(json!({"max_tokens": 9, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]})),
        ),
        (
            "completions: the prompt goes on",
            Dialect::Completions,
            json!({"prompt": "Once"}),
            Ok(json!({"prompt": "OnceHel"})),
        ),
        (
            "completions: a prompt of tokens cannot",
            Dialect::Completions,
            json!({"prompt": [1, 2]}),
            Err("the prompt was given as tokens or as several prompts"),
        ),
        (
            "infill: its prompt follows the middle marker",
            Dialect::Infill,
            json!({"input_prefix": "a", "input_suffix": "b"}),
            Ok(json!({"input_prefix": "a", "input_suffix": "b", "prompt": "Hel"})),
        ),
        (
            "responses: a text input becomes the user's message",
            Dialect::Responses,
            json!({"input": "hi"}),
            Ok(json!({"input": [{"role": "user", "content": "hi"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hel"}]}],
                       "continue_final_message": true, "add_generation_prompt": false})),
        ),
        (
            "responses: items get one more",
            Dialect::Responses,
            json!({"input": [{"role": "user", "content": "hi"}]}),
            Ok(json!({"input": [{"role": "user", "content": "hi"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hel"}]}],
                       "continue_final_message": true, "add_generation_prompt": false})),
        ),
    ];
    for (name, d, body, want) in rows {
        let mut b = obj(body);
        let got = continuation(d, &mut b, "Hel").map(|_| Value::Object(b));
        assert_eq!(got, want.map(obj).map(Value::Object), "{name}");
    }
}

/// A client's own prefill, streamed back to it first, is in the text sent:
/// the continuation holds it once.
#[test]
fn a_prefill_streamed_back_is_not_doubled() {
    let mut b = json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure: "}]})
        .as_object()
        .unwrap()
        .clone();
    continuation(Dialect::Chat, &mut b, "Sure: here").unwrap();
    assert_eq!(b["messages"][1]["content"], "Sure: here");
}

/// Anthropic's conversion drops `continue_final_message`, so the child says
/// the assistant message again first: the joint takes it off, whole or in
/// pieces, and passes what follows; a child that says none loses nothing.
#[test]
fn messages_take_off_what_the_child_says_again() {
    let mut b = json!({"messages": [{"role": "user", "content": "hi"}]}).as_object().unwrap().clone();
    let echo = continuation(Dialect::Messages, &mut b, "Hello wor").unwrap();
    assert_eq!(echo.as_deref(), Some("Hello wor"));
    assert!(!b.contains_key("continue_final_message"), "the child's conversion would drop it");
    let delta = |t: &str| {
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
        )
    };
    let mut t = Transcript {
        text: "Hello wor".into(),
        sent: 4,
        opened: true,
        ..Transcript::default()
    };
    t.id = Some("msg_1".into());
    for (pieces, want) in [
        (vec!["Hello world", "!"], "ld!"),
        (vec!["Hello", " wor", "ld"], "ld"),
        (vec!["ld", "!"], "ld!"),
    ] {
        let mut s = Splice::new(Dialect::Messages, t.clone(), 3, echo.clone());
        let evs: Vec<_> = pieces.iter().map(|p| delta(p)).collect();
        let out = splice_all(&mut s, &evs);
        let got: String = out.iter().filter_map(|(_, v)| v["delta"]["text"].as_str()).collect();
        assert_eq!(got, want, "{pieces:?}");
        assert_eq!(s.transcript().text, format!("Hello wor{want}"));
    }
}
