//! Ollama's wire: the child's answer (chat, raw completion or infill, as
//! `translate` translated the request) said as Ollama says it, one JSON
//! object per line (NDJSON) when streamed, one object when whole, with
//! `done_reason` and the durations on the last (`reply`).
//!
//! Notices travel in a line of their own whose text is empty and whose
//! `warden` field carries the notice (a whole answer: `warden`, an array);
//! Ollama's clients read `message`/`response` and ignore fields they do not
//! know. A failure ends the stream with Ollama's error line, `{"error":
//! message}`, with the warden's `code` and `raw` beside.

use std::time::{SystemTime, UNIX_EPOCH};

use actix_web::HttpResponse;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::error_body;
use super::reply::{self as reply, Piece, ToolCalls};
use super::translate::Target;
use crate::error::ApiError;
use crate::http::reply::Wire;
use crate::messages::Notice;
use crate::sse::SseParser;
use crate::status::EngineStatus;

/// Which Ollama route is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/api/chat`: text in `message.content`.
    Chat,
    /// `/api/generate`: text in `response`.
    Generate,
}

/// The answer of one request, as it streams.
pub struct Ndjson {
    api: Api,
    target: Target,
    /// The model name the client asked for (Ollama echoes it).
    model: String,
    started: Instant,
    load_ms: u64,
    num_ctx: Option<u64>,
    /// The engine's status: the window a capped `num_ctx` is told.
    status: tokio::sync::watch::Receiver<EngineStatus>,
    tools: ToolCalls,
    last: Piece,
    parser: SseParser,
}

/// Unix milliseconds now.
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Ndjson {
    /// The wire for a request to `api` translated for `target`.
    pub fn new(
        api: Api,
        target: Target,
        model: String,
        started: Instant,
        num_ctx: Option<u64>,
        status: tokio::sync::watch::Receiver<EngineStatus>,
    ) -> Self {
        Self {
            api,
            target,
            model,
            started,
            load_ms: 0,
            num_ctx,
            status,
            tools: ToolCalls::default(),
            last: Piece::default(),
            parser: SseParser::new(),
        }
    }

    /// A reply object with `text` (and `thinking`) where this route puts it.
    fn object(&self, text: &str, thinking: &str, done: bool) -> Value {
        let mut v = json!({
            "model": self.model,
            "created_at": reply::rfc3339(now_ms()),
        });
        match self.api {
            Api::Chat => {
                v["message"] = json!({"role": "assistant", "content": text});
                if !thinking.is_empty() {
                    v["message"]["thinking"] = json!(thinking);
                }
            }
            Api::Generate => {
                v["response"] = json!(text);
                if !thinking.is_empty() {
                    v["thinking"] = json!(thinking);
                }
            }
        }
        v["done"] = json!(done);
        v
    }

    /// The last object: the reason, the durations, the capped `num_ctx`.
    fn last_object(&self, text: &str, thinking: &str, tool_calls: Vec<Value>, notices: Vec<Value>) -> Value {
        let mut v = self.object(text, thinking, true);
        if !tool_calls.is_empty() {
            match self.api {
                Api::Chat => v["message"]["tool_calls"] = Value::Array(tool_calls),
                Api::Generate => v["tool_calls"] = Value::Array(tool_calls),
            }
        }
        v["done_reason"] = json!(reply::done_reason(self.last.finish.as_deref()));
        let d = reply::durations(
            self.last.timings.as_ref(),
            self.last.usage.as_ref(),
            self.started.elapsed().as_nanos() as u64,
            self.load_ms * 1_000_000,
        );
        if let (Value::Object(v), Ok(Value::Object(d))) = (&mut v, serde_json::to_value(d)) {
            v.extend(d);
        }
        let mut notices = notices;
        notices.extend(reply::num_ctx(self.num_ctx, self.status.borrow().context_tokens));
        if !notices.is_empty() {
            v["warden"] = Value::Array(notices);
        }
        v
    }

    /// The reply to a request that only loaded (`load`) or unloaded
    /// (`unload`) its model, the load having taken `load_ms`.
    pub fn load_reply(&mut self, reason: &'static str, load_ms: u64) -> Value {
        self.load_ms = load_ms;
        let mut v = self.last_object("", "", Vec::new(), Vec::new());
        v["done_reason"] = json!(reason);
        v
    }

    /// The stream's end: the joined tool calls, then the last line.
    fn end(&mut self) -> Bytes {
        let calls = self.tools.ollama();
        line(&self.last_object("", "", calls, Vec::new()))
    }

    /// One event of the child's stream, read.
    fn take(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if data == b"[DONE]" {
            out.extend_from_slice(&self.end());
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if let Some(err) = v.get("error") {
            // The child's own failure, after which its stream closes.
            let status = err.get("code").and_then(Value::as_u64).unwrap_or(500) as u16;
            let e = crate::error::GenerationError::Upstream {
                status,
                body: Some(json!({ "error": err })),
            }
            .to_api();
            out.extend_from_slice(&line(&error_body(&e)));
            return;
        }
        let p = reply::piece(self.target, &v);
        self.tools.add(&p.tool_calls);
        if !p.text.is_empty() || !p.thinking.is_empty() {
            out.extend_from_slice(&line(&self.object(&p.text, &p.thinking, false)));
        }
        let finished = p.finish.is_some();
        self.last.finish = p.finish.or(self.last.finish.take());
        self.last.timings = p.timings.or(self.last.timings.take());
        self.last.usage = p.usage.or(self.last.usage.take());
        // Infill's stream has no [DONE]: its finish is its end.
        if finished && self.target == Target::Infill {
            out.extend_from_slice(&self.end());
        }
    }
}

/// `v` and a newline.
fn line(v: &Value) -> Bytes {
    let mut b = serde_json::to_vec(v).expect("a JSON value serializes");
    b.push(b'\n');
    Bytes::from(b)
}

impl Wire for Ndjson {
    fn stream_type(&self) -> &'static str {
        "application/x-ndjson"
    }
    fn refusal(&self, e: &ApiError) -> HttpResponse {
        super::error_response(e)
    }
    fn event(&mut self, raw: Bytes) -> Option<Bytes> {
        let mut events = Vec::new();
        let _ = self.parser.push(&raw, &mut events);
        let mut out = Vec::new();
        for ev in events {
            self.take(&ev.data, &mut out);
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
    fn notice(&mut self, n: &Notice) -> Option<Bytes> {
        if let Notice::Loaded { load_ms, .. } = n {
            self.load_ms += load_ms;
        }
        let mut v = self.object("", "", false);
        v["warden"] = json!(n);
        Some(line(&v))
    }
    fn error(&mut self, e: &ApiError) -> Bytes {
        line(&error_body(e))
    }
    fn whole(&mut self, body: Bytes, notices: &[Notice]) -> Result<Bytes, ApiError> {
        let v: Value = serde_json::from_slice(&body).map_err(|_| {
            crate::error::GenerationError::Transport("the model server's answer was not JSON".into()).to_api()
        })?;
        self.last = reply::whole(self.target, &v);
        for n in notices {
            if let Notice::Loaded { load_ms, .. } = n {
                self.load_ms += load_ms;
            }
        }
        let calls = reply::tool_calls_out(&self.last.tool_calls);
        let notices = notices.iter().map(|n| json!(n)).collect();
        let (text, thinking) = (self.last.text.clone(), self.last.thinking.clone());
        let v = self.last_object(&text, &thinking, calls, notices);
        Ok(Bytes::from(serde_json::to_vec(&v).expect("a JSON value serializes")))
    }
    /// NDJSON has no comment: a silent stream stays silent.
    fn keep_alive(&self) -> Option<Bytes> {
        None
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
