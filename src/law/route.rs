//! The routes a turn can take to the child, and which engine serves which.
//! llama-server answers all five; mlx_vlm.server has only chat (its
//! `count_tokens` is Anthropic's shape, and it has no raw completion or
//! fill-in-the-middle), so the other routes are refused on the MLX engine
//! before they reach the queue (501 `unsupported_route`), never relayed to a
//! 404 of the child's.
//!
//! Tokenize and detokenize are not generations: llama-server answers them
//! on its HTTP thread from the vocabulary, without the task loop (read in
//! `server-context.cpp` of b10883), so while the model they name is loaded
//! the warden sends them straight to the child beside a running turn; only
//! a model that must be loaded first sends them through the queue. They
//! take no brake sample and set no keep-alive. Pure.

use super::types::EngineKind;

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
}

impl Route {
    /// Every route (metrics list them all, zeros included).
    pub const ALL: [Route; 5] = [
        Self::Chat,
        Self::Completions,
        Self::Infill,
        Self::Tokenize,
        Self::Detokenize,
    ];

    /// The child's path (llama-server's, the same as the warden's).
    pub fn path(self) -> &'static str {
        match self {
            Self::Chat => "/v1/chat/completions",
            Self::Completions => "/v1/completions",
            Self::Infill => "/infill",
            Self::Tokenize => "/tokenize",
            Self::Detokenize => "/detokenize",
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
        }
    }

    /// Whether it runs the model (brake samples, keep-alive, timings).
    pub fn generates(self) -> bool {
        matches!(self, Self::Chat | Self::Completions | Self::Infill)
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
        // (route, generates, on cpu, on cuda, on mlx)
        let rows = [
            // why: chat runs everywhere
            (Route::Chat, true, true, true, true),
            // why: mlx_vlm.server has no raw completion, infill or tokenizer routes
            (Route::Completions, true, true, true, false),
            (Route::Infill, true, true, true, false),
            // why: the tokenizer routes never run the model
            (Route::Tokenize, false, true, true, false),
            (Route::Detokenize, false, true, true, false),
        ];
        for (r, gen_, cpu, cuda, mlx) in rows {
            assert_eq!(
                (
                    r.generates(),
                    r.served_by(EngineKind::Cpu),
                    r.served_by(EngineKind::Cuda),
                    r.served_by(EngineKind::Mlx)
                ),
                (gen_, cpu, cuda, mlx),
                "{r:?}"
            );
            assert!(r.path().ends_with(r.tag()) || r == Route::Chat, "{r:?}");
        }
    }
}
