//! Ollama's requests in llama-server's terms: `/api/chat` and
//! `/api/generate` bodies become a chat, raw completion or infill body
//! (`reply` maps the answers back). Pure: the body read into Ollama's
//! typed request (serde types, `typed::decode`), JSON out, and a `Refusal`
//! (the one `Violation` type) naming the field when a body cannot be
//! honoured. `model`, `stream` and `keep_alive` are read by the caller.
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

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_json::{Map, Number, Value, json};

use crate::http::typed::{StrOrMap, decode};
use crate::law::request::Violation;

/// A body that cannot be honoured: the one violation type (the field at
/// fault, `options.top_k`, `messages[1].images[0]`, and a sentence a person
/// can act on). A wrong JSON type is `invalid_type` (`typed::decode`), a
/// value outside what Ollama defines `invalid_value`.
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

/// An `/api/chat` body as the warden reads it.
#[derive(Debug, Deserialize)]
struct ChatIn<'a> {
    #[serde(borrow)]
    messages: Option<Vec<MessageIn<'a>>>,
    /// OpenAI's tool shape already: passed as they are.
    tools: Option<Vec<Value>>,
    #[serde(borrow)]
    options: Option<Options<'a>>,
    #[serde(borrow)]
    format: Option<StrOrMap<&'a str, Map<String, Value>>>,
    #[serde(borrow)]
    think: Option<Think<'a>>,
}

/// An `/api/generate` body as the warden reads it (`context`, the
/// deprecated token list, is not read: the warden returns none).
#[derive(Debug, Deserialize)]
struct GenerateIn<'a> {
    prompt: Option<&'a str>,
    suffix: Option<&'a str>,
    system: Option<&'a str>,
    template: Option<&'a str>,
    raw: Option<bool>,
    #[serde(borrow)]
    images: Option<Vec<&'a str>>,
    #[serde(borrow)]
    options: Option<Options<'a>>,
    #[serde(borrow)]
    format: Option<StrOrMap<&'a str, Map<String, Value>>>,
    #[serde(borrow)]
    think: Option<Think<'a>>,
}

#[derive(Debug, Deserialize)]
struct MessageIn<'a> {
    role: Option<Role>,
    content: Option<&'a str>,
    #[serde(borrow)]
    images: Option<Vec<&'a str>>,
    thinking: Option<&'a str>,
    tool_name: Option<&'a str>,
    #[serde(borrow)]
    tool_calls: Option<Vec<ToolCallIn<'a>>>,
}

/// Ollama's roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

#[derive(Debug, Deserialize)]
struct ToolCallIn<'a> {
    #[serde(borrow)]
    function: Option<FunctionIn<'a>>,
}

#[derive(Debug, Deserialize)]
struct FunctionIn<'a> {
    name: Option<&'a str>,
    arguments: Option<Value>,
}

/// `options`: the sampling knobs the warden passes on (each its own
/// spelling kept: `0` stays an integer, as the client wrote it), Ollama's
/// `stop` and `num_ctx`. Runner options (`num_gpu`, `num_thread`,
/// `num_batch`, ...) are not read: they size Ollama's own runner, and the
/// warden sizes the child.
#[derive(Debug, Deserialize)]
struct Options<'a> {
    temperature: Option<Number>,
    top_p: Option<Number>,
    top_k: Option<Integer>,
    seed: Option<Integer>,
    num_keep: Option<Integer>,
    num_predict: Option<Integer>,
    num_ctx: Option<Integer>,
    #[serde(borrow)]
    stop: Option<Stop<'a>>,
    min_p: Option<Number>,
    typical_p: Option<Number>,
    repeat_penalty: Option<Number>,
    repeat_last_n: Option<Integer>,
    presence_penalty: Option<Number>,
    frequency_penalty: Option<Number>,
    mirostat: Option<Integer>,
    mirostat_tau: Option<Number>,
    mirostat_eta: Option<Number>,
    penalize_newline: Option<Value>,
}

/// An integer option, its spelling kept.
#[derive(Debug, Clone, PartialEq)]
struct Integer(Number);

impl<'de> Deserialize<'de> for Integer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Integer;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Integer, E> {
                Ok(Integer(n.into()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Integer, E> {
                Ok(Integer(n.into()))
            }
        }
        d.deserialize_i64(V)
    }
}

/// `stop`: one string or several.
#[derive(Debug)]
enum Stop<'a> {
    One(&'a str),
    Many(Vec<&'a str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Stop<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Stop<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Stop<'de>, E> {
                Ok(Stop::One(s))
            }
            // Each item read in turn, so an error names its index.
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Stop<'de>, A::Error> {
                let mut all = Vec::new();
                while let Some(s) = seq.next_element()? {
                    all.push(s);
                }
                Ok(Stop::Many(all))
            }
        }
        d.deserialize_any(V)
    }
}

/// `think`: thinking on or off through the template, or an effort level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Think<'a> {
    On(bool),
    Level(&'a str),
}

impl<'de: 'a, 'a> Deserialize<'de> for Think<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Think<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a boolean or \"high\", \"medium\", \"low\"")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Think<'de>, E> {
                Ok(Think::On(b))
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Think<'de>, E> {
                Ok(Think::Level(s))
            }
        }
        d.deserialize_any(V)
    }
}

/// The options llama.cpp knows by the same name (numbers).
fn same_name<'o>(o: &'o Options) -> [(&'static str, Option<&'o Number>); 9] {
    [
        ("min_p", o.min_p.as_ref()),
        ("typical_p", o.typical_p.as_ref()),
        ("repeat_penalty", o.repeat_penalty.as_ref()),
        ("repeat_last_n", o.repeat_last_n.as_ref().map(|i| &i.0)),
        ("presence_penalty", o.presence_penalty.as_ref()),
        ("frequency_penalty", o.frequency_penalty.as_ref()),
        ("mirostat", o.mirostat.as_ref().map(|i| &i.0)),
        ("mirostat_tau", o.mirostat_tau.as_ref()),
        ("mirostat_eta", o.mirostat_eta.as_ref()),
    ]
}

/// `options` into `body`; `num_ctx` when asked for.
fn options(opts: Option<&Options>, body: &mut Map<String, Value>) -> Result<Option<u64>, Refusal> {
    let Some(o) = opts else { return Ok(None) };
    let renamed = [
        ("temperature", o.temperature.as_ref()),
        ("top_p", o.top_p.as_ref()),
        ("top_k", o.top_k.as_ref().map(|i| &i.0)),
        ("seed", o.seed.as_ref().map(|i| &i.0)),
        // llama.cpp's name for it.
        ("n_keep", o.num_keep.as_ref().map(|i| &i.0)),
    ];
    for (to, v) in renamed.into_iter().chain(same_name(o)) {
        if let Some(v) = v {
            body.insert(to.into(), Value::Number(v.clone()));
        }
    }
    match &o.penalize_newline {
        None => {}
        Some(v @ (Value::Bool(_) | Value::Number(_))) => {
            body.insert("penalize_newline".into(), v.clone());
        }
        Some(_) => {
            return Err(Violation::ty("options.penalize_newline", "a boolean or a number"));
        }
    }
    if let Some(Integer(n)) = &o.num_predict {
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
    match &o.stop {
        None => {}
        Some(Stop::One(s)) => {
            body.insert("stop".into(), json!([s]));
        }
        Some(Stop::Many(s)) => {
            body.insert("stop".into(), json!(s));
        }
    }
    match o.num_ctx.as_ref().map(|Integer(n)| n.as_u64()) {
        None => Ok(None),
        Some(Some(n)) if n > 0 => Ok(Some(n)),
        Some(_) => Err(refuse(
            "options.num_ctx",
            "'options.num_ctx' must be a positive integer",
        )),
    }
}

/// `format` into `body` for `target`.
fn format(
    v: Option<&StrOrMap<&str, Map<String, Value>>>,
    target: Target,
    body: &mut Map<String, Value>,
) -> Result<(), Refusal> {
    let schema = match v {
        None | Some(StrOrMap::Str("")) => return Ok(()),
        Some(StrOrMap::Str("json")) => json!({"type": "object"}),
        Some(StrOrMap::Map(schema)) => Value::Object(schema.clone()),
        Some(StrOrMap::Str(_)) => return Err(refuse("format", "'format' must be \"json\" or a JSON schema object")),
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
fn image_part(b64: &str, param: &str) -> Result<Value, Refusal> {
    let base64 = !b64.is_empty()
        && b64
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=\r\n".contains(&b));
    if !base64 {
        return Err(refuse(param, format!("'{param}' must be a base64-encoded image")));
    }
    Ok(json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b64}")}}))
}

/// Text and images as a chat message's content (a string when no image).
fn content(text: &str, images: Option<&[&str]>, param: &str) -> Result<(Value, bool), Refusal> {
    let imgs = match images {
        None | Some([]) => return Ok((json!(text), false)),
        Some(a) => a,
    };
    let mut parts = vec![json!({"type": "text", "text": text})];
    for (i, img) in imgs.iter().enumerate() {
        parts.push(image_part(img, &format!("{param}[{i}]"))?);
    }
    Ok((Value::Array(parts), true))
}

/// An Ollama message as a chat message.
fn message(m: &MessageIn, i: usize) -> Result<Value, Refusal> {
    let at = format!("messages[{i}]");
    let role = m.role.ok_or_else(|| Violation::required(format!("{at}.role")))?;
    let (content, _) = content(m.content.unwrap_or(""), m.images.as_deref(), &format!("{at}.images"))?;
    let mut out = json!({"role": role.as_str(), "content": content});
    if let Some(t) = m.thinking.filter(|t| !t.is_empty()) {
        out["reasoning_content"] = json!(t);
    }
    if let Some(name) = m.tool_name {
        // llama.cpp reads a tool result's tool name as `name`.
        out["name"] = json!(name);
    }
    if let Some(calls) = &m.tool_calls {
        let calls = calls
            .iter()
            .enumerate()
            .map(|(j, c)| tool_call_in(c, &format!("{at}.tool_calls[{j}]"), j))
            .collect::<Result<Vec<_>, _>>()?;
        out["tool_calls"] = Value::Array(calls);
    }
    Ok(out)
}

/// An Ollama tool call (`{"function": {"name", "arguments": {...}}}`) as
/// OpenAI's (`arguments` a JSON string, an id made up from its place).
fn tool_call_in(c: &ToolCallIn, param: &str, index: usize) -> Result<Value, Refusal> {
    let f = c.function.as_ref();
    let (Some(f), Some(name)) = (f, f.and_then(|f| f.name)) else {
        return Err(refuse(
            param,
            format!("'{param}' must be {{\"function\": {{\"name\", \"arguments\"}}}}"),
        ));
    };
    let args = f.arguments.clone().unwrap_or_else(|| json!({}));
    Ok(json!({
        "id": format!("call_{index}"),
        "type": "function",
        "function": {"name": name, "arguments": args.to_string()},
    }))
}

/// `think` into `body`.
fn think(v: Option<Think>, body: &mut Map<String, Value>) -> Result<(), Refusal> {
    match v {
        None => {}
        Some(Think::On(on)) => {
            body.insert("chat_template_kwargs".into(), json!({"enable_thinking": on}));
        }
        Some(Think::Level(level @ ("high" | "medium" | "low"))) => {
            body.insert("reasoning_effort".into(), json!(level));
        }
        Some(Think::Level(_)) => {
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
    let req: ChatIn = decode(req)?;
    let mut body = Map::new();
    let messages = req
        .messages
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, m)| message(m, i))
        .collect::<Result<Vec<_>, _>>()?;
    let load_only = messages.is_empty();
    body.insert("messages".into(), Value::Array(messages));
    if let Some(t) = req.tools.filter(|t| !t.is_empty()) {
        body.insert("tools".into(), Value::Array(t));
    }
    let num_ctx = options(req.options.as_ref(), &mut body)?;
    format(req.format.as_ref(), Target::Chat, &mut body)?;
    think(req.think, &mut body)?;
    Ok(Translated {
        target: Target::Chat,
        body,
        num_ctx,
        load_only,
    })
}

/// An `/api/generate` body; `templated`: the model has a chat template (one
/// without generates from the prompt as given unless `raw` says otherwise,
/// as Ollama's own `{{ .Prompt }}` template does).
pub fn generate(req: &Map<String, Value>, templated: bool) -> Result<Translated, Refusal> {
    let req: GenerateIn = decode(req)?;
    let prompt = req.prompt.unwrap_or("");
    let suffix = req.suffix.filter(|s| !s.is_empty());
    let system = req.system.filter(|s| !s.is_empty());
    if req.template.is_some_and(|t| !t.is_empty()) {
        return Err(refuse(
            "template",
            "a custom 'template' is not supported (the model's own chat template applies); send 'raw': true with a prompt you formatted yourself",
        ));
    }
    let raw = req.raw.unwrap_or(!templated);
    let (prompt_content, images) = content(prompt, req.images.as_deref(), "images")?;
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
    let num_ctx = options(req.options.as_ref(), &mut body)?;
    format(req.format.as_ref(), target, &mut body)?;
    if target == Target::Chat {
        think(req.think, &mut body)?;
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
