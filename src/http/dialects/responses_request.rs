//! A Responses body as the warden reads it: serde types read once
//! (`http::typed::decode`), then the rules the types cannot say (which
//! item a role and a type make, which part types each role sends, which
//! fields each requires), each with its reason. What the child reads and
//! the warden does not is checked for its JSON shape only.
//!
//! Why: llama-server b10883's converter
//! (`server_chat_convert_responses_to_chatcmpl`) classifies an item by its
//! role and type and throws (a 500) on one it cannot, and the chat parser
//! after it throws on a wrong type.

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::http::typed::{Array, Count, Object, StrOr, Text, need};
use crate::law::request::Violation;

/// The fields of a Responses body the warden reads, decoded once for the
/// turn and its counter. The counter reads the generating fields' shapes
/// too (`max_output_tokens`, `reasoning`): a client counts the body it is
/// about to send (OpenAI's own counter takes the whole create body), and a
/// shape the turn would refuse is better said at the count.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // `instructions`, `reasoning`: read for their shape, the child reads them
pub(super) struct Body<'a> {
    previous_response_id: Option<IgnoredAny>,
    instructions: Option<Text>,
    input: Option<StrOr<Item>>,
    #[serde(borrow)]
    tools: Option<Vec<Tool<'a>>>,
    text: Option<TextField>,
    max_output_tokens: Option<Count>,
    reasoning: Option<Object>,
}

#[derive(Debug, Deserialize)]
struct Item {
    role: Option<Role>,
    #[serde(rename = "type")]
    kind: Option<ItemKind>,
    content: Option<StrOr<Part>>,
    call_id: Option<Text>,
    name: Option<Text>,
    arguments: Option<Text>,
    output: Option<StrOr<OutputPart>>,
    summary: Option<Array>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    User,
    System,
    Developer,
    Assistant,
}

/// The item types the converter classifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ItemKind {
    Message,
    FunctionCall,
    FunctionCallOutput,
    Reasoning,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)] // `refusal`, `image_url`: read for their shape
struct Part {
    #[serde(rename = "type")]
    kind: Option<PartKind>,
    text: Option<Text>,
    refusal: Option<Text>,
    image_url: Option<Text>,
}

/// The part types the converter reads (`input_file` it cannot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PartKind {
    InputText,
    OutputText,
    Refusal,
    InputImage,
    InputFile,
    ReasoningText,
}

/// A function's output part: text only (the converter reads no other).
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct OutputPart {
    #[serde(rename = "type")]
    kind: OutputKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OutputKind {
    InputText,
}

/// A tool: a function has a name; hosted tools (web search, file search)
/// are the child's to skip, with a warning (no local model runs them, and
/// refusing would fail every request of a client that always lists them).
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: Option<&'a str>,
    name: Option<Text>,
    parameters: Option<Object>,
}

#[derive(Debug, Deserialize)]
struct TextField {
    format: Option<Format>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Format {
    #[serde(rename = "type")]
    kind: Option<FormatKind>,
    schema: Option<Object>,
}

/// Structured output's formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum FormatKind {
    Text,
    JsonObject,
    JsonSchema,
}

/// What the warden takes from a Responses body beside the body itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Read {
    /// The conversation carries an earlier answer.
    pub has_answer: bool,
    /// The first image part's path, if any.
    pub image: Option<String>,
    /// The assistant items without `"type": "message"` (the SDKs' short
    /// form of a history entry), by index: llama-server cannot classify
    /// them without it.
    pub untyped_answers: Vec<usize>,
    /// `text.format`'s type, when one is asked for.
    pub format: Option<FormatKind>,
    /// `max_output_tokens`, when given.
    pub max_output_tokens: Option<u32>,
}

impl Body<'_> {
    /// The rules the types cannot say, over the decoded body.
    pub(super) fn check(&self) -> Result<Read, Violation> {
        if self.previous_response_id.is_some() {
            return Err(Violation::new(
                "unsupported_value",
                "'previous_response_id' is not supported: this server stores no responses; send the whole conversation in 'input'",
                "previous_response_id",
            ));
        }
        let input = self.input.as_ref().ok_or_else(|| Violation::required("input"))?;
        let mut read = Read {
            has_answer: false,
            image: None,
            untyped_answers: Vec::new(),
            format: None,
            max_output_tokens: self.max_output_tokens.map(|Count(m)| m),
        };
        if let StrOr::Items(items) = input {
            if items.is_empty() {
                return Err(Violation::new("empty_input", "'input' must not be empty", "input"));
            }
            for (i, item) in items.iter().enumerate() {
                item.check(i, &mut read)?;
            }
        }
        for (i, t) in self.tools.iter().flatten().enumerate() {
            if t.kind == Some("function") {
                need(&t.name, || format!("tools[{i}].name"))?;
            }
        }
        if let Some(format) = self.text.as_ref().and_then(|t| t.format.as_ref()) {
            let kind = format.kind.ok_or_else(|| Violation::required("text.format.type"))?;
            // A schema is what json_schema constrains the answer to.
            if kind == FormatKind::JsonSchema && format.schema.is_none() {
                return Err(Violation::ty("text.format.schema", "an object"));
            }
            read.format = Some(kind);
        }
        Ok(read)
    }
}

impl Item {
    /// Item `i` by what its role and type make of it (the converter's
    /// classification), its fields by that.
    fn check(&self, i: usize, read: &mut Read) -> Result<(), Violation> {
        let param = format!("input[{i}]");
        let at = |k: &str| format!("{param}.{k}");
        match (self.role, self.kind) {
            (Some(Role::User | Role::System | Role::Developer), _) => {
                let image = self.parts(&param, false)?;
                read.image = read.image.take().or(image);
            }
            (Some(Role::Assistant), None | Some(ItemKind::Message)) => {
                if self.kind.is_none() {
                    read.untyped_answers.push(i);
                }
                read.has_answer = true;
                self.parts(&param, true)?;
            }
            (None, Some(ItemKind::FunctionCall)) => {
                need(&self.call_id, || at("call_id"))?;
                need(&self.name, || at("name"))?;
                need(&self.arguments, || at("arguments"))?;
                read.has_answer = true;
            }
            (None, Some(ItemKind::FunctionCallOutput)) => {
                need(&self.call_id, || at("call_id"))?;
                if self.output.is_none() {
                    return Err(Violation::ty(at("output"), "a string or an array of input_text parts"));
                }
            }
            (None, Some(ItemKind::Reasoning)) => {
                let text = self
                    .content
                    .as_ref()
                    .and_then(|c| c.items().first())
                    .and_then(|p| p.text);
                if self.summary.is_none() || text.is_none() {
                    return Err(Violation::new(
                        "invalid_type",
                        format!("'{param}' (reasoning) needs 'summary' and 'content' with a text part"),
                        param,
                    ));
                }
            }
            _ => {
                return Err(Violation::value(
                    param,
                    "a message (role user, system, developer or assistant), function_call, function_call_output or reasoning item",
                ));
            }
        }
        Ok(())
    }

    /// A message item's content: a string or parts of the types its role
    /// may send (`answer`: the assistant's); the first image's path.
    fn parts(&self, param: &str, answer: bool) -> Result<Option<String>, Violation> {
        let param = format!("{param}.content");
        let parts = match &self.content {
            Some(StrOr::Str) => return Ok(None),
            None if answer => return Ok(None),
            Some(StrOr::Items(p)) => p,
            None => return Err(Violation::required(param)),
        };
        let mut image = None;
        for (j, p) in parts.iter().enumerate() {
            let at = |k: &str| format!("{param}[{j}].{k}");
            let kind = p.kind.ok_or_else(|| Violation::required(at("type")))?;
            match (answer, kind) {
                (_, PartKind::InputText) | (true, PartKind::OutputText) => need(&p.text, || at("text"))?,
                (true, PartKind::Refusal) => need(&p.refusal, || at("refusal"))?,
                (false, PartKind::InputImage) => {
                    need(&p.image_url, || at("image_url"))?;
                    image = image.or_else(|| Some(format!("{param}[{j}]")));
                }
                (false, PartKind::InputFile) => {
                    return Err(Violation::new(
                        "unsupported_value",
                        "'input_file' parts are not supported by this server",
                        at("type"),
                    ));
                }
                _ => {
                    let allowed = if answer {
                        "output_text or refusal"
                    } else {
                        "input_text or input_image"
                    };
                    return Err(Violation::value(at("type"), allowed));
                }
            }
        }
        Ok(image)
    }
}
