//! llama-server's answers in Ollama's terms: a streamed event or a whole
//! body of the route a request took (`translate::Target`) read into a `Piece`,
//! the reply's `done_reason` and durations from the child's `timings`, the
//! tool calls, the model names, the `num_ctx` rule and Ollama's timestamps.
//! Pure (still table-tested beside it, as the law is): the caller brings the clock's readings.
//!
//! Durations are nanoseconds, as Ollama's. `prompt_eval_count` is the
//! prompt tokens the child evaluated (`timings.prompt_n`, without those its
//! prompt cache reused), so that it over `prompt_eval_duration` is the real
//! rate, as a client computes it; `eval_count` is the tokens generated.

use serde::Serialize;
use serde_json::{Value, json};

use super::translate::Target;

/// What one event (or a whole body) of the child says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Piece {
    /// Answer text.
    pub text: String,
    /// Reasoning text (`reasoning_content`).
    pub thinking: String,
    /// Tool calls, whole (a body) or in pieces (a stream's deltas).
    pub tool_calls: Vec<Value>,
    /// Why it finished, when this is the last piece.
    pub finish: Option<String>,
    /// The child's `timings`, when this piece carries them.
    pub timings: Option<Value>,
    /// The child's `usage`, when this piece carries it.
    pub usage: Option<Value>,
}

fn text_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// A streamed event's data (`[DONE]` excluded) of `target`.
pub fn piece(target: Target, v: &Value) -> Piece {
    let mut p = Piece {
        timings: v.get("timings").cloned(),
        usage: v.get("usage").filter(|u| !u.is_null()).cloned(),
        ..Piece::default()
    };
    match target {
        Target::Chat => {
            p.text = text_at(v, "/choices/0/delta/content");
            p.thinking = text_at(v, "/choices/0/delta/reasoning_content");
            if let Some(Value::Array(calls)) = v.pointer("/choices/0/delta/tool_calls") {
                p.tool_calls = calls.clone();
            }
            p.finish = v
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        Target::Completions => {
            p.text = text_at(v, "/choices/0/text");
            p.finish = v
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        Target::Infill => {
            p.text = text_at(v, "/content");
            if v.get("stop").and_then(Value::as_bool) == Some(true) {
                p.finish = Some(v.get("stop_type").and_then(Value::as_str).unwrap_or("eos").to_string());
            }
        }
    }
    p
}

/// A whole (non-streamed) body of `target`.
pub fn whole(target: Target, v: &Value) -> Piece {
    match target {
        Target::Chat => {
            let mut p = Piece {
                text: text_at(v, "/choices/0/message/content"),
                thinking: text_at(v, "/choices/0/message/reasoning_content"),
                finish: v
                    .pointer("/choices/0/finish_reason")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                timings: v.get("timings").cloned(),
                usage: v.get("usage").cloned(),
                ..Piece::default()
            };
            if let Some(Value::Array(calls)) = v.pointer("/choices/0/message/tool_calls") {
                p.tool_calls = calls.clone();
            }
            p
        }
        _ => {
            let mut p = piece(target, v);
            p.finish.get_or_insert_with(|| "stop".into());
            p
        }
    }
}

/// Ollama's `done_reason` for the child's finish (chat's `finish_reason`,
/// or infill's `stop_type`).
pub fn done_reason(finish: Option<&str>) -> &'static str {
    match finish {
        // A length limit: max_tokens (chat, completions) or n_predict (infill).
        Some("length" | "limit") => "length",
        // A stop word, the end of the text, or a tool call: Ollama says stop.
        _ => "stop",
    }
}

/// Tool-call deltas of a stream, joined by their `index`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCalls {
    calls: Vec<(String, String)>,
}

impl ToolCalls {
    /// Adds the deltas of one event (OpenAI's `delta.tool_calls`).
    pub fn add(&mut self, deltas: &[Value]) {
        for d in deltas {
            let i = d.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            if self.calls.len() <= i {
                self.calls.resize(i + 1, Default::default());
            }
            self.calls[i].0.push_str(&text_at(d, "/function/name"));
            self.calls[i].1.push_str(&text_at(d, "/function/arguments"));
        }
    }

    /// The joined calls in Ollama's shape (empty when there were none).
    pub fn ollama(&self) -> Vec<Value> {
        self.calls.iter().map(|(name, args)| ollama_call(name, args)).collect()
    }
}

/// Whole OpenAI tool calls (a body's) in Ollama's shape.
pub fn tool_calls_out(calls: &[Value]) -> Vec<Value> {
    calls
        .iter()
        .map(|c| ollama_call(&text_at(c, "/function/name"), &text_at(c, "/function/arguments")))
        .collect()
}

/// `{"function": {"name", "arguments": {...}}}`: Ollama's arguments are an
/// object; text that is not JSON stays a string rather than being lost.
fn ollama_call(name: &str, args: &str) -> Value {
    let arguments = serde_json::from_str::<Value>(args).unwrap_or_else(|_| json!(args));
    json!({"function": {"name": name, "arguments": arguments}})
}

/// The durations and counts of a finished reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Durations {
    /// From the request's arrival to its end.
    pub total_duration: u64,
    /// The warden's load of the model for this request (0: it was loaded).
    pub load_duration: u64,
    /// Prompt tokens evaluated.
    pub prompt_eval_count: u64,
    /// Their time.
    pub prompt_eval_duration: u64,
    /// Tokens generated.
    pub eval_count: u64,
    /// Their time.
    pub eval_duration: u64,
}

/// The durations from the child's `timings` (else `usage`'s counts),
/// the request's total and the load, both in nanoseconds.
pub fn durations(timings: Option<&Value>, usage: Option<&Value>, total_ns: u64, load_ns: u64) -> Durations {
    let t = |k: &str| timings.and_then(|t| t.get(k)).and_then(Value::as_f64);
    let u = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64);
    let ns = |ms: Option<f64>| ms.map_or(0, |ms| (ms * 1e6).max(0.0) as u64);
    Durations {
        total_duration: total_ns,
        load_duration: load_ns,
        prompt_eval_count: t("prompt_n")
            .map(|n| n as u64)
            .or_else(|| u("prompt_tokens"))
            .unwrap_or(0),
        prompt_eval_duration: ns(t("prompt_ms")),
        eval_count: t("predicted_n")
            .map(|n| n as u64)
            .or_else(|| u("completion_tokens"))
            .unwrap_or(0),
        eval_duration: ns(t("predicted_ms")),
    }
}

/// The catalog id an Ollama model name means: the name itself, else
/// without its `:latest` tag (Ollama's clients add it to untagged names).
pub fn catalog_name(name: &str, exists: impl Fn(&str) -> bool) -> &str {
    if exists(name) {
        return name;
    }
    match name.strip_suffix(":latest") {
        Some(bare) if exists(bare) => bare,
        _ => name,
    }
}

/// What became of a request's `num_ctx`: the window is the law's, sized for
/// the machine and shared by every request, so a request never reloads the
/// model for its own; a `num_ctx` at or below the window is met (the
/// request has at least that context), one above it is capped to the
/// window, and the reply says so.
pub fn num_ctx(asked: Option<u64>, window: Option<u32>) -> Option<Value> {
    let (asked, window) = (asked?, window?);
    (asked > u64::from(window)).then(|| json!({"t": "num_ctx_capped", "num_ctx": asked, "window": window}))
}

/// Unix milliseconds as Ollama's RFC 3339 UTC timestamp
/// (`2024-05-01T12:34:56.789Z`).
pub fn rfc3339(unix_ms: u64) -> String {
    let t = crate::law::civil::civil((unix_ms / 1000) as i64);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year,
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        unix_ms % 1000
    )
}

#[cfg(test)]
#[path = "reply_tests.rs"]
mod tests;
