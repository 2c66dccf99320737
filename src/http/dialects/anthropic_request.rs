//! A Messages body as the warden reads it: serde types read once
//! (`http::typed::decode`), then the rules the types cannot say (which
//! fields each block type requires, a non-empty conversation), each a row
//! with its reason. What the child reads and the warden does not (the
//! texts, a tool's schema, an image's bytes) is checked for its JSON shape
//! only and stays in the body untouched.
//!
//! Why each shape is checked: llama-server b10883's converter
//! (`server_chat_convert_anthropic_to_oai`) throws (a 500) on a wrong type
//! and drops, without a word, a block type it does not read (`document`,
//! `search_result`, ...): those are refused (`unsupported_value` on the
//! `type`) rather than answered as if the model had read them.
//! `redacted_thinking` it drops, which is right (no local model can read
//! it).

use serde::Deserialize;

use crate::http::typed::{Count, Object, StrOr, Text, need};
use crate::law::request::Violation;

/// The fields of a Messages body the warden reads, decoded once for both
/// routes. The token counter reads the generating fields' shapes too
/// (`stop_sequences`, `thinking`, `metadata`): a client counts the body it
/// is about to send, and a shape the turn would refuse is better said at
/// the count than after it (Anthropic's own counter refuses fields it does
/// not take at all, which is stricter still).
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // the generating fields: read for their shape, the child reads their values
pub(super) struct Body {
    system: Option<StrOr<SystemBlock>>,
    messages: Option<Vec<Message>>,
    tools: Option<Vec<Tool>>,
    tool_choice: Option<ToolChoice>,
    stop_sequences: Option<Vec<Text>>,
    thinking: Option<Thinking>,
    metadata: Option<Object>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Thinking {
    budget_tokens: Option<Count>,
}

#[derive(Debug, Deserialize)]
struct SystemBlock {
    /// Text blocks only: a system prompt has no images or tool calls.
    #[serde(rename = "type")]
    kind: Option<SystemKind>,
    text: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum SystemKind {
    Text,
}

#[derive(Debug, Deserialize)]
struct Message {
    /// Anthropic's roles are these two; a system prompt is its own field.
    role: Option<Role>,
    content: Option<StrOr<Block>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    User,
    Assistant,
}

/// One content block: its type, and every field some type reads (a field
/// present is checked for its shape whatever the type).
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // `input`, `thinking`: read for their shape, the child reads them
struct Block {
    #[serde(rename = "type")]
    kind: Option<BlockKind>,
    text: Option<Text>,
    source: Option<Source>,
    id: Option<Text>,
    name: Option<Text>,
    input: Option<Object>,
    tool_use_id: Option<Text>,
    content: Option<StrOr<Block>>,
    thinking: Option<Text>,
}

/// The block types llama-server b10883 reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum BlockKind {
    Text,
    Image,
    ToolUse,
    ToolResult,
    Thinking,
    RedactedThinking,
}

#[derive(Debug, Deserialize)]
struct Source {
    /// An image inline or by address; `file` (Anthropic's Files API) names
    /// nothing this server holds.
    #[serde(rename = "type")]
    kind: Option<SourceKind>,
    data: Option<Text>,
    url: Option<Text>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum SourceKind {
    Base64,
    Url,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Tool {
    name: Option<Text>,
    input_schema: Option<Object>,
}

#[derive(Debug, Deserialize)]
struct ToolChoice {
    #[serde(rename = "type")]
    kind: Option<Text>,
}

/// What the warden takes from a Messages body beside the body itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Read {
    /// The conversation carries an earlier answer.
    pub has_answer: bool,
    /// The first image block's path (a tool result's included), if any.
    pub image: Option<String>,
}

impl Body {
    /// The rules the types cannot say, over the decoded body.
    pub(super) fn check(&self) -> Result<Read, Violation> {
        for (i, b) in self.system.iter().flat_map(StrOr::items).enumerate() {
            need(&b.kind, || format!("system[{i}].type"))?;
            need(&b.text, || format!("system[{i}].text"))?;
        }
        let messages = self
            .messages
            .as_deref()
            .ok_or_else(|| Violation::required("messages"))?;
        if messages.is_empty() {
            return Err(Violation::new(
                "empty_messages",
                "'messages' must not be empty",
                "messages",
            ));
        }
        let mut read = Read {
            has_answer: false,
            image: None,
        };
        for (i, m) in messages.iter().enumerate() {
            let role = m
                .role
                .ok_or_else(|| Violation::required(format!("messages[{i}].role")))?;
            read.has_answer |= role == Role::Assistant;
            let param = format!("messages[{i}].content");
            let content = m.content.as_ref().ok_or_else(|| Violation::required(&param))?;
            for (j, b) in content.items().iter().enumerate() {
                let image = b.check(&format!("{param}[{j}]"))?;
                read.image = read.image.or(image);
            }
        }
        for (i, t) in self.tools.iter().flatten().enumerate() {
            need(&t.name, || format!("tools[{i}].name"))?;
        }
        if let Some(c) = &self.tool_choice {
            need(&c.kind, || "tool_choice.type".into())?;
        }
        Ok(read)
    }
}

impl Block {
    /// The fields its type requires (the table), at `param`; the path of
    /// the first image it is or holds.
    fn check(&self, param: &str) -> Result<Option<String>, Violation> {
        let at = |k: &str| format!("{param}.{k}");
        let kind = self.kind.ok_or_else(|| Violation::required(at("type")))?;
        match kind {
            BlockKind::Text => need(&self.text, || at("text")).map(|_| None),
            BlockKind::Image => {
                let source = self.source.as_ref().ok_or_else(|| Violation::required(at("source")))?;
                match source.kind {
                    Some(SourceKind::Base64) => need(&source.data, || at("source.data"))?,
                    Some(SourceKind::Url) => need(&source.url, || at("source.url"))?,
                    None => return Err(Violation::required(at("source.type"))),
                }
                Ok(Some(param.to_string()))
            }
            BlockKind::ToolUse => {
                need(&self.id, || at("id"))?;
                need(&self.name, || at("name")).map(|_| None)
            }
            // A tool's result may hold blocks, images among them.
            BlockKind::ToolResult => {
                need(&self.tool_use_id, || at("tool_use_id"))?;
                let mut image = None;
                for (k, b) in self.content.iter().flat_map(StrOr::items).enumerate() {
                    let inner = b.check(&format!("{param}.content[{k}]"))?;
                    image = image.or(inner);
                }
                Ok(image)
            }
            BlockKind::Thinking | BlockKind::RedactedThinking => Ok(None),
        }
    }
}
