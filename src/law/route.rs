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

use crate::status::EngineKind;

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

    /// Every engine (a new one is tested once it is listed here).
    const ENGINES: [EngineKind; 3] = [EngineKind::Cpu, EngineKind::Cuda, EngineKind::Mlx];

    /// `Route::ALL` holds every route once, and each has a path and a tag of
    /// its own that names it: metrics label by the tag, requests come by the path.
    #[test]
    fn every_route_is_listed_once_under_its_own_path_and_tag() {
        // why: a route left out of ALL has no metrics series (adding a
        // variant fails to compile here until it is listed)
        let listed = |r: Route| match r {
            Route::Chat | Route::Completions | Route::Infill | Route::Tokenize | Route::Detokenize => {
                Route::ALL.contains(&r)
            }
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
            // why: the tag a metric or an event shows is found in the path
            assert!(r.path().starts_with('/') && r.path().contains(r.tag()), "{r:?}");
        }
    }

    /// Only the tokenizer's routes skip the model: every other route runs a
    /// generation (a brake sample, a keep-alive, timings).
    #[test]
    fn only_the_tokenizer_routes_do_not_generate() {
        for r in Route::ALL {
            assert_eq!(r.generates(), !r.tag().ends_with("tokenize"), "{r:?}");
        }
    }

    /// A request that names no route runs on every engine; llama-server's
    /// engines serve every route; whatever another engine serves,
    /// llama-server serves too (a refusal is the engine's lack, never the route's).
    #[test]
    fn the_default_route_runs_everywhere_and_llama_server_serves_all() {
        assert!(Route::default().generates());
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
}
