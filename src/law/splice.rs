//! One answer out of two streams: what a turn's client was sent
//! before its child died (`Transcript`), the request that continues it on
//! the next child (`continuation`), and the joint (`Splice`), so the client
//! reads one uninterrupted answer: no repeated text, no gap, one start, one
//! `finish_reason`, one `usage` counting the whole answer, the first
//! stream's ids throughout.
//!
//! The continuation is the child's own: the same route, with the text
//! already sent as the start of the assistant's answer. llama-server b10883
//! renders such a request as the prompt it rendered the first time
//! followed by that text (an assistant message last is continued, never
//! closed: `continue_final_message`, on by default through its
//! `--prefill-assistant`, read in `server-common.cpp`; Anthropic's and the
//! Responses API's bodies are converted to chat first, so the same holds),
//! and streams only what it generates after it. So the template is always
//! the model's, never ours. A raw completion continues its prompt with the
//! text; infill its `prompt`, which llama.cpp places after the middle
//! marker.
//!
//! What the joint does, dialect by dialect (b10883's event shapes, read in
//! `server-task.cpp`):
//! - Chat, completions: the continuation's chunks take the first stream's
//!   `id`; its opening chunk (a role, no content) is dropped; its `usage`
//!   moves the tokens already sent from the prompt to the completion, so
//!   the total stays the child's and the completion counts the whole
//!   answer.
//! - Messages: its `message_start` and, when the text block was open, its
//!   `content_block_start` are dropped; the block is closed once (the
//!   continuation closes it only when it generated text); `output_tokens`
//!   counts the whole answer.
//! - Responses: its `response.created`, `response.in_progress` and, when
//!   the message was open, the message's `output_item.added` and
//!   `content_part.added` are dropped; every event names the first
//!   stream's response and message; the events that carry the whole text
//!   (`output_text.done`, `content_part.done`, `output_item.done`,
//!   `response.completed`) carry the whole answer, written here when the
//!   continuation generated no text of its own; usage as above.
//! - Infill: its final event's `tokens_predicted` counts the whole answer.
//!
//! Pure: events in, events out.

use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value, json};

use super::route::Route;

/// A generating route's stream shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's chat chunks.
    Chat,
    /// OpenAI's text completion chunks.
    Completions,
    /// llama.cpp's own infill events.
    Infill,
    /// Anthropic's Messages events.
    Messages,
    /// OpenAI's Responses events.
    Responses,
}

impl Dialect {
    /// The dialect of a generating route.
    pub fn of(route: Route) -> Option<Self> {
        match route {
            Route::Chat => Some(Self::Chat),
            Route::Completions => Some(Self::Completions),
            Route::Infill => Some(Self::Infill),
            Route::Messages => Some(Self::Messages),
            Route::Responses => Some(Self::Responses),
            _ => None,
        }
    }
}

/// What a client was sent of an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transcript {
    /// The answer's text so far.
    pub text: String,
    /// Events sent (0: nothing, the turn can simply run again).
    pub sent: u32,
    /// What it began that cannot be continued as text.
    pub opaque: Option<&'static str>,
    /// The stream's id (chat, completions: `id`; Messages: the message's;
    /// Responses: the response's).
    pub id: Option<String>,
    /// Responses: the message item's id.
    pub item: Option<String>,
    /// The text block (Messages) or part (Responses) was opened.
    pub opened: bool,
}

impl Transcript {
    /// Reads one event as its client is sent it.
    pub fn read(&mut self, d: Dialect, event: Option<&str>, data: &[u8]) {
        self.sent += 1;
        let Ok(v @ Value::Object(_)) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        match d {
            Dialect::Chat => {
                self.take_id(v.get("id"));
                let delta = v.pointer("/choices/0/delta");
                if let Some(t) = delta.and_then(|d| d.get("content")).and_then(Value::as_str) {
                    self.text.push_str(t);
                }
                if delta.and_then(|d| d.get("tool_calls")).is_some_and(|t| !t.is_null()) {
                    self.opaque.get_or_insert("a tool call");
                }
                if delta
                    .and_then(|d| d.get("reasoning_content"))
                    .and_then(Value::as_str)
                    .is_some_and(|r| !r.is_empty())
                {
                    self.opaque.get_or_insert("reasoning");
                }
            }
            Dialect::Completions => {
                self.take_id(v.get("id"));
                if let Some(t) = v.pointer("/choices/0/text").and_then(Value::as_str) {
                    self.text.push_str(t);
                }
            }
            Dialect::Infill => {
                if let Some(t) = v.get("content").and_then(Value::as_str) {
                    self.text.push_str(t);
                }
            }
            Dialect::Messages => match event.unwrap_or_default() {
                "message_start" => self.take_id(v.pointer("/message/id")),
                "content_block_start" => match v.pointer("/content_block/type").and_then(Value::as_str) {
                    Some("text") => self.opened = true,
                    Some("thinking") => {
                        self.opaque.get_or_insert("reasoning");
                    }
                    _ => {
                        self.opaque.get_or_insert("a tool call");
                    }
                },
                "content_block_delta" => match v.pointer("/delta/type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
                            self.text.push_str(t);
                        }
                    }
                    Some("thinking_delta") => {
                        self.opaque.get_or_insert("reasoning");
                    }
                    _ => {
                        self.opaque.get_or_insert("a tool call");
                    }
                },
                _ => {}
            },
            Dialect::Responses => match event.unwrap_or_default() {
                "response.created" => self.take_id(v.pointer("/response/id")),
                "response.output_item.added" => match v.pointer("/item/type").and_then(Value::as_str) {
                    Some("message") => {
                        if self.item.is_none() {
                            self.item = v.pointer("/item/id").and_then(Value::as_str).map(str::to_string);
                        }
                    }
                    Some("reasoning") => {
                        self.opaque.get_or_insert("reasoning");
                    }
                    _ => {
                        self.opaque.get_or_insert("a tool call");
                    }
                },
                "response.content_part.added" => self.opened = true,
                "response.output_text.delta" => {
                    if let Some(t) = v.get("delta").and_then(Value::as_str) {
                        self.text.push_str(t);
                    }
                }
                e if e.starts_with("response.reasoning") => {
                    self.opaque.get_or_insert("reasoning");
                }
                e if e.starts_with("response.function_call") => {
                    self.opaque.get_or_insert("a tool call");
                }
                _ => {}
            },
        }
    }

    fn take_id(&mut self, id: Option<&Value>) {
        if self.id.is_none() {
            self.id = id.and_then(Value::as_str).map(str::to_string);
        }
    }
}

/// Writes into `body` the request that continues an answer whose text so
/// far is `text`; `Err` says why it cannot be (the turn then ends with its
/// error). `Ok` holds what the child will say again at the start of its
/// stream, which the joint takes off (`Splice::new`).
///
/// llama-server b10883 continues an assistant message last either way, but
/// streams it back first unless the request says `continue_final_message`
/// (with `add_generation_prompt` off, which it must be then): chat and the
/// Responses API carry those fields to the child's chat parser, so nothing
/// comes back; Anthropic's conversion drops them, so a Messages stream
/// starts with the assistant message's text again.
pub fn continuation(d: Dialect, body: &mut Map<String, Value>, text: &str) -> Result<Option<String>, &'static str> {
    match d {
        Dialect::Chat | Dialect::Messages => {
            let Some(Value::Array(messages)) = body.get_mut("messages") else {
                return Err("the request has no messages to continue");
            };
            let last_is_assistant = messages
                .last()
                .and_then(|m| m.get("role"))
                .is_some_and(|r| r == "assistant");
            if !last_is_assistant {
                messages.push(json!({"role": "assistant", "content": text}));
            } else {
                let last = messages.last_mut().and_then(Value::as_object_mut).expect("an assistant message is an object");
                if last.get("tool_calls").is_some_and(|t| !t.is_null()) {
                    return Err("the request's last message is the assistant's with tool calls");
                }
                // The client's own prefill was streamed back to it first (the
                // request did not say `continue_final_message`): it is in
                // `text` already.
                match last.get_mut("content") {
                    Some(Value::String(s)) => {
                        let rest = text.strip_prefix(s.as_str()).unwrap_or(text);
                        s.push_str(rest);
                    }
                    Some(Value::Array(parts)) => {
                        let before: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
                        let rest = text.strip_prefix(before.as_str()).unwrap_or(text);
                        parts.push(json!({"type": "text", "text": rest}));
                    }
                    None | Some(Value::Null) => {
                        last.insert("content".into(), Value::from(text));
                    }
                    Some(_) => return Err("the request's last assistant message has content of no known shape"),
                }
            }
            if d == Dialect::Messages {
                let said = messages.last().map(|m| match &m["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                    _ => String::new(),
                });
                return Ok(said);
            }
            say_continue(body);
            Ok(None)
        }
        Dialect::Completions => match body.get_mut("prompt") {
            Some(Value::String(p)) => {
                p.push_str(text);
                Ok(None)
            }
            _ => Err("the prompt was given as tokens or as several prompts"),
        },
        Dialect::Infill => match body.get_mut("prompt") {
            Some(Value::String(p)) => {
                p.push_str(text);
                Ok(None)
            }
            None | Some(Value::Null) => {
                body.insert("prompt".into(), Value::from(text));
                Ok(None)
            }
            Some(_) => Err("the infill prompt was given as tokens"),
        },
        Dialect::Responses => {
            let mut input = match body.remove("input") {
                Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
                Some(Value::Array(items)) => items,
                other => {
                    if let Some(v) = other {
                        body.insert("input".into(), v);
                    }
                    return Err("the request's input is neither text nor a list of items");
                }
            };
            // An assistant message last is merged with this one by the child.
            input.push(json!({
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            }));
            body.insert("input".into(), Value::Array(input));
            say_continue(body);
            Ok(None)
        }
    }
}

/// The fields that have llama-server continue the last message without
/// streaming it back.
fn say_continue(body: &mut Map<String, Value>) {
    body.insert("continue_final_message".into(), Value::Bool(true));
    body.insert("add_generation_prompt".into(), Value::Bool(false));
}

/// The joint of a continuation's stream to what its client already has.
#[derive(Debug, Clone)]
pub struct Splice {
    d: Dialect,
    before: Transcript,
    /// Tokens the text already sent counts (the new child's tokenizer).
    produced: u64,
    /// What the child says again before its own text (`continuation`),
    /// not yet taken off.
    echo: String,
    /// The continuation's own text.
    text: String,
    /// Events the continuation sent.
    sent: u32,
    /// Messages: its text block is open on the client; closed.
    open: bool,
    closed: bool,
    /// Responses: the message item, and whether its text was said done.
    item: Option<String>,
    text_done: bool,
    part_done: bool,
    item_done: bool,
}

impl Splice {
    /// The joint after `before`, whose text counts `produced` tokens; the
    /// child's stream starts with `echo` said again (`continuation`).
    pub fn new(d: Dialect, before: Transcript, produced: u64, echo: Option<String>) -> Self {
        let open = before.opened;
        let item = before.item.clone();
        Self {
            d,
            before,
            produced,
            echo: echo.unwrap_or_default(),
            text: String::new(),
            sent: 0,
            open,
            closed: false,
            item,
            text_done: false,
            part_done: false,
            item_done: false,
        }
    }

    /// What the client has now: the text before and after the joint.
    pub fn transcript(&self) -> Transcript {
        let mut t = self.before.clone();
        t.text.push_str(&self.text);
        t.sent += self.sent;
        t.opened = self.open;
        t.item = self.item.clone();
        t
    }

    /// The events the client gets for one event of the continuation: none,
    /// it rewritten, or more before it.
    pub fn pass(&mut self, event: Option<&str>, data: &[u8], raw: &Bytes) -> Vec<Bytes> {
        let out = match serde_json::from_slice::<Value>(data) {
            Ok(v) if v.is_object() && v.get("error").is_none() => self.rewrite(event, v),
            // `[DONE]`, and the child's own error, pass as they are.
            _ => vec![raw.clone()],
        };
        self.sent += out.len() as u32;
        out
    }

    fn rewrite(&mut self, event: Option<&str>, mut v: Value) -> Vec<Bytes> {
        let name = event.unwrap_or_default();
        match self.d {
            Dialect::Chat | Dialect::Completions => {
                if let Some(id) = &self.before.id {
                    v["id"] = Value::from(id.as_str());
                }
                let key = if self.d == Dialect::Chat { "/choices/0/delta" } else { "/choices/0/text" };
                if self.d == Dialect::Chat
                    && let Some(Value::Object(delta)) = v.pointer_mut(key)
                {
                    delta.remove("role");
                    if let Some(t) = delta.get("content").and_then(Value::as_str) {
                        self.text.push_str(t);
                    }
                    let empty = delta.values().all(|x| x.is_null() || x.as_str() == Some(""));
                    let finish = v.pointer("/choices/0/finish_reason").is_some_and(|f| !f.is_null());
                    if empty && !finish && v.get("usage").is_none() {
                        return vec![];
                    }
                } else if let Some(t) = v.pointer(key).and_then(Value::as_str) {
                    self.text.push_str(t);
                }
                if let Some(Value::Object(u)) = v.get_mut("usage") {
                    self.shift(u, "prompt_tokens", "completion_tokens");
                }
                vec![sse(event, &v)]
            }
            Dialect::Infill => {
                if let Some(t) = v.get("content").and_then(Value::as_str) {
                    self.text.push_str(t);
                }
                if v.get("stop") == Some(&Value::Bool(true))
                    && let Some(m) = v.as_object_mut()
                {
                    self.shift(m, "tokens_evaluated", "tokens_predicted");
                }
                vec![sse(event, &v)]
            }
            Dialect::Messages => match name {
                "message_start" => vec![],
                "content_block_start" if self.open => vec![],
                "content_block_start" => {
                    self.open = v.pointer("/content_block/type").and_then(Value::as_str) == Some("text");
                    vec![sse(event, &v)]
                }
                "content_block_delta" => {
                    if let Some(Value::String(t)) = v.pointer_mut("/delta/text") {
                        let own = self.unsay(t);
                        if own.is_empty() {
                            return vec![];
                        }
                        *t = own;
                        self.text.push_str(t);
                    }
                    vec![sse(event, &v)]
                }
                "content_block_stop" => {
                    self.closed = true;
                    vec![sse(event, &v)]
                }
                "message_delta" => {
                    let mut out = vec![];
                    if self.open && !self.closed {
                        self.closed = true;
                        out.push(sse(
                            Some("content_block_stop"),
                            &json!({"type": "content_block_stop", "index": 0}),
                        ));
                    }
                    if let Some(Value::Object(u)) = v.get_mut("usage") {
                        let n = u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0);
                        u.insert("output_tokens".into(), Value::from(n + self.produced));
                    }
                    out.push(sse(event, &v));
                    out
                }
                _ => vec![sse(event, &v)],
            },
            Dialect::Responses => self.responses(name, v),
        }
    }

    fn responses(&mut self, name: &str, mut v: Value) -> Vec<Bytes> {
        let ev = Some(name);
        match name {
            "response.created" | "response.in_progress" => vec![],
            "response.output_item.added" if v.pointer("/item/type").and_then(Value::as_str) == Some("message") => {
                if self.item.is_some() {
                    return vec![];
                }
                self.item = v.pointer("/item/id").and_then(Value::as_str).map(str::to_string);
                vec![sse(ev, &v)]
            }
            "response.content_part.added" if self.open => vec![],
            "response.content_part.added" => {
                self.open = true;
                self.own_item(&mut v);
                vec![sse(ev, &v)]
            }
            "response.output_text.delta" => {
                if let Some(t) = v.get("delta").and_then(Value::as_str) {
                    self.text.push_str(t);
                }
                self.own_item(&mut v);
                vec![sse(ev, &v)]
            }
            "response.output_text.done" => {
                self.text_done = true;
                self.own_item(&mut v);
                v["text"] = Value::from(self.whole());
                vec![sse(ev, &v)]
            }
            "response.content_part.done" => {
                self.part_done = true;
                self.own_item(&mut v);
                if let Some(Value::Object(part)) = v.get_mut("part") {
                    part.insert("text".into(), Value::from(self.whole()));
                }
                vec![sse(ev, &v)]
            }
            "response.output_item.done" if v.pointer("/item/type").and_then(Value::as_str) == Some("message") => {
                self.item_done = true;
                if let Some(Value::Object(item)) = v.get_mut("item") {
                    self.message_item(item);
                }
                vec![sse(ev, &v)]
            }
            "response.completed" => {
                let mut out = vec![];
                let whole = self.whole();
                let item = self.item.clone();
                if let Some(item) = &item {
                    let part = json!({"type": "output_text", "annotations": [], "logprobs": [], "text": whole});
                    if !self.text_done {
                        out.push(sse(
                            Some("response.output_text.done"),
                            &json!({"type": "response.output_text.done", "item_id": item, "text": whole}),
                        ));
                    }
                    if !self.part_done {
                        out.push(sse(
                            Some("response.content_part.done"),
                            &json!({"type": "response.content_part.done", "item_id": item, "part": part}),
                        ));
                    }
                    if !self.item_done {
                        out.push(sse(
                            Some("response.output_item.done"),
                            &json!({"type": "response.output_item.done", "item": message(item, part)}),
                        ));
                    }
                    self.text_done = true;
                    self.part_done = true;
                    self.item_done = true;
                }
                if let Some(Value::Object(r)) = v.get_mut("response") {
                    if let Some(id) = &self.before.id {
                        r.insert("id".into(), Value::from(id.as_str()));
                    }
                    if let Some(item) = &item {
                        let output = r.entry("output").or_insert_with(|| json!([]));
                        if let Value::Array(items) = output {
                            let at = items.iter().position(|i| i.get("type") == Some(&json!("message")));
                            match at.and_then(|i| items[i].as_object_mut()) {
                                Some(m) => self.message_item(m),
                                None => {
                                    let part =
                                        json!({"type": "output_text", "annotations": [], "logprobs": [], "text": whole});
                                    items.insert(0, message(item, part));
                                }
                            }
                        }
                    }
                    if let Some(Value::Object(u)) = r.get_mut("usage") {
                        self.shift(u, "input_tokens", "output_tokens");
                    }
                }
                out.push(sse(ev, &v));
                out
            }
            _ => {
                self.own_item(&mut v);
                vec![sse(ev, &v)]
            }
        }
    }

    /// A piece of the child's text less what it said again (`echo`): the
    /// echo is taken off as it comes, in one piece or several; a piece
    /// that differs from it ends the echo (the child said none).
    fn unsay(&mut self, piece: &str) -> String {
        if self.echo.is_empty() {
            return piece.to_string();
        }
        if let Some(rest) = self.echo.strip_prefix(piece) {
            self.echo = rest.to_string();
            return String::new();
        }
        let own = piece.strip_prefix(self.echo.as_str()).unwrap_or(piece).to_string();
        self.echo.clear();
        own
    }

    /// The whole answer's text.
    fn whole(&self) -> String {
        format!("{}{}", self.before.text, self.text)
    }

    /// An event's `item_id` names the first stream's message.
    fn own_item(&self, v: &mut Value) {
        if let (Some(item), Some(Value::String(_))) = (&self.item, v.get("item_id")) {
            v["item_id"] = Value::from(item.as_str());
        }
    }

    /// A message item with the first stream's id and the whole text.
    fn message_item(&self, item: &mut Map<String, Value>) {
        if let Some(id) = &self.item {
            item.insert("id".into(), Value::from(id.as_str()));
        }
        if let Some(Value::Object(part)) = item.get_mut("content").and_then(|c| c.get_mut(0)) {
            part.insert("text".into(), Value::from(self.whole()));
        }
    }

    /// Moves the tokens already sent from the prompt's count to the
    /// answer's (the continuation read them as prompt); the total stays.
    fn shift(&self, u: &mut Map<String, Value>, prompt: &str, answer: &str) {
        if let Some(p) = u.get(prompt).and_then(Value::as_u64) {
            u.insert(prompt.into(), Value::from(p.saturating_sub(self.produced)));
        }
        if let Some(a) = u.get(answer).and_then(Value::as_u64) {
            u.insert(answer.into(), Value::from(a + self.produced));
        }
    }
}

/// A Responses message item.
fn message(id: &str, part: Value) -> Value {
    json!({"type": "message", "status": "completed", "id": id, "content": [part], "role": "assistant"})
}

/// One SSE event: `event:` when named, then its data.
fn sse(event: Option<&str>, data: &impl serde::Serialize) -> Bytes {
    let json = serde_json::to_vec(data).expect("JSON values serialize");
    let mut b = BytesMut::with_capacity(json.len() + 32);
    if let Some(name) = event.filter(|n| !n.is_empty()) {
        b.extend_from_slice(b"event: ");
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(b"\n");
    }
    b.extend_from_slice(b"data: ");
    b.extend_from_slice(&json);
    b.extend_from_slice(b"\n\n");
    b.freeze()
}

#[cfg(test)]
#[path = "splice_tests.rs"]
mod tests;
