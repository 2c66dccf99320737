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

use super::types::{EngineKind, ModelKind};

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
    /// `POST /v1/embeddings`: OpenAI's embeddings, from an embedding model.
    Embeddings,
    /// `POST /v1/rerank`: documents ranked against a query, from a reranker
    /// (an embedding model whose pooling is `rank`).
    Rerank,
}

impl Route {
    /// Every route (metrics list them all, zeros included).
    pub const ALL: [Route; 13] = [
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
        Self::Embeddings,
        Self::Rerank,
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
            Self::Embeddings => "/v1/embeddings",
            Self::Rerank => "/v1/rerank",
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
            Self::Embeddings => "embeddings",
            Self::Rerank => "rerank",
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
    /// reads the vocabulary or the template, never the task loop). The
    /// embeddings and the rerank run the model in the task loop: they are
    /// turns, though they generate nothing.
    pub fn beside_turns(self) -> bool {
        !self.generates() && !self.encodes()
    }

    /// Whether it runs an embedding model (the task loop, no generation,
    /// no brake sample, no conversation, no stream).
    pub fn encodes(self) -> bool {
        matches!(self, Self::Embeddings | Self::Rerank)
    }

    /// Whether a model of `kind` serves it (`reranks`: an embedding model
    /// whose pooling is `rank`): an embedding model serves the embeddings,
    /// a reranker the rerank, both their tokenizer; a chat model everything
    /// else. A request the other kind would get is the client's mistake,
    /// refused with a 400 before any load.
    pub fn serves(self, kind: ModelKind, reranks: bool) -> bool {
        match self {
            Self::Tokenize | Self::Detokenize => true,
            Self::Embeddings => kind == ModelKind::Embedding,
            Self::Rerank => kind == ModelKind::Embedding && reranks,
            Self::Completions | Self::Infill => matches!(kind, ModelKind::Chat | ModelKind::Completion),
            _ => kind == ModelKind::Chat,
        }
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

    /// Every engine (a new one is tested once it is listed here).
    const ENGINES: [EngineKind; 3] = [EngineKind::Cpu, EngineKind::Cuda, EngineKind::Mlx];

    /// `Route::ALL` holds every route once, and each has a path and a tag of
    /// its own: metrics label by the tag, requests come by the path, and
    /// every word of the tag is found in the path.
    #[test]
    fn every_route_is_listed_once_under_its_own_path_and_tag() {
        // why: a route left out of ALL has no metrics series (adding a
        // variant fails to compile here until it is listed)
        let listed = |r: Route| match r {
            Route::Chat
            | Route::Completions
            | Route::Infill
            | Route::Tokenize
            | Route::Detokenize
            | Route::Messages
            | Route::MessagesCountTokens
            | Route::Responses
            | Route::ResponsesInputTokens
            | Route::ChatInputTokens
            | Route::ApplyTemplate
            | Route::Embeddings
            | Route::Rerank => Route::ALL.contains(&r),
        };
        for r in Route::ALL {
            assert!(listed(r), "{r:?}");
            assert_eq!(Route::ALL.iter().filter(|o| **o == r).count(), 1, "{r:?} listed twice");
            assert_eq!(
                Route::ALL.iter().filter(|o| o.path() == r.path()).count(),
                1,
                "{r:?}'s path"
            );
            assert_eq!(
                Route::ALL.iter().filter(|o| o.tag() == r.tag()).count(),
                1,
                "{r:?}'s tag"
            );
            assert!(r.path().starts_with('/'), "{r:?}");
            for word in r.tag().split('_') {
                assert!(r.path().contains(word), "{r:?}: {word} of its tag");
            }
        }
    }

    /// What a route does follows from whether it generates or encodes: one
    /// that does neither (tokenizer, counters, template) goes beside a
    /// running turn; only
    /// a generation keeps a conversation; a route under another route's
    /// path counts for it (never generates, and the one above it does).
    #[test]
    fn what_a_route_does_follows_from_whether_it_generates() {
        assert!(Route::default().generates() && Route::default().keeps_conversation());
        for r in Route::ALL {
            assert_eq!(r.beside_turns(), !r.generates() && !r.encodes(), "{r:?}");
            assert!(!(r.generates() && r.encodes()), "{r:?}");
            assert!(!r.keeps_conversation() || r.generates(), "{r:?}");
            for above in Route::ALL.iter().filter(|a| **a != r) {
                if r.path().starts_with(&format!("{}/", above.path())) {
                    assert!(!r.generates() && above.generates(), "{r:?} under {above:?}");
                }
            }
        }
        // why: Anthropic's conversion to chat keeps only its own max_tokens
        // (b10883), so only Messages carries the bound there; every other
        // route in n_predict, which llama-server reads first
        for r in Route::ALL {
            assert_eq!(r.bound_field() == "max_tokens", r == Route::Messages, "{r:?}");
            assert!(matches!(r.bound_field(), "max_tokens" | "n_predict"), "{r:?}");
        }
    }

    /// A request that names no route runs on every engine; llama-server's
    /// engines serve every route; whatever another engine serves,
    /// llama-server serves too (a refusal is the engine's lack, never the
    /// route's: tests/real/real_mlx.rs shows MLX's 501 for the rest).
    #[test]
    fn the_default_route_runs_everywhere_and_llama_server_serves_all() {
        for r in Route::ALL {
            let on_llama = [EngineKind::Cpu, EngineKind::Cuda].map(|l| r.served_by(l));
            assert_eq!(on_llama, [true, true], "{r:?}: llama-server answers every route");
        }
        for e in ENGINES {
            assert!(Route::default().served_by(e), "{e:?}");
            for r in Route::ALL {
                assert!(!r.served_by(e) || r.served_by(EngineKind::Cpu), "{r:?} on {e:?}");
            }
        }
    }

    /// Each dialect's stream ends at its own last event, and nothing else
    /// (an infill text that holds `"stop":true` inside a string does not).
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

    /// Which kind of model serves which route: a request the other kind
    /// would get is refused before any load.
    #[rustfmt::skip]
    #[test]
    fn each_kind_of_model_serves_its_own_routes() {
        use ModelKind::{Chat, Completion, Embedding};
        let rows = [
            // why: a chat model generates, in every dialect
            (Route::Chat, Chat, false, true),
            (Route::Messages, Chat, false, true),
            (Route::Completions, Chat, false, true),
            // why: an embedding model has no chat template and no sampler
            (Route::Chat, Embedding, false, false),
            (Route::Responses, Embedding, true, false),
            (Route::ApplyTemplate, Embedding, false, false),
            // why: embeddings come from an embedding model only
            (Route::Embeddings, Embedding, false, true),
            (Route::Embeddings, Chat, false, false),
            // why: a rerank needs rank pooling; a reranker still embeds
            (Route::Rerank, Embedding, true, true),
            (Route::Rerank, Embedding, false, false),
            (Route::Rerank, Chat, false, false),
            (Route::Embeddings, Embedding, true, true),
            // why: every model has a vocabulary
            (Route::Tokenize, Embedding, false, true),
            (Route::Detokenize, Chat, false, true),
            (Route::Tokenize, Completion, false, true),
            // why: a model without a chat template completes raw text only
            (Route::Completions, Completion, false, true),
            (Route::Infill, Completion, false, true),
            (Route::Chat, Completion, false, false),
            (Route::Messages, Completion, false, false),
            (Route::Responses, Completion, false, false),
            (Route::ChatInputTokens, Completion, false, false),
            (Route::ApplyTemplate, Completion, false, false),
            (Route::Embeddings, Completion, false, false),
        ];
        for (i, (r, kind, reranks, want)) in rows.into_iter().enumerate() {
            assert_eq!(r.serves(kind, reranks), want, "row {i}: {r:?} on {kind:?}");
        }
        // why: encoding runs the task loop: never beside a turn, never a generation
        for r in [Route::Embeddings, Route::Rerank] {
            assert!(r.encodes() && !r.generates() && !r.beside_turns(), "{r:?}");
        }
    }
}
