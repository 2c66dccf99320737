//! Table tests of `translate`: Ollama's requests as llama-server's.

use serde_json::{Value, json};

use super::*;

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().expect("an object").clone()
}

#[test]
fn chat_bodies_translate() {
    // (Ollama body, expected chat body, num_ctx, load_only)
    let rows = [
        // why: plain messages pass; options become sampling fields; num_predict is max_tokens
        (
            json!({"messages": [{"role": "user", "content": "hi"}],
                   "options": {"temperature": 0, "top_p": 0.9, "top_k": 40, "seed": 7, "stop": ["\n"], "num_predict": 12, "num_ctx": 2048}}),
            json!({"messages": [{"role": "user", "content": "hi"}],
                   "temperature": 0, "top_p": 0.9, "top_k": 40, "seed": 7, "stop": ["\n"], "max_tokens": 12}),
            Some(2048),
            false,
        ),
        // why: -1 (until done) leaves the answer unbounded; runner options are ignored
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "options": {"num_predict": -1, "num_gpu": 99, "num_thread": 4}}),
            json!({"messages": [{"role": "user", "content": "hi"}]}),
            None,
            false,
        ),
        // why: llama.cpp's own names pass; num_keep is n_keep
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "options": {"min_p": 0.05, "repeat_penalty": 1.1, "num_keep": 4}}),
            json!({"messages": [{"role": "user", "content": "hi"}], "min_p": 0.05, "repeat_penalty": 1.1, "n_keep": 4}),
            None,
            false,
        ),
        // why: images become data: URLs beside the text, never a URL the child fetches
        (
            json!({"messages": [{"role": "user", "content": "what is it", "images": ["aGk="]}]}),
            json!({"messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is it"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}]}]}),
            None,
            false,
        ),
        // why: format "json" is any object (b10883's chat leaves json_object's empty schema unconstrained)
        (
            json!({"messages": [{"role": "user", "content": "x"}], "format": "json"}),
            json!({"messages": [{"role": "user", "content": "x"}],
                   "response_format": {"type": "json_schema", "json_schema": {"name": "format", "schema": {"type": "object"}}}}),
            None,
            false,
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "format": {"type": "object"}}),
            json!({"messages": [{"role": "user", "content": "x"}],
                   "response_format": {"type": "json_schema", "json_schema": {"name": "format", "schema": {"type": "object"}}}}),
            None,
            false,
        ),
        // why: an assistant's tool calls get OpenAI's string arguments; a tool result's name is llama.cpp's `name`
        (
            json!({"messages": [
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
                {"role": "tool", "content": "2", "tool_name": "f"}]}),
            json!({"messages": [
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                {"role": "tool", "content": "2", "name": "f"}]}),
            None,
            false,
        ),
        // why: think false turns thinking off through the template
        (
            json!({"messages": [{"role": "user", "content": "x"}], "think": false}),
            json!({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": false}}),
            None,
            false,
        ),
        // why: no messages only loads the model
        (json!({}), json!({"messages": []}), None, true),
    ];
    for (i, (ollama, want, num_ctx, load_only)) in rows.into_iter().enumerate() {
        let t = chat(&obj(ollama)).unwrap_or_else(|e| panic!("row {i}: {e:?}"));
        assert_eq!(
            (Value::Object(t.body), t.target, t.num_ctx, t.load_only),
            (want, Target::Chat, num_ctx, load_only),
            "row {i}"
        );
    }
}

#[test]
fn generate_bodies_choose_their_route() {
    // (Ollama body, target, expected body)
    let rows = [
        // why: a prompt is a chat turn through the template, with its system prompt
        (
            json!({"prompt": "hi", "system": "be brief"}),
            Target::Chat,
            json!({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}),
        ),
        // why: raw is a raw completion; its json format is a schema of its own
        (
            json!({"prompt": "hi", "raw": true, "format": "json", "options": {"num_predict": 5}}),
            Target::Completions,
            json!({"prompt": "hi", "json_schema": {"type": "object"}, "max_tokens": 5}),
        ),
        // why: a suffix is fill-in-the-middle, which speaks n_predict
        (
            json!({"prompt": "def f(", "suffix": "\n", "options": {"num_predict": 5}}),
            Target::Infill,
            json!({"input_prefix": "def f(", "input_suffix": "\n", "n_predict": 5}),
        ),
        // why: the deprecated context is ignored
        (
            json!({"prompt": "hi", "context": [1, 2, 3], "raw": true}),
            Target::Completions,
            json!({"prompt": "hi"}),
        ),
    ];
    for (i, (ollama, target, want)) in rows.into_iter().enumerate() {
        let t = generate(&obj(ollama), true).unwrap_or_else(|e| panic!("row {i}: {e:?}"));
        assert_eq!((t.target, Value::Object(t.body)), (target, want), "row {i}");
        assert!(!t.load_only, "row {i}");
    }
    // why: an empty prompt only loads the model
    assert!(generate(&obj(json!({"prompt": ""})), true).unwrap().load_only);
}

#[test]
fn bodies_that_cannot_be_honoured_name_the_field() {
    // (chat?, body, param)
    let rows = [
        (true, json!({"messages": "hi"}), "messages"),
        (
            true,
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            "messages[0].role",
        ),
        (
            true,
            json!({"messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        // why: an image that is not base64 (a URL, a path) is refused, never fetched
        (
            true,
            json!({"messages": [{"role": "user", "content": "x", "images": ["http://x/y.png"]}]}),
            "messages[0].images[0]",
        ),
        (
            true,
            json!({"messages": [{"role": "user", "content": "x"}], "options": {"top_k": "40"}}),
            "options.top_k",
        ),
        (
            true,
            json!({"messages": [{"role": "user", "content": "x"}], "options": {"top_k": 1.5}}),
            "options.top_k",
        ),
        // why: -3 is neither a count nor one of Ollama's two special values; 2^31 would wrap
        (
            true,
            json!({"messages": [{"role": "user", "content": "x"}], "options": {"num_predict": -3}}),
            "options.num_predict",
        ),
        (
            true,
            json!({"messages": [{"role": "user", "content": "x"}], "options": {"num_predict": 2147483648u64}}),
            "options.num_predict",
        ),
        (
            true,
            json!({"messages": [{"role": "user", "content": "x"}], "options": {"num_ctx": 0}}),
            "options.num_ctx",
        ),
        (
            true,
            json!({"messages": [{"role": "user", "content": "x"}], "options": {"stop": [1]}}),
            // why: the refusal names the item, as chat's `stop[1]`
            "options.stop[0]",
        ),
        (
            true,
            json!({"messages": [{"role": "user", "content": "x"}], "options": []}),
            "options",
        ),
        (
            true,
            json!({"messages": [{"role": "user", "content": "x"}], "format": "yaml"}),
            "format",
        ),
        (
            true,
            json!({"messages": [{"role": "user", "content": "x"}], "think": "max"}),
            "think",
        ),
        (
            true,
            json!({"messages": [{"role": "assistant", "tool_calls": [{"name": "f"}]}]}),
            "messages[0].tool_calls[0]",
        ),
        // why: a Go template cannot run here
        (false, json!({"prompt": "x", "template": "{{ .Prompt }}"}), "template"),
        (false, json!({"prompt": 5}), "prompt"),
        (false, json!({"prompt": "x", "raw": "yes"}), "raw"),
        // why: images need the chat template's image markers
        (false, json!({"prompt": "x", "raw": true, "images": ["aGk="]}), "images"),
    ];
    for (i, (is_chat, body, param)) in rows.into_iter().enumerate() {
        let got = if is_chat {
            chat(&obj(body))
        } else {
            generate(&obj(body), true)
        };
        let e = got.expect_err(&format!("row {i} should be refused"));
        assert_eq!(e.param, param, "row {i}: {}", e.message);
    }
}
