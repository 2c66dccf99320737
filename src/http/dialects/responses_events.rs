//! The indices b10883's Responses stream leaves out, filled in: its events
//! name their item by `item_id` only, while OpenAI's SDKs place every delta
//! by `output_index` and `content_index` (the Python SDK's
//! `responses.stream()` fails with a `TypeError` on the first text delta
//! without them, measured with openai 3.57.0) and order events by
//! `sequence_number`. The item's place is the order of its
//! `response.output_item.added` (or, for an item first seen done, of that);
//! llama-server gives every item one content part, so `content_index` is 0.
//! A field the child did send is never changed. And Responses' `Wire`,
//! which fills them in as the events pass.

use actix_web::HttpResponse;
use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::http::reply::Wire;
use crate::messages::Notice;

/// The stream's items so far, in order.
#[derive(Debug, Default)]
pub struct Indices {
    items: Vec<String>,
    sequence: u64,
}

impl Indices {
    /// The place of the item `id`, given one when first seen.
    fn place(&mut self, id: &str) -> usize {
        match self.items.iter().position(|i| i == id) {
            Some(p) => p,
            None => {
                self.items.push(id.to_string());
                self.items.len() - 1
            }
        }
    }

    /// Fills in what `data` (one event's object) lacks.
    pub fn fill(&mut self, data: &mut Map<String, Value>) {
        data.entry("sequence_number").or_insert(json!(self.sequence));
        self.sequence += 1;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        let id = data
            .get("item_id")
            .or_else(|| data.get("item").and_then(|i| i.get("id")))
            .and_then(Value::as_str)
            .map(str::to_string);
        let Some(id) = id else { return };
        if !kind.starts_with("response.") || kind == "response.completed" {
            return;
        }
        let place = self.place(&id);
        data.entry("output_index").or_insert(json!(place));
        let in_a_part = ["content_part", "output_text", "reasoning_text", "refusal"]
            .iter()
            .any(|p| kind.starts_with(&format!("response.{p}.")));
        if in_a_part {
            data.entry("content_index").or_insert(json!(0));
        }
    }
}

/// Responses' wire: the child's events with the indices it leaves out
/// filled in (`responses_events`), notices as SSE comments, and a stream's
/// final error as an `event: error` event.
#[derive(Debug, Default)]
pub struct Responses(Indices);

impl Wire for Responses {
    fn refusal(&self, e: &ApiError) -> HttpResponse {
        crate::http::errors::error_response(e)
    }
    fn event(&mut self, raw: Bytes) -> Option<Bytes> {
        let mut parser = crate::sse::SseParser::new();
        let mut events = Vec::new();
        let _ = parser.push(&raw, &mut events);
        let [ev] = events.as_slice() else { return Some(raw) };
        let (Some(name), Ok(Value::Object(mut data))) = (&ev.event, serde_json::from_slice::<Value>(&ev.data)) else {
            // The child's own error (`data: {"error": ...}`) passes: the SDKs raise it.
            return Some(raw);
        };
        self.0.fill(&mut data);
        let json = serde_json::to_vec(&data).expect("a JSON map serializes");
        let mut b = BytesMut::with_capacity(json.len() + name.len() + 16);
        b.extend_from_slice(b"event: ");
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(b"\ndata: ");
        b.extend_from_slice(&json);
        b.extend_from_slice(b"\n\n");
        Some(b.freeze())
    }
    fn notice(&mut self, n: &Notice) -> Option<Bytes> {
        Some(crate::http::chat::notice_comment(n))
    }
    fn error(&mut self, e: &ApiError) -> Bytes {
        let body = json!({
            "type": "error",
            "code": e.code,
            "message": e.message,
            "param": e.param,
            "error": e,
        });
        let json = serde_json::to_vec(&body).expect("an error serializes");
        let mut b = BytesMut::with_capacity(json.len() + 22);
        b.extend_from_slice(b"event: error\ndata: ");
        b.extend_from_slice(&json);
        b.extend_from_slice(b"\n\n");
        b.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_follow_the_items() {
        let mut ix = Indices::default();
        // (event data, expected output_index, expected content_index)
        let rows = [
            // why: lifecycle events have no item
            (json!({"type": "response.created", "response": {"id": "r"}}), None, None),
            (
                json!({"type": "response.output_item.added", "item": {"id": "rs", "type": "reasoning"}}),
                Some(0),
                None,
            ),
            (
                json!({"type": "response.reasoning_text.delta", "item_id": "rs", "delta": "hm"}),
                Some(0),
                Some(0),
            ),
            // why: the message is the second item; its text deltas are in its one part
            (
                json!({"type": "response.output_item.added", "item": {"id": "msg", "type": "message"}}),
                Some(1),
                None,
            ),
            (
                json!({"type": "response.content_part.added", "item_id": "msg", "part": {}}),
                Some(1),
                Some(0),
            ),
            (
                json!({"type": "response.output_text.delta", "item_id": "msg", "delta": "Pa"}),
                Some(1),
                Some(0),
            ),
            // why: the reasoning item's done, late, keeps its place
            (
                json!({"type": "response.output_item.done", "item": {"id": "rs"}}),
                Some(0),
                None,
            ),
            // why: an item first seen done takes the next place
            (
                json!({"type": "response.output_item.done", "item": {"id": "fc_1"}}),
                Some(2),
                None,
            ),
            // why: what the child sent is kept
            (
                json!({"type": "response.output_text.delta", "item_id": "msg", "output_index": 7}),
                Some(7),
                Some(0),
            ),
            (
                json!({"type": "response.completed", "response": {"output": []}}),
                None,
                None,
            ),
        ];
        for (i, (data, output, content)) in rows.into_iter().enumerate() {
            let mut d = data.as_object().unwrap().clone();
            ix.fill(&mut d);
            assert_eq!(d["sequence_number"], json!(i), "row {i}");
            assert_eq!(
                (
                    d.get("output_index").and_then(Value::as_u64),
                    d.get("content_index").and_then(Value::as_u64)
                ),
                (output, content),
                "row {i}"
            );
        }
    }
}
