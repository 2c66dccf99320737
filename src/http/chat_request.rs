//! A chat body's nested shapes as the warden reads them: `messages` (roles,
//! content and its parts, tool calls), `tools`, `tool_choice` and
//! `response_format` as serde types read once (`typed::decode`), then the
//! rules the types cannot say, and what the request needs of its model
//! (`law::request_chat::Needs`). The scalar fields are `law::request`'s
//! table.
//!
//! Each shape below stands for a 500 (or a silent misreading) that
//! llama-server b10883 gave a hostile client: a text part without a string
//! `text` (`part.at("text")` into a string: a json type error), `tools`
//! that is not an array of `{type: "function", function: {name}}`
//! ("Failed to parse tools", a runtime error), `tool_calls` that is not an
//! array of objects, a `name` or `reasoning_content` that is not a string,
//! an image part sent to a model without a projector ("image input is not
//! supported", a runtime error). The rows of `chat_request_tests` name them.

use serde::Deserialize;

use super::typed::{Object, StrOr, StrOrMap, Text, present};
use crate::law::request::Violation;
use crate::law::request_chat::Needs;

/// The nested fields of a chat body.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // `tools`, `response_format`: read for their shape
pub(super) struct Body {
    messages: Option<Vec<Message>>,
    tools: Option<Vec<Tool>>,
    tool_choice: Option<StrOrMap<ChoiceMode, ToolChoice>>,
    response_format: Option<ResponseFormat>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)] // the texts: read for their shape
struct Message {
    role: Option<Role>,
    /// Absent and null differ: null is an empty turn the child takes.
    #[serde(default, deserialize_with = "present")]
    content: Option<Option<StrOr<Part>>>,
    name: Option<Text>,
    tool_call_id: Option<Text>,
    reasoning_content: Option<Text>,
    refusal: Option<Text>,
    tool_calls: Option<Vec<ToolCall>>,
}

/// The roles OpenAI's chat API defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Function,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Part {
    #[serde(rename = "type")]
    kind: Option<PartKind>,
    text: Option<Text>,
    image_url: Option<Media>,
    input_audio: Option<Media>,
    input_video: Option<Media>,
}

/// The part types the child reads (`text` always; the media ones with a
/// projector).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PartKind {
    Text,
    ImageUrl,
    InputAudio,
    InputVideo,
}

/// A media part's object: its data inline or its address.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Media {
    url: Option<Text>,
    data: Option<Text>,
    format: Option<Text>,
}

/// `function`: the only tool type the child runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FunctionKind {
    Function,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct ToolCall {
    #[serde(rename = "type")]
    kind: Option<FunctionKind>,
    id: Option<Text>,
    function: Option<CalledFunction>,
}

#[derive(Debug, Deserialize)]
struct CalledFunction {
    name: Option<Text>,
    /// The child takes arguments as a JSON string or dumps an object.
    arguments: Option<StrOrMap<Text, Object>>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Tool {
    #[serde(rename = "type")]
    kind: Option<FunctionKind>,
    function: Option<FunctionDef>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct FunctionDef {
    name: Option<Text>,
    description: Option<Text>,
    parameters: Option<Object>,
}

/// `tool_choice`'s names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ChoiceMode {
    None,
    Auto,
    Required,
}

#[derive(Debug, Deserialize)]
struct ToolChoice {
    #[serde(rename = "type")]
    kind: Option<FunctionKind>,
    function: Option<ChosenFunction>,
}

#[derive(Debug, Deserialize)]
struct ChosenFunction {
    name: Option<Text>,
}

#[derive(Debug, Deserialize)]
struct ResponseFormat {
    #[serde(rename = "type")]
    kind: Option<FormatKind>,
    json_schema: Option<JsonSchema>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FormatKind {
    Text,
    JsonObject,
    JsonSchema,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct JsonSchema {
    schema: Option<Object>,
}

/// What the warden takes from a chat body beside the body itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Read {
    /// What the request needs of its model.
    pub needs: Needs,
    /// The conversation carries an earlier answer.
    pub has_answer: bool,
}

/// `field` is present, else the violation that says `param` is required
/// (`what`: what it holds, for a person).
fn need<T>(field: &Option<T>, param: impl FnOnce() -> String, what: &str) -> Result<(), Violation> {
    field
        .as_ref()
        .map(|_| ())
        .ok_or_else(|| Violation::missing(param(), what))
}

impl Body {
    /// The rules the types cannot say, over the decoded body.
    pub(super) fn check(&self) -> Result<Read, Violation> {
        let messages = self
            .messages
            .as_deref()
            .ok_or_else(|| Violation::missing("messages", "the conversation to answer"))?;
        if messages.is_empty() {
            return Err(Violation::new(
                "empty_messages",
                "'messages' must not be empty",
                "messages",
            ));
        }
        let mut read = Read::default();
        for (i, m) in messages.iter().enumerate() {
            read.has_answer |= m.check(&format!("messages[{i}]"), &mut read.needs)? == Role::Assistant;
        }
        for (i, t) in self.tools.iter().flatten().enumerate() {
            let param = format!("tools[{i}]");
            need(&t.kind, || format!("{param}.type"), "'function'")?;
            let f = t
                .function
                .as_ref()
                .ok_or_else(|| Violation::missing(format!("{param}.function"), "an object"))?;
            need(&f.name, || format!("{param}.function.name"), "a string")?;
        }
        if let Some(StrOrMap::Map(c)) = &self.tool_choice {
            need(&c.kind, || "tool_choice.type".into(), "'function'")?;
            let f = c
                .function
                .as_ref()
                .ok_or_else(|| Violation::missing("tool_choice.function", "an object"))?;
            need(&f.name, || "tool_choice.function.name".into(), "a string")?;
        }
        if let Some(f) = &self.response_format {
            let kind = f
                .kind
                .ok_or_else(|| Violation::missing("response_format.type", "a string"))?;
            if kind == FormatKind::JsonSchema {
                need(&f.json_schema, || "response_format.json_schema".into(), "an object")?;
            }
        }
        Ok(read)
    }
}

impl Message {
    /// Message `param`'s rules; its role.
    fn check(&self, param: &str, needs: &mut Needs) -> Result<Role, Violation> {
        let role = self
            .role
            .ok_or_else(|| Violation::missing(format!("{param}.role"), "who speaks"))?;
        match &self.content {
            // An assistant's turn may carry only tool calls.
            None if role == Role::Assistant && self.tool_calls.is_some() => {}
            None => {
                return Err(Violation::missing(
                    format!("{param}.content"),
                    if role == Role::Assistant {
                        "an assistant message has content or tool_calls"
                    } else {
                        "every message but an assistant's has content"
                    },
                ));
            }
            Some(content) => {
                for (j, p) in content.iter().flat_map(StrOr::items).enumerate() {
                    p.check(&format!("{param}.content[{j}]"), needs)?;
                }
            }
        }
        for (k, c) in self.tool_calls.iter().flatten().enumerate() {
            let at = format!("{param}.tool_calls[{k}]");
            need(&c.kind, || format!("{at}.type"), "'function'")?;
            let f = c
                .function
                .as_ref()
                .ok_or_else(|| Violation::missing(format!("{at}.function"), "an object"))?;
            need(&f.name, || format!("{at}.function.name"), "a string")?;
            need(&f.arguments, || format!("{at}.function.arguments"), "a JSON string")?;
        }
        Ok(role)
    }
}

impl Part {
    /// Part `param`'s rules: its type's object and what it needs of the
    /// model (the first part needing each, for the 400 naming it).
    fn check(&self, param: &str, needs: &mut Needs) -> Result<(), Violation> {
        let kind = self
            .kind
            .ok_or_else(|| Violation::missing(format!("{param}.type"), "a string"))?;
        let media = |m: &Option<Media>, key: &str, inline: bool| -> Result<(), Violation> {
            let m = m
                .as_ref()
                .ok_or_else(|| Violation::missing(format!("{param}.{key}"), "an object"))?;
            let has = m.url.is_some() || (inline && m.data.is_some());
            let first = if inline { "data" } else { "url" };
            match has {
                true => Ok(()),
                false => Err(Violation::missing(
                    format!("{param}.{key}.{first}"),
                    "the media's data or URL",
                )),
            }
        };
        let first = |slot: &mut Option<String>| {
            slot.get_or_insert_with(|| param.to_string());
        };
        match kind {
            PartKind::Text => need(&self.text, || format!("{param}.text"), "a string"),
            PartKind::ImageUrl => {
                media(&self.image_url, "image_url", false)?;
                first(&mut needs.image);
                Ok(())
            }
            PartKind::InputAudio => {
                media(&self.input_audio, "input_audio", true)?;
                first(&mut needs.audio);
                Ok(())
            }
            PartKind::InputVideo => {
                media(&self.input_video, "input_video", true)?;
                first(&mut needs.video);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
#[path = "chat_request_tests.rs"]
mod tests;
