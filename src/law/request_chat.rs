//! The nested shapes of a chat request: `messages` (roles, content and its
//! parts, tool calls), `tools`, `tool_choice` and `response_format`, and
//! the capabilities the request needs of its model (images, audio, video
//! need a projector). Pure; the scalar fields are `request`'s table.
//!
//! Each check below stands for a 500 (or a silent misreading) that
//! llama-server b10883 gave a hostile client: a text part without a string
//! `text` (`part.at("text")` into a string: a json type error), `tools`
//! that is not an array of `{type: "function", function: {name}}`
//! ("Failed to parse tools", a runtime error), `tool_calls` that is not an
//! array of objects, a `name` or `reasoning_content` that is not a string,
//! an image part sent to a model without a projector ("image input is not
//! supported", a runtime error). The rows of `request_tests` name them.

use serde_json::{Map, Value};

use super::request::Violation;

/// Roles OpenAI's chat API defines.
pub const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool", "function"];
/// Content part types the child reads (`text` always; the media ones with
/// a projector).
pub const PART_TYPES: &[&str] = &["text", "image_url", "input_audio", "input_video"];
/// The `tool_choice` strings.
pub const TOOL_CHOICES: &[&str] = &["none", "auto", "required"];
/// The `response_format` types.
pub const RESPONSE_FORMATS: &[&str] = &["text", "json_object", "json_schema"];

/// What a request needs of its model beyond text: the first part that
/// needs each, by its path, for the 400 that names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// An `image_url` part.
    pub image: Option<String>,
    /// An `input_audio` part.
    pub audio: Option<String>,
    /// An `input_video` part.
    pub video: Option<String>,
}

/// What a model can take, read from its files (its projector and its
/// header).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// A projector with a vision encoder.
    pub vision: bool,
    /// A projector with an audio encoder.
    pub audio: bool,
    /// Fill-in-the-middle tokens (prefix, suffix, middle).
    pub fim: bool,
    /// What the model serves (its header declares a pooling: embedding).
    pub kind: super::types::ModelKind,
    /// An embedding model whose pooling is `rank`: it serves `/v1/rerank`.
    pub reranks: bool,
}

impl Needs {
    /// The first need `caps` cannot meet, as the 400 naming its part.
    pub fn unmet(&self, caps: Capabilities, model: &str) -> Option<Violation> {
        let refuse = |param: &String, what: &str| Violation {
            param: param.clone(),
            code: "unsupported_value",
            message: format!(
                "'{param}' is {what}, but the model '{model}' was loaded without a projector that reads it (a mmproj GGUF beside the model)"
            ),
        };
        if let Some(p) = &self.image
            && !caps.vision
        {
            return Some(refuse(p, "an image"));
        }
        if let Some(p) = &self.audio
            && !caps.audio
        {
            return Some(refuse(p, "audio"));
        }
        // No projector format of b10883 reads video for the server.
        self.video.as_ref().map(|p| refuse(p, "a video"))
    }
}

/// A chat body that passed `check_chat`: what it needs of its model, and
/// its messages as checked (a non-empty array of message objects), so no
/// caller reads the body again and assumes.
#[derive(Debug, Clone)]
pub struct CheckedChat<'a> {
    /// What the request needs of its model.
    pub needs: Needs,
    /// The messages.
    pub messages: &'a [Value],
}

/// Checks `messages` and the tool and format fields.
pub fn check_chat(body: &Map<String, Value>) -> Result<CheckedChat<'_>, Violation> {
    let messages = match body.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => {
            return Err(Violation {
                param: "messages".into(),
                code: "empty_messages",
                message: "'messages' must not be empty".into(),
            });
        }
        None | Some(Value::Null) => return Err(Violation::missing("messages", "the conversation to answer")),
        Some(_) => return Err(Violation::ty("messages", "an array of messages")),
    };
    let mut needs = Needs::default();
    for (i, m) in messages.iter().enumerate() {
        message(&format!("messages[{i}]"), m, &mut needs)?;
    }
    if let Some(v) = present(body, "tools") {
        tools(v)?;
    }
    if let Some(v) = present(body, "tool_choice") {
        tool_choice(v)?;
    }
    if let Some(v) = present(body, "response_format") {
        response_format(v)?;
    }
    Ok(CheckedChat { needs, messages })
}

/// A field present and not null (null is absent, as in the child).
fn present<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

/// An optional string field of an object.
fn opt_string(m: &Map<String, Value>, param: &str, key: &str) -> Result<(), Violation> {
    match present(m, key) {
        None | Some(Value::String(_)) => Ok(()),
        Some(_) => Err(Violation::ty(format!("{param}.{key}"), "a string")),
    }
}

/// A required string field of an object.
fn req_string<'a>(m: &'a Map<String, Value>, param: &str, key: &str) -> Result<&'a str, Violation> {
    match present(m, key) {
        Some(Value::String(s)) => Ok(s),
        None => Err(Violation::missing(format!("{param}.{key}"), "a string")),
        Some(_) => Err(Violation::ty(format!("{param}.{key}"), "a string")),
    }
}

/// A required object field of an object.
fn req_object<'a>(m: &'a Map<String, Value>, param: &str, key: &str) -> Result<&'a Map<String, Value>, Violation> {
    match present(m, key) {
        Some(Value::Object(o)) => Ok(o),
        None => Err(Violation::missing(format!("{param}.{key}"), "an object")),
        Some(_) => Err(Violation::ty(format!("{param}.{key}"), "an object")),
    }
}

fn object<'a>(param: &str, v: &'a Value) -> Result<&'a Map<String, Value>, Violation> {
    v.as_object().ok_or_else(|| Violation::ty(param, "an object"))
}

fn message(param: &str, m: &Value, needs: &mut Needs) -> Result<(), Violation> {
    let m = object(param, m)?;
    let role = match present(m, "role") {
        Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.as_str(),
        Some(Value::String(r)) => {
            return Err(Violation::value(
                format!("{param}.role"),
                format!("one of {} (got '{r}')", ROLES.join(", ")),
            ));
        }
        None => return Err(Violation::missing(format!("{param}.role"), "who speaks")),
        Some(_) => return Err(Violation::ty(format!("{param}.role"), "a string")),
    };
    let has_calls = present(m, "tool_calls").is_some();
    match m.get("content") {
        None if role == "assistant" && has_calls => {}
        None => {
            return Err(Violation::missing(
                format!("{param}.content"),
                if role == "assistant" {
                    "an assistant message has content or tool_calls"
                } else {
                    "every message but an assistant's has content"
                },
            ));
        }
        Some(Value::Null | Value::String(_)) => {}
        Some(Value::Array(parts)) => {
            for (j, p) in parts.iter().enumerate() {
                part(&format!("{param}.content[{j}]"), p, needs)?;
            }
        }
        Some(_) => {
            return Err(Violation::ty(
                format!("{param}.content"),
                "a string or an array of content parts",
            ));
        }
    }
    for key in ["name", "tool_call_id", "reasoning_content", "refusal"] {
        opt_string(m, param, key)?;
    }
    if let Some(calls) = present(m, "tool_calls") {
        tool_calls(&format!("{param}.tool_calls"), calls)?;
    }
    Ok(())
}

fn part(param: &str, p: &Value, needs: &mut Needs) -> Result<(), Violation> {
    let p = object(param, p)?;
    let ty = req_string(p, param, "type")?;
    let media = |key: &str, url_keys: &[&str]| -> Result<(), Violation> {
        let o = req_object(p, param, key)?;
        let inner = format!("{param}.{key}");
        match url_keys.iter().find_map(|k| present(o, k).map(|v| (k, v))) {
            Some((_, Value::String(_))) => Ok(()),
            Some((k, _)) => Err(Violation::ty(format!("{inner}.{k}"), "a string")),
            None => Err(Violation::missing(
                format!("{inner}.{}", url_keys[0]),
                "the media's data or URL",
            )),
        }
    };
    match ty {
        "text" => req_string(p, param, "text").map(drop),
        "image_url" => {
            media("image_url", &["url"])?;
            needs.image.get_or_insert_with(|| param.to_string());
            Ok(())
        }
        "input_audio" => {
            media("input_audio", &["data", "url"])?;
            // media() checked it is an object.
            let audio = p["input_audio"].as_object().expect("checked by media");
            opt_string(audio, &format!("{param}.input_audio"), "format")?;
            needs.audio.get_or_insert_with(|| param.to_string());
            Ok(())
        }
        "input_video" => {
            media("input_video", &["data", "url"])?;
            needs.video.get_or_insert_with(|| param.to_string());
            Ok(())
        }
        other => Err(Violation {
            param: format!("{param}.type"),
            code: "unsupported_value",
            message: format!(
                "'{param}.type' '{other}' is not a content part this server reads ({})",
                PART_TYPES.join(", ")
            ),
        }),
    }
}

fn tool_calls(param: &str, v: &Value) -> Result<(), Violation> {
    let Value::Array(calls) = v else {
        return Err(Violation::ty(param, "an array of tool calls"));
    };
    for (i, c) in calls.iter().enumerate() {
        let param = format!("{param}[{i}]");
        let c = object(&param, c)?;
        function_type(c, &param)?;
        opt_string(c, &param, "id")?;
        let f = req_object(c, &param, "function")?;
        let fparam = format!("{param}.function");
        req_string(f, &fparam, "name")?;
        // The child takes arguments as a JSON string or dumps an object.
        match present(f, "arguments") {
            Some(Value::String(_) | Value::Object(_)) => {}
            None => return Err(Violation::missing(format!("{fparam}.arguments"), "a JSON string")),
            Some(_) => return Err(Violation::ty(format!("{fparam}.arguments"), "a JSON string")),
        }
    }
    Ok(())
}

/// `type`: required by the child, and only `function` exists.
fn function_type(o: &Map<String, Value>, param: &str) -> Result<(), Violation> {
    match req_string(o, param, "type")? {
        "function" => Ok(()),
        other => Err(Violation {
            param: format!("{param}.type"),
            code: "unsupported_value",
            message: format!("'{param}.type' must be 'function' (got '{other}')"),
        }),
    }
}

fn tools(v: &Value) -> Result<(), Violation> {
    let Value::Array(tools) = v else {
        return Err(Violation::ty("tools", "an array of tools"));
    };
    for (i, t) in tools.iter().enumerate() {
        let param = format!("tools[{i}]");
        let t = object(&param, t)?;
        function_type(t, &param)?;
        let f = req_object(t, &param, "function")?;
        let fparam = format!("{param}.function");
        req_string(f, &fparam, "name")?;
        opt_string(f, &fparam, "description")?;
        match present(f, "parameters") {
            None | Some(Value::Object(_)) => {}
            Some(_) => return Err(Violation::ty(format!("{fparam}.parameters"), "a JSON schema object")),
        }
    }
    Ok(())
}

fn tool_choice(v: &Value) -> Result<(), Violation> {
    match v {
        Value::String(s) if TOOL_CHOICES.contains(&s.as_str()) => Ok(()),
        Value::String(_) => Err(Violation::value(
            "tool_choice",
            format!("one of {} or {{\"type\": \"function\", ...}}", TOOL_CHOICES.join(", ")),
        )),
        Value::Object(o) => {
            function_type(o, "tool_choice")?;
            req_string(
                req_object(o, "tool_choice", "function")?,
                "tool_choice.function",
                "name",
            )
            .map(drop)
        }
        _ => Err(Violation::ty("tool_choice", "a string or an object")),
    }
}

fn response_format(v: &Value) -> Result<(), Violation> {
    let o = object("response_format", v)?;
    match req_string(o, "response_format", "type")? {
        "json_schema" => {
            let s = req_object(o, "response_format", "json_schema")?;
            match present(s, "schema") {
                None | Some(Value::Object(_)) => Ok(()),
                Some(_) => Err(Violation::ty("response_format.json_schema.schema", "an object")),
            }
        }
        t if RESPONSE_FORMATS.contains(&t) => Ok(()),
        _ => Err(Violation::value(
            "response_format.type",
            format!("one of {}", RESPONSE_FORMATS.join(", ")),
        )),
    }
}
