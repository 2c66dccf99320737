//! Ollama's requests in llama-server's terms: `/api/chat` and
//! `/api/generate` bodies become a chat, raw completion or infill body
//! (`reply` maps the answers back). Pure: JSON in, JSON out, and a
//! `Refusal` (the one `Violation` type) naming the field when a body cannot be honoured. `model`,
//! `stream` and `keep_alive` are read by the caller.
//!
//! Rules decided here:
//! - `options`: `temperature`, `top_p`, `top_k`, `seed`, `stop` and
//!   `num_predict` (→ `max_tokens`; -1 "until done" and -2 "fill the
//!   context" leave it unbounded, as the window bounds it) are sampling
//!   fields; `min_p`, `typical_p`, `repeat_penalty`, `repeat_last_n`,
//!   `presence_penalty`, `frequency_penalty`, `mirostat`, `mirostat_tau`,
//!   `mirostat_eta` and `penalize_newline` carry the same names in
//!   llama.cpp and pass; `num_keep` is llama.cpp's `n_keep`. `num_ctx` is
//!   handed back for the caller (the window is the law's and shared, so it
//!   never reloads the model: see `reply::num_ctx`). Runner options
//!   (`num_gpu`, `num_thread`, `num_batch`, `main_gpu`, `use_mmap`, `numa`,
//!   ...) size Ollama's own runner at load; here the warden sizes the child,
//!   so they are ignored, as Ollama ignores options it does not know.
//! - `format`: an object is a JSON schema; `"json"` is the schema of any
//!   object (Ollama's JSON grammar's root is an object). Not chat's
//!   `json_object` format: b10883 turns it into the empty schema `{}`,
//!   which its chat path does not constrain (measured: plain text came
//!   back).
//! - `images` (base64) become `data:` URLs, never a URL the child would
//!   fetch or a path it would read.
//! - `/api/generate`: `raw` sends the prompt as a raw completion; `suffix`
//!   makes it fill-in-the-middle (`/infill`); otherwise the prompt (and
//!   `system`) is a chat turn through the model's template. A custom
//!   `template` (a Go template) cannot be run here and is refused; the
//!   deprecated `context` token list is ignored (the warden returns none).
//! - An empty prompt or message list only loads the model (or, with
//!   `keep_alive` 0, unloads it), as Ollama does.

use serde_json::{Map, Value, json};

use crate::law::request::Violation;

/// A body that cannot be honoured: the one violation type (the field at
/// fault, `options.top_k`, `messages[1].images[0]`, and a sentence a person
/// can act on), a 400 `invalid_value`.
pub type Refusal = Violation;

fn refuse(param: impl Into<String>, message: impl Into<String>) -> Refusal {
    Violation {
        param: param.into(),
        code: "invalid_value",
        message: message.into(),
    }
}

/// Which llama-server route a request becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions` (`raw`).
    Completions,
    /// `/infill` (`suffix`).
    Infill,
}

/// A translated request.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    /// The route it takes.
    pub target: Target,
    /// The body for that route (without `model`, `stream`, `keep_alive`).
    pub body: Map<String, Value>,
    /// `options.num_ctx`, when asked for.
    pub num_ctx: Option<u64>,
    /// Nothing to generate: only load (or unload) the model.
    pub load_only: bool,
}

/// Options llama.cpp knows by the same name.
const SAME_NAME: &[&str] = &[
    "min_p",
    "typical_p",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "penalize_newline",
];

/// Options that are counts (integers).
const COUNTS: &[&str] = &["top_k", "seed", "repeat_last_n", "mirostat", "num_keep", "num_ctx"];

/// `options` into `body`; `num_ctx` when asked for.
pub fn options(v: Option<&Value>, body: &mut Map<String, Value>) -> Result<Option<u64>, Refusal> {
    let opts = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(refuse("options", "'options' must be an object")),
    };
    let number = |k: &str| -> Result<Option<&Value>, Refusal> {
        match opts.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) if COUNTS.contains(&k) && v.as_i64().is_none() && v.as_u64().is_none() => Err(refuse(
                format!("options.{k}"),
                format!("'options.{k}' must be an integer"),
            )),
            Some(v) if v.is_number() || (k == "penalize_newline" && v.is_boolean()) => Ok(Some(v)),
            Some(_) => Err(refuse(
                format!("options.{k}"),
                format!("'options.{k}' must be a number"),
            )),
        }
    };
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("seed", "seed"),
        ("num_keep", "n_keep"),
    ] {
        if let Some(v) = number(from)? {
            body.insert(to.into(), v.clone());
        }
    }
    for k in SAME_NAME {
        if let Some(v) = number(k)? {
            body.insert((*k).into(), v.clone());
        }
    }
    if let Some(n) = number("num_predict")? {
        match n.as_i64() {
            Some(n) if (0..1 << 31).contains(&n) => {
                body.insert("max_tokens".into(), json!(n));
            }
            // Ollama's "until done" (-1) and "fill the context" (-2).
            Some(-1 | -2) => {}
            _ => {
                return Err(refuse(
                    "options.num_predict",
                    "'options.num_predict' must be -1, -2 or an integer from 0 below 2^31",
                ));
            }
        }
    }
    match opts.get("stop") {
        None | Some(Value::Null) => {}
        Some(Value::Array(s)) if s.iter().all(Value::is_string) => {
            body.insert("stop".into(), Value::Array(s.clone()));
        }
        Some(Value::String(s)) => {
            body.insert("stop".into(), json!([s]));
        }
        Some(_) => return Err(refuse("options.stop", "'options.stop' must be an array of strings")),
    }
    match number("num_ctx")?.map(|n| n.as_u64()) {
        None => Ok(None),
        Some(Some(n)) if n > 0 => Ok(Some(n)),
        Some(_) => Err(refuse(
            "options.num_ctx",
            "'options.num_ctx' must be a positive integer",
        )),
    }
}

/// `format` into `body` for `target`.
pub fn format(v: Option<&Value>, target: Target, body: &mut Map<String, Value>) -> Result<(), Refusal> {
    let schema = match v {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) if s.is_empty() => return Ok(()),
        Some(Value::String(s)) if s == "json" => json!({"type": "object"}),
        Some(Value::Object(schema)) => Value::Object(schema.clone()),
        Some(_) => return Err(refuse("format", "'format' must be \"json\" or a JSON schema object")),
    };
    match target {
        Target::Chat => body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "format", "schema": schema}}),
        ),
        _ => body.insert("json_schema".into(), schema),
    };
    Ok(())
}

/// An image (base64) as a chat content part.
fn image_part(v: &Value, param: &str) -> Result<Value, Refusal> {
    let b64 = v
        .as_str()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=\r\n".contains(&b)))
        .ok_or_else(|| refuse(param, format!("'{param}' must be a base64-encoded image")))?;
    Ok(json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b64}")}}))
}

/// Text and images as a chat message's content (a string when no image).
fn content(text: &str, images: Option<&Value>, param: &str) -> Result<(Value, bool), Refusal> {
    let imgs = match images {
        None | Some(Value::Null) => return Ok((json!(text), false)),
        Some(Value::Array(a)) if a.is_empty() => return Ok((json!(text), false)),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(refuse(param, format!("'{param}' must be an array of base64 images"))),
    };
    let mut parts = vec![json!({"type": "text", "text": text})];
    for (i, img) in imgs.iter().enumerate() {
        parts.push(image_part(img, &format!("{param}[{i}]"))?);
    }
    Ok((Value::Array(parts), true))
}

/// An Ollama message as a chat message.
fn message(m: &Value, i: usize) -> Result<Value, Refusal> {
    let at = format!("messages[{i}]");
    let m = m
        .as_object()
        .ok_or_else(|| refuse(&at, format!("'{at}' must be an object")))?;
    let role = match m.get("role").and_then(Value::as_str) {
        Some(r @ ("system" | "user" | "assistant" | "tool")) => r,
        _ => {
            return Err(refuse(
                format!("{at}.role"),
                format!("'{at}.role' must be system, user, assistant or tool"),
            ));
        }
    };
    let text = match m.get("content") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s,
        Some(_) => {
            return Err(refuse(
                format!("{at}.content"),
                format!("'{at}.content' must be a string"),
            ));
        }
    };
    let (content, _) = content(text, m.get("images"), &format!("{at}.images"))?;
    let mut out = json!({"role": role, "content": content});
    if let Some(t) = m.get("thinking").and_then(Value::as_str).filter(|t| !t.is_empty()) {
        out["reasoning_content"] = json!(t);
    }
    if let Some(name) = m.get("tool_name").and_then(Value::as_str) {
        // llama.cpp reads a tool result's tool name as `name`.
        out["name"] = json!(name);
    }
    match m.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(calls)) => {
            let calls = calls
                .iter()
                .enumerate()
                .map(|(j, c)| tool_call_in(c, &format!("{at}.tool_calls[{j}]"), j))
                .collect::<Result<Vec<_>, _>>()?;
            out["tool_calls"] = Value::Array(calls);
        }
        Some(_) => {
            return Err(refuse(
                format!("{at}.tool_calls"),
                format!("'{at}.tool_calls' must be an array"),
            ));
        }
    }
    Ok(out)
}

/// An Ollama tool call (`{"function": {"name", "arguments": {...}}}`) as
/// OpenAI's (`arguments` a JSON string, an id made up from its place).
fn tool_call_in(c: &Value, param: &str, index: usize) -> Result<Value, Refusal> {
    let f = c.get("function").and_then(Value::as_object);
    let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
    let (Some(f), Some(name)) = (f, name) else {
        return Err(refuse(
            param,
            format!("'{param}' must be {{\"function\": {{\"name\", \"arguments\"}}}}"),
        ));
    };
    let args = f.get("arguments").cloned().unwrap_or_else(|| json!({}));
    Ok(json!({
        "id": format!("call_{index}"),
        "type": "function",
        "function": {"name": name, "arguments": args.to_string()},
    }))
}

/// `think`: thinking on or off through the template, or an effort level.
fn think(v: Option<&Value>, body: &mut Map<String, Value>) -> Result<(), Refusal> {
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Bool(on)) => {
            body.insert("chat_template_kwargs".into(), json!({"enable_thinking": on}));
        }
        Some(Value::String(level)) if ["high", "medium", "low"].contains(&level.as_str()) => {
            body.insert("reasoning_effort".into(), json!(level));
        }
        Some(_) => {
            return Err(refuse(
                "think",
                "'think' must be a boolean or \"high\", \"medium\", \"low\"",
            ));
        }
    }
    Ok(())
}

/// An `/api/chat` body.
pub fn chat(req: &Map<String, Value>) -> Result<Translated, Refusal> {
    let msgs = match req.get("messages") {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Array(m)) => m,
        Some(_) => return Err(refuse("messages", "'messages' must be an array")),
    };
    let mut body = Map::new();
    let messages = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| message(m, i))
        .collect::<Result<Vec<_>, _>>()?;
    let load_only = messages.is_empty();
    body.insert("messages".into(), Value::Array(messages));
    match req.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(t)) if !t.is_empty() => {
            body.insert("tools".into(), Value::Array(t.clone()));
        }
        Some(Value::Array(_)) => {}
        Some(_) => return Err(refuse("tools", "'tools' must be an array")),
    }
    let num_ctx = options(req.get("options"), &mut body)?;
    format(req.get("format"), Target::Chat, &mut body)?;
    think(req.get("think"), &mut body)?;
    Ok(Translated {
        target: Target::Chat,
        body,
        num_ctx,
        load_only,
    })
}

/// An `/api/generate` body.
pub fn generate(req: &Map<String, Value>) -> Result<Translated, Refusal> {
    let text = |k: &str| -> Result<Option<&str>, Refusal> {
        match req.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(refuse(k, format!("'{k}' must be a string"))),
        }
    };
    let prompt = text("prompt")?.unwrap_or("");
    let suffix = text("suffix")?.filter(|s| !s.is_empty());
    let system = text("system")?.filter(|s| !s.is_empty());
    if text("template")?.is_some_and(|t| !t.is_empty()) {
        return Err(refuse(
            "template",
            "a custom 'template' is not supported (the model's own chat template applies); send 'raw': true with a prompt you formatted yourself",
        ));
    }
    let raw = match req.get("raw") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(refuse("raw", "'raw' must be a boolean")),
    };
    let (prompt_content, images) = content(prompt, req.get("images"), "images")?;
    let target = match (suffix, raw) {
        (Some(_), _) => Target::Infill,
        (None, true) => Target::Completions,
        (None, false) => Target::Chat,
    };
    if images && target != Target::Chat {
        return Err(refuse(
            "images",
            "'images' need a chat turn: leave out 'raw' and 'suffix'",
        ));
    }
    let mut body = Map::new();
    match target {
        Target::Chat => {
            let mut messages = Vec::new();
            if let Some(s) = system {
                messages.push(json!({"role": "system", "content": s}));
            }
            messages.push(json!({"role": "user", "content": prompt_content}));
            body.insert("messages".into(), Value::Array(messages));
        }
        Target::Completions => {
            body.insert("prompt".into(), json!(prompt));
        }
        Target::Infill => {
            body.insert("input_prefix".into(), json!(prompt));
            body.insert("input_suffix".into(), json!(suffix.unwrap_or("")));
        }
    }
    let num_ctx = options(req.get("options"), &mut body)?;
    format(req.get("format"), target, &mut body)?;
    if target == Target::Chat {
        think(req.get("think"), &mut body)?;
    }
    if target == Target::Infill {
        // llama.cpp's infill speaks `n_predict`.
        if let Some(n) = body.remove("max_tokens") {
            body.insert("n_predict".into(), n);
        }
    }
    Ok(Translated {
        target,
        body,
        num_ctx,
        load_only: prompt.is_empty() && suffix.is_none(),
    })
}

#[cfg(test)]
#[path = "translate_tests.rs"]
mod tests;
