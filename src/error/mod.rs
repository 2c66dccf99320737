//! The warden's errors: one `thiserror` enum per boundary (the spec's three
//! exceptions: `EngineError` for lifecycle, `ModelLoadError`, and
//! `GenerationError`), and `ApiError`, the one wire shape every one of them
//! becomes at the HTTP boundary: OpenAI's error object plus `raw` (the child's
//! classified output tail) where a child was involved.
//!
//! No message here ever contains the per-spawn API key: the key is not
//! `Display`, child output is redacted as it is captured, and transport
//! errors are named by kind, not by their request.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

// The types the errors carry, nameable where an embedder meets them.
pub use crate::gguf::{GgufError, ModelFacts, Pooling};
pub use crate::law::crash::{EngineCode, ExitInfo, ExitKind};
pub use crate::law::request::Violation;

/// The OpenAI-shaped error every failure becomes on the wire.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiError {
    /// The HTTP status the response carries (not serialized in the body).
    #[serde(skip)]
    pub status: u16,
    /// A sentence a person can act on.
    pub message: String,
    /// OpenAI's `type` (`invalid_request_error`, `server_error`, ...).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The stable machine code (`model_not_found`, `model_corrupt`, ...).
    /// A `String`, not an enum, on purpose: the warden's own codes come
    /// from its domain enums (`EngineCode::as_str`, each error's `code()`),
    /// but a child's own error passes its type through as the code
    /// (`upstream_error`: `upstream_503`, or whatever llama-server or
    /// mlx_vlm.server named it), which no enum of ours can list ahead.
    pub code: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// The child's output tail, when a child failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// Every check's violation (the law's tables, each dialect's own fields)
/// becomes the one 400 shape here; each dialect's wire reshapes it.
impl From<crate::law::request::Violation> for ApiError {
    fn from(v: crate::law::request::Violation) -> Self {
        Self::invalid_owned(v.code, v.message, Some(v.param))
    }
}

impl ApiError {
    /// A 400 about the request itself.
    pub fn invalid(code: &str, message: impl Into<String>, param: Option<&str>) -> Self {
        Self::invalid_owned(code, message.into(), param.map(str::to_string))
    }

    fn invalid_owned(code: &str, message: String, param: Option<String>) -> Self {
        Self {
            status: 400,
            message,
            kind: "invalid_request_error",
            code: code.into(),
            param,
            raw: None,
        }
    }

    /// `{"error": self}`: the body of an error response or stream event.
    pub fn to_body(&self) -> serde_json::Value {
        serde_json::json!({ "error": self })
    }
}

/// Lifecycle failures of the engine itself, before a model is involved.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No llama-server binary anywhere the warden looks.
    #[error(
        "llama-server was not found (looked in: {searched}); run ./build-llama.sh to build it, or set WARDEN_LLAMA_SERVER"
    )]
    ServerMissing {
        /// The places tried, in order.
        searched: String,
    },
    /// The MLX engine has no Python environment.
    #[error("the MLX engine needs its Python environment: run ./build-llama.sh mlx, or set WARDEN_MLX_PYTHON")]
    MlxPythonMissing,
    /// The OS refused to start the child.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The executable.
        program: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Every port of the engine's pool is taken.
    #[error("no free port in {first}-{last} for the child")]
    NoFreePort {
        /// First port of the pool.
        first: u16,
        /// Last port of the pool.
        last: u16,
    },
}

impl EngineError {
    /// The wire code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::ServerMissing { .. } => "llama_server_missing",
            Self::MlxPythonMissing => "mlx_python_missing",
            Self::Spawn { .. } => "spawn_failed",
            Self::NoFreePort { .. } => "no_free_port",
        }
    }
}

/// A model that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelLoadError {
    /// The file failed the warden's own header check (nothing was spawned).
    #[error("{0}")]
    Invalid(#[from] GgufError),
    /// The engine cannot run this model's format.
    #[error("the model '{id}' is a {format} model, which the {engine} engine cannot run")]
    WrongFormat {
        /// The model id.
        id: String,
        /// Its format.
        format: &'static str,
        /// The engine's name.
        engine: &'static str,
    },
    /// The child exited while loading.
    #[error("the model server exited while loading '{id}' ({exit}): {code}{}", remedy(*.code))]
    Exited {
        /// The model id.
        id: String,
        /// The classified reason.
        code: EngineCode,
        /// How it ended.
        exit: ExitInfo,
        /// Its output tail.
        raw: String,
    },
    /// The child was not ready in time and was stopped.
    #[error("the model server did not become ready within {after:?} loading '{id}'; it was stopped")]
    TimedOut {
        /// The model id.
        id: String,
        /// The bound that passed.
        after: Duration,
        /// Its output tail.
        raw: String,
    },
    /// `/health` said ready but the first one-token request failed.
    #[error("the model server for '{id}' failed its first request ({reason})")]
    PingFailed {
        /// The model id.
        id: String,
        /// What failed, without secrets.
        reason: String,
        /// Its output tail.
        raw: String,
    },
    /// The engine itself failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A worker's llama.cpp build is not the warden's (refused before any spawn).
    #[error("cannot load '{id}' across the workers: {detail}")]
    WorkerBuildMismatch {
        /// The model id.
        id: String,
        /// Which worker, and both builds.
        detail: String,
    },
    /// An RPC worker of the plan was lost while the model loaded.
    #[error(
        "the RPC worker {worker} was lost while '{id}' loaded ({why}); the next request loads without it if the model still fits"
    )]
    WorkerLost {
        /// The model id.
        id: String,
        /// The worker's address.
        worker: String,
        /// What the watch saw.
        why: String,
    },
    /// Residents in a turn hold the memory the model needs, and the load
    /// waited its whole timeout for a turn to end (`law::residents`).
    #[error("'{id}' does not fit beside the models in use: {detail}; retry when a turn ends, or unload one")]
    NoRoom {
        /// The model id.
        id: String,
        /// What it needs and what each resident holds (`Shortfall`), and,
        /// when the request bounded its wait (`Prefer: wait=N`), that.
        detail: String,
        /// When to ask again, seconds (the scheduler's estimate), for a
        /// request that bounded its wait: its `Retry-After`.
        retry_after_s: Option<u64>,
    },
    /// With workers configured, the devices that answer cannot hold the
    /// model even at the window floor.
    #[error("'{id}' does not fit the devices that answer, even at a {window}-token window: {detail}")]
    DoesNotFit {
        /// The model id.
        id: String,
        /// The window tried.
        window: u32,
        /// Each device's planned share against its limit, and the workers
        /// left out.
        detail: String,
    },
}

impl ModelLoadError {
    /// The wire code.
    pub fn code(&self) -> String {
        match self {
            Self::Invalid(e) => e.code().into(),
            Self::WrongFormat { .. } => "model_format_unsupported".into(),
            Self::Exited { code, .. } => code.as_str().into(),
            Self::TimedOut { .. } => EngineCode::LoadTimeout.as_str().into(),
            Self::PingFailed { .. } => "ready_ping_failed".into(),
            Self::Engine(e) => e.code().into(),
            Self::WorkerBuildMismatch { .. } => "worker_build_mismatch".into(),
            Self::WorkerLost { .. } => "worker_lost".into(),
            Self::DoesNotFit { .. } | Self::NoRoom { .. } => crate::law::residents::DOES_NOT_FIT_CODE.into(),
        }
    }

    /// The child's tail, when a child ran.
    pub fn raw(&self) -> Option<&str> {
        match self {
            Self::Exited { raw, .. } | Self::TimedOut { raw, .. } | Self::PingFailed { raw, .. } => Some(raw),
            _ => None,
        }
    }
}

/// A turn that failed after its model was resolved.
#[derive(Debug, thiserror::Error)]
pub enum GenerationError {
    /// The child died during the turn.
    #[error("the model server died during generation ({exit}): {code}{}", remedy(*.code))]
    ChildDied {
        /// The classified reason.
        code: EngineCode,
        /// How it ended.
        exit: ExitInfo,
        /// Its output tail.
        raw: String,
    },
    /// The child stopped producing output; it was stopped.
    #[error(
        "the model server sent nothing for {after:?} ({stage}); it was stopped and will be restarted by the next request"
    )]
    Hung {
        /// `"before the first token"` or `"between tokens"`.
        stage: &'static str,
        /// The bound that passed.
        after: Duration,
        /// Its output tail.
        raw: String,
    },
    /// The child answered with an error status.
    #[error("the model server refused the request (HTTP {status})")]
    Upstream {
        /// Its status.
        status: u16,
        /// Its error body, when JSON.
        body: Option<serde_json::Value>,
    },
    /// The stream from the child broke in a way that is not a death.
    #[error("the connection to the model server failed ({0})")]
    Transport(String),
    /// An RPC worker the child ran layers on stopped answering, or its
    /// rpc-server restarted; the child was stopped.
    #[error(
        "the RPC worker {worker} was lost during generation ({why}); the model was unloaded, and the next request loads it without that worker if it still fits"
    )]
    WorkerLost {
        /// The worker's address.
        worker: String,
        /// What the watch saw.
        why: String,
        /// The child's output tail.
        raw: String,
    },
    /// The child died under the turn and the turn did not go on on the
    /// next one (`law::resume`): the death's own error, and why not.
    #[error("{cause}; the turn was not resumed: {why}")]
    NotResumed {
        /// The death's error.
        cause: Box<GenerationError>,
        /// Why it did not go on.
        why: String,
    },
    /// Resolving the model failed.
    #[error(transparent)]
    Load(#[from] ModelLoadError),
    /// The request names no model the warden knows.
    #[error("unknown model '{0}'")]
    UnknownModel(String),
}

/// Why a turn, a load or an unload did not happen or did not finish: the
/// domain error the engine and the front door (`Warden`) return. It says
/// what went wrong in the warden's terms; the HTTP boundary gives it its
/// wire shape (`WardenError::to_api`, in `http::wire_error`: status,
/// OpenAI's `type`, code), and so may an embedder that speaks OpenAI's wire.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WardenError {
    /// The request names a model the catalog does not hold.
    #[error(
        "The model '{0}' does not exist; `llm-warden models`, GET /v1/models and Ollama's GET /api/tags list the models this warden serves"
    )]
    ModelNotFound(String),
    /// No model was named and none is the default.
    #[error("no model is configured: pass --model or put a GGUF in the models directory")]
    NoModel,
    /// The warden is stopping: no turn starts any more.
    #[error("the warden is shutting down")]
    ShuttingDown,
    /// `WARDEN_MAX_QUEUE` turns already wait or run.
    #[error("The warden already has {0} requests waiting or running; retry later")]
    QueueFull(usize),
    /// A route the engine's child does not serve (MLX: only chat).
    #[error(
        "{} is not served by the {} engine (its model server has no such route); use /v1/chat/completions",
        route.path(),
        engine.tag()
    )]
    UnsupportedRoute {
        /// The route asked for.
        route: crate::law::route::Route,
        /// The engine running.
        engine: crate::law::types::EngineKind,
    },
    /// An engine handler panicked with this turn in flight (a bug of the
    /// warden's: the child was stopped and the engine came back).
    #[error("the engine failed inside this request ({0}); it stopped the model server and serves the next request")]
    EnginePanicked(String),
    /// The engine went away before the turn ended (it stopped, or its actor
    /// is gone): said in every dialect, never a silent end.
    #[error("the engine stopped before the turn ended; the next request starts it again")]
    EngineUnavailable,
    /// The model named is of the other kind: a chat request to an embedding
    /// model, or embeddings from a chat model.
    #[error("the model '{model}' is {}", kind.refusal(route))]
    WrongKind {
        /// The model id.
        model: String,
        /// What it is.
        kind: crate::law::types::ModelKind,
        /// The route's path.
        route: &'static str,
    },
    /// The request needs of its model what the model cannot take (an image
    /// and no projector, an infill and no fill-in-the-middle tokens): the
    /// 400 naming the part, decided once on the model the front door
    /// resolved (`law::request_chat::Needs::unmet`).
    #[error("{}", .0.message)]
    Unmet(crate::law::request::Violation),
    /// The child did not answer a tokenizer call in time.
    #[error("the model server did not answer {route} within {after:?}")]
    ChildTimeout {
        /// The route's path.
        route: &'static str,
        /// The bound that passed.
        after: Duration,
    },
    /// The model could not be loaded.
    #[error(transparent)]
    Load(std::sync::Arc<ModelLoadError>),
    /// The turn failed after its model loaded.
    #[error(transparent)]
    Generation(std::sync::Arc<GenerationError>),
}

impl WardenError {
    /// When to ask again, seconds: a load refused because the request
    /// bounded its wait and another model's turns hold the memory.
    pub fn retry_after_s(&self) -> Option<u64> {
        let load = match self {
            Self::Load(e) => &**e,
            Self::Generation(g) => match &**g {
                GenerationError::Load(e) => e,
                _ => return None,
            },
            _ => return None,
        };
        match load {
            ModelLoadError::NoRoom { retry_after_s, .. } => *retry_after_s,
            _ => None,
        }
    }

    /// The stable machine code (`model_not_found`, `out_of_memory`, ...).
    pub fn code(&self) -> String {
        match self {
            Self::ModelNotFound(_) => "model_not_found".into(),
            Self::NoModel => "model_not_found".into(),
            Self::ShuttingDown => "shutting_down".into(),
            Self::QueueFull(_) => "queue_full".into(),
            Self::UnsupportedRoute { .. } => "unsupported_route".into(),
            Self::EnginePanicked(_) => "engine_panicked".into(),
            Self::EngineUnavailable => "engine_unavailable".into(),
            Self::ChildTimeout { .. } => "upstream_timeout".into(),
            Self::WrongKind {
                kind: crate::law::types::ModelKind::Completion,
                ..
            } => "no_chat_template".into(),
            Self::WrongKind { .. } => "wrong_model_kind".into(),
            Self::Unmet(v) => v.code.into(),
            Self::Load(e) => e.code(),
            // A child's own refusal is coded by what its body says; the one
            // reading of it is the wire mapping's (`http::wire_upstream`).
            Self::Generation(e) => e.to_api().code,
        }
    }
}

/// Two errors are equal when they say the same: the same code and the same
/// sentence (the sources inside, an OS error or a child's exit, have no
/// equality of their own).
impl PartialEq for WardenError {
    fn eq(&self, other: &Self) -> bool {
        self.code() == other.code() && self.to_string() == other.to_string()
    }
}

impl From<ModelLoadError> for WardenError {
    fn from(e: ModelLoadError) -> Self {
        Self::Load(std::sync::Arc::new(e))
    }
}

impl From<GenerationError> for WardenError {
    fn from(e: GenerationError) -> Self {
        Self::Generation(std::sync::Arc::new(e))
    }
}

/// `; <what to do>` for a code that says what to do, else nothing.
fn remedy(code: EngineCode) -> String {
    code.remedy().map(|r| format!("; {r}")).unwrap_or_default()
}
