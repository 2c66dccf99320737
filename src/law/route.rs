//! The routes a turn can take to the child, and which engine serves which.
//! llama-server b10883 answers all of them; mlx_vlm.server has only chat
//! (its `count_tokens` is Anthropic's shape, and it has no raw completion,
//! fill-in-the-middle, Messages or Responses route), so the other routes are
//! refused on the MLX engine before they reach the queue (501
//! `unsupported_route`), never relayed to a 404 of the child's.
//!
//! The routes that do not generate (the tokenizer, the token counters and
//! `/apply-template`) are answered by llama-server on its HTTP thread from
//! the vocabulary and the chat template, without the task loop (read in
//! `server-context.cpp` of b10883: `handle_count_tokens` and
//! `post_apply_template` parse and tokenize, and post no task), so while
//! the model they name is loaded the warden sends them straight to the
//! child beside a running turn; only a model that must be loaded first
//! sends them through the queue. They take no brake sample and set no
//! keep-alive.
//!
//! How a stream ends differs by dialect: OpenAI's chat and completions end
//! with `data: [DONE]`; Anthropic's Messages with the `message_stop` event,
//! Responses with `response.completed`, and llama.cpp's own infill with its
//! `"stop":true` event, after which llama-server closes the stream without
//! a `[DONE]` (read in `server-context.cpp` of b10883, and measured). Pure.

use super::types::EngineKind;

/// The key of the last event of an infill stream (llama.cpp's JSON has no
/// spaces; inside a string the quotes would be escaped).
const STOP_TRUE: &[u8] = b"\"stop\":true";

/// A route relayed to the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// `POST /v1/chat/completions`.
    #[default]
    Chat,
    /// `POST /v1/completions`: a raw prompt.
    Completions,
    /// `POST /infill`: fill in the middle (llama.cpp's editor plugins).
    Infill,
    /// `POST /tokenize`.
    Tokenize,
    /// `POST /detokenize`.
    Detokenize,
    /// `POST /v1/messages`: Anthropic's Messages API.
    Messages,
    /// `POST /v1/messages/count_tokens`: Anthropic's token counter.
    MessagesCountTokens,
    /// `POST /v1/responses`: OpenAI's Responses API.
    Responses,
    /// `POST /v1/responses/input_tokens`: a Responses body's prompt tokens.
    ResponsesInputTokens,
    /// `POST /v1/chat/completions/input_tokens`: a chat body's prompt tokens.
    ChatInputTokens,
    /// `POST /apply-template`: a chat body through the model's template.
    ApplyTemplate,
}

impl Route {
    /// Every route (metrics list them all, zeros included).
    pub const ALL: [Route; 11] = [
        Self::Chat,
        Self::Completions,
        Self::Infill,
        Self::Tokenize,
        Self::Detokenize,
        Self::Messages,
        Self::MessagesCountTokens,
        Self::Responses,
        Self::ResponsesInputTokens,
        Self::ChatInputTokens,
        Self::ApplyTemplate,
    ];

    /// The child's path (llama-server's, the same as the warden's).
    pub fn path(self) -> &'static str {
        match self {
            Self::Chat => "/v1/chat/completions",
            Self::Completions => "/v1/completions",
            Self::Infill => "/infill",
            Self::Tokenize => "/tokenize",
            Self::Detokenize => "/detokenize",
            Self::Messages => "/v1/messages",
            Self::MessagesCountTokens => "/v1/messages/count_tokens",
            Self::Responses => "/v1/responses",
            Self::ResponsesInputTokens => "/v1/responses/input_tokens",
            Self::ChatInputTokens => "/v1/chat/completions/input_tokens",
            Self::ApplyTemplate => "/apply-template",
        }
    }

    /// The label in metrics and events.
    pub fn tag(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Completions => "completions",
            Self::Infill => "infill",
            Self::Tokenize => "tokenize",
            Self::Detokenize => "detokenize",
            Self::Messages => "messages",
            Self::MessagesCountTokens => "messages_count_tokens",
            Self::Responses => "responses",
            Self::ResponsesInputTokens => "responses_input_tokens",
            Self::ChatInputTokens => "chat_input_tokens",
            Self::ApplyTemplate => "apply_template",
        }
    }

    /// Whether it runs the model (brake samples, keep-alive, timings).
    pub fn generates(self) -> bool {
        matches!(
            self,
            Self::Chat | Self::Completions | Self::Infill | Self::Messages | Self::Responses
        )
    }

    /// Whether it goes straight to a live child beside a running turn (it
    /// reads the vocabulary or the template, never the task loop).
    pub fn beside_turns(self) -> bool {
        !self.generates()
    }

    /// Whether its turns belong to a conversation whose KV cache is kept
    /// (a chat in any dialect; a raw completion or infill has none).
    pub fn keeps_conversation(self) -> bool {
        matches!(self, Self::Chat | Self::Messages | Self::Responses)
    }

    /// The field a generation's token bound goes in: `n_predict`, which
    /// llama-server reads first, except on Messages, whose conversion to
    /// chat (b10883's `server_chat_convert_anthropic_to_oai`) keeps only
    /// Anthropic's own `max_tokens` and drops every other field.
    pub fn bound_field(self) -> &'static str {
        match self {
            Self::Messages => "max_tokens",
            _ => "n_predict",
        }
    }

    /// Whether a streamed event (its `event` field and its data) is the
    /// stream's last, which the relay holds back until the turn's end.
    pub fn ends_stream(self, event: Option<&str>, data: &[u8]) -> bool {
        match self {
            Self::Messages => event == Some("message_stop"),
            Self::Responses => event == Some("response.completed"),
            // llama.cpp's own infill stream ends with its `"stop":true`
            // event (its partial events say `"stop":false`), no [DONE].
            Self::Infill => data.windows(STOP_TRUE.len()).any(|w| w == STOP_TRUE),
            _ => data == b"[DONE]",
        }
    }

    /// Whether `engine`'s child serves it.
    pub fn served_by(self, engine: EngineKind) -> bool {
        match engine {
            EngineKind::Cpu | EngineKind::Cuda => true,
            EngineKind::Mlx => self == Self::Chat,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_engines() {
        // (route, generates, keeps a conversation, on cpu, on cuda, on mlx)
        let rows = [
            // why: chat runs everywhere
            (Route::Chat, true, true, true, true, true),
            // why: mlx_vlm.server has no raw completion, infill or tokenizer routes
            (Route::Completions, true, false, true, true, false),
            (Route::Infill, true, false, true, true, false),
            // why: the tokenizer routes never run the model
            (Route::Tokenize, false, false, true, true, false),
            (Route::Detokenize, false, false, true, true, false),
            // why: Messages and Responses are chats in another dialect: their KV is kept
            (Route::Messages, true, true, true, true, false),
            (Route::Responses, true, true, true, true, false),
            // why: the counters and the template tokenize only, beside a turn
            (Route::MessagesCountTokens, false, false, true, true, false),
            (Route::ResponsesInputTokens, false, false, true, true, false),
            (Route::ChatInputTokens, false, false, true, true, false),
            (Route::ApplyTemplate, false, false, true, true, false),
        ];
        assert_eq!(rows.len(), Route::ALL.len(), "every route has a row");
        for (r, gen_, conv, cpu, cuda, mlx) in rows {
            assert_eq!(
                (
                    r.generates(),
                    r.keeps_conversation(),
                    r.served_by(EngineKind::Cpu),
                    r.served_by(EngineKind::Cuda),
                    r.served_by(EngineKind::Mlx)
                ),
                (gen_, conv, cpu, cuda, mlx),
                "{r:?}"
            );
            assert_eq!(r.beside_turns(), !gen_, "{r:?}");
            // why: only Anthropic's conversion drops n_predict
            let field = if r == Route::Messages {
                "max_tokens"
            } else {
                "n_predict"
            };
            assert_eq!(r.bound_field(), field, "{r:?}");
        }
        let mut tags: Vec<_> = Route::ALL.iter().map(|r| r.tag()).collect();
        tags.sort();
        tags.dedup();
        assert_eq!(tags.len(), Route::ALL.len(), "tags are unique");
    }

    #[test]
    fn each_dialect_ends_its_stream_its_own_way() {
        // (route, event, data, ends)
        let rows: [(Route, Option<&str>, &[u8], bool); 10] = [
            // why: OpenAI's streams end with [DONE]
            (Route::Chat, None, b"[DONE]", true),
            (Route::Completions, None, b"[DONE]", true),
            (Route::Chat, None, b"{\"choices\":[]}", false),
            // why: Anthropic's ends with message_stop, never [DONE]
            (
                Route::Messages,
                Some("message_stop"),
                b"{\"type\":\"message_stop\"}",
                true,
            ),
            (Route::Messages, Some("message_delta"), b"{}", false),
            // why: Responses ends with response.completed
            (Route::Responses, Some("response.completed"), b"{}", true),
            (Route::Responses, Some("response.output_text.delta"), b"{}", false),
            // why: infill's last event says stop; its others, and the text "stop":true inside a string, do not
            (
                Route::Infill,
                None,
                b"{\"content\":\"\",\"stop\":true,\"stop_type\":\"limit\"}",
                true,
            ),
            (Route::Infill, None, b"{\"content\":\"x\",\"stop\":false}", false),
            (
                Route::Infill,
                None,
                b"{\"content\":\"\\\"stop\\\":true\",\"stop\":false}",
                false,
            ),
        ];
        for (i, (r, ev, data, ends)) in rows.into_iter().enumerate() {
            assert_eq!(r.ends_stream(ev, data), ends, "row {i}");
        }
    }
}
