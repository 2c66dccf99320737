//! A long conversation over HTTP, for the KV tests: a long user message of
//! numbered facts, a greedy non-streamed turn under a named conversation,
//! and its answer as the next turn's assistant message.

use serde_json::{Value, json};

/// A user message of about `facts * 19` tokens (SmolLM2; ~18 with Gemma).
pub fn long_text(facts: usize) -> String {
    (0..facts)
        .map(|i| format!("Fact {i}: the number {i} is followed by {}.", i + 1))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A non-streamed, greedy chat turn of at most `max_tokens` under
/// `conversation`, `extra` added to the body; it must answer 200.
pub async fn conversation_turn(
    base: &str,
    conversation: &str,
    messages: &[Value],
    max_tokens: u32,
    extra: Value,
) -> Value {
    let mut body = json!({"messages": messages, "max_tokens": max_tokens, "temperature": 0, "seed": 1});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .header("X-Warden-Conversation", conversation)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v
}

/// A chat answer's message, to send back as the next turn's history.
pub fn answer(v: &Value) -> Value {
    v["choices"][0]["message"].clone()
}
