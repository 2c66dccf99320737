//! The plain types the law decides over that the layers above also name:
//! which engine runs and which the user asked for, and the RAM total a plan
//! sizes against. They live here, at the bottom, so the law imports nothing
//! above it; `status`, `config` and `sensors::ram` re-export them.

use serde::Serialize;

/// The engine family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// llama-server, no GPU layers.
    #[default]
    Cpu,
    /// llama-server on one NVIDIA GPU.
    Cuda,
    /// mlx_vlm.server.
    Mlx,
}

impl EngineKind {
    /// The lowercase name the status and the metrics' labels use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Mlx => "mlx",
        }
    }

    /// The spec's log tag (`[CPU_Engine] Memory brake: ...`).
    pub fn tag(self) -> &'static str {
        match self {
            Self::Cpu => "CPU_Engine",
            Self::Cuda => "CUDA_Engine",
            Self::Mlx => "MLX_Engine",
        }
    }
}

/// Which engine the user asked for; `Auto` lets selection decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EnginePreference {
    /// Platform and hardware decide (the spec's selection).
    #[default]
    Auto,
    /// llama-server without GPU layers.
    Cpu,
    /// llama-server offloading to one NVIDIA GPU.
    Cuda,
    /// mlx_vlm.server (Apple Silicon, or anywhere for tests).
    Mlx,
}

/// Where the RAM total came from, for `inspect` and the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RamSource {
    /// The machine's physical memory.
    Physical,
    /// cgroup v2 `memory.max` of our group.
    CgroupV2,
    /// cgroup v1 `memory.limit_in_bytes` of our group.
    CgroupV1,
    /// `WARDEN_RAM_OVERRIDE_GB`.
    Override,
}

impl RamSource {
    /// A phrase for people.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Physical => "physical memory",
            Self::CgroupV2 => "cgroup v2 memory.max",
            Self::CgroupV1 => "cgroup v1 memory.limit_in_bytes",
            Self::Override => "WARDEN_RAM_OVERRIDE_GB",
        }
    }
}

/// The RAM total and its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RamTotal {
    /// Bytes.
    pub bytes: u64,
    /// Where it came from.
    pub source: RamSource,
}

/// What a model serves: a chat model generates; an embedding model (its
/// GGUF header declares a pooling type) encodes; a generating model with no
/// chat template (its GGUF has none, its settings name none) serves raw
/// completions only: llama-server would render its chats with a template
/// it was never trained on (ChatML), and the answer is noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Chat and completions.
    #[default]
    Chat,
    /// Embeddings (and rerank where the model supports it).
    Embedding,
    /// Raw completions (and infill): a generating model without a chat
    /// template (`ModelKind::served`).
    Completion,
}

impl ModelKind {
    /// The kind of a model with these header facts: an embedding model
    /// declares a pooling; no facts, or none declared, is a chat model.
    pub fn of(facts: Option<&crate::gguf::ModelFacts>) -> Self {
        if facts.is_some_and(crate::gguf::ModelFacts::is_embedding) {
            Self::Embedding
        } else {
            Self::Chat
        }
    }

    /// The kind a model with these header facts serves as, its settings
    /// naming a chat template or not (`template_named`).
    pub fn served_of(facts: Option<&crate::gguf::ModelFacts>, template_named: bool) -> Self {
        Self::of(facts).served(facts.is_some_and(|f| !f.has_chat_template) && !template_named)
    }

    /// The kind a model of kind `self` serves as: a chat model without a
    /// chat template (`lacks_template`: its GGUF has none and its settings
    /// name none) serves completions only.
    pub fn served(self, lacks_template: bool) -> Self {
        match self {
            Self::Chat if lacks_template => Self::Completion,
            k => k,
        }
    }

    /// Why a model of this kind does not serve `route` (a path), and what
    /// to do instead: the rest of a sentence that starts with the model.
    pub fn refusal(self, route: &str) -> String {
        match self {
            Self::Chat => format!(
                "a chat model, which does not serve {route}; name an embedding model (GET /v1/models lists each model's kind)"
            ),
            Self::Embedding if route.ends_with("/rerank") => format!(
                "an embedding model without rank pooling, which does not serve {route}; name a reranker (GET /v1/models marks it \"rerank\": true)"
            ),
            Self::Embedding => format!(
                "an embedding model, which serves /v1/embeddings but not {route}; name a chat model for this route"
            ),
            Self::Completion => format!(
                "a model without a chat template (its GGUF has none: a base model, or one converted without it), which serves /v1/completions but not {route}; for chat, name a template in its settings: chat_template = \"chatml\" (or another of llama.cpp's built-in names), or chat_template_file"
            ),
        }
    }

    /// The catalog's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Embedding => "embedding",
            Self::Completion => "completion",
        }
    }
}
