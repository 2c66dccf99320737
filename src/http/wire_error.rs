//! Every domain error's wire shape, built here at the HTTP boundary and
//! nowhere else: the status, OpenAI's `type`, the stable code, the field at
//! fault and the child's tail (`ApiError`). The engine and the front door
//! return `WardenError`; the routes, the dialects and the CLI's in-process
//! chat turn it into `ApiError` through `WardenError::to_api`.

use crate::error::{ApiError, EngineError, GenerationError, ModelLoadError, WardenError};
use crate::law::crash::EngineCode;

impl WardenError {
    /// The wire error.
    pub fn to_api(&self) -> ApiError {
        let plain = |status: u16, kind: &'static str, param: Option<&str>| ApiError {
            status,
            message: self.to_string(),
            kind,
            code: self.code(),
            param: param.map(str::to_string),
            raw: None,
        };
        match self {
            Self::ModelNotFound(_) | Self::NoModel => plain(404, "invalid_request_error", Some("model")),
            Self::ShuttingDown | Self::QueueFull(_) | Self::EngineUnavailable => plain(503, "server_error", None),
            Self::UnsupportedRoute { .. } => plain(501, "invalid_request_error", None),
            Self::EnginePanicked(_) => plain(500, "server_error", None),
            Self::ChildTimeout { .. } => plain(504, "server_error", None),
            Self::WrongKind { .. } => plain(400, "invalid_request_error", Some("model")),
            Self::Unmet(v) => v.clone().into(),
            Self::Load(e) => e.to_api(),
            Self::Generation(e) => e.to_api(),
        }
    }
}

impl ModelLoadError {
    /// The wire error.
    pub(crate) fn to_api(&self) -> ApiError {
        let (status, kind) = match self {
            // A model file the warden itself finds broken, or of the wrong
            // format, is the request's problem to fix (name another model).
            Self::Invalid(_) | Self::WrongFormat { .. } => (422, "model_load_error"),
            Self::Engine(EngineError::NoFreePort { .. }) => (503, "engine_error"),
            Self::Engine(_) => (500, "engine_error"),
            // The machines, not the request, are short: another model or
            // the missing worker back fixes it.
            Self::WorkerBuildMismatch { .. }
            | Self::DoesNotFit { .. }
            | Self::NoRoom { .. }
            | Self::WorkerLost { .. } => (503, "model_load_error"),
            _ => (500, "model_load_error"),
        };
        ApiError {
            status,
            message: self.to_string(),
            kind,
            code: self.code(),
            param: None,
            raw: self.raw().map(str::to_string),
        }
    }
}

impl GenerationError {
    /// The wire error.
    pub(crate) fn to_api(&self) -> ApiError {
        match self {
            Self::Load(e) => e.to_api(),
            Self::UnknownModel(id) => WardenError::ModelNotFound(id.clone()).to_api(),
            Self::ChildDied { code, raw, .. } => ApiError {
                status: 502,
                message: self.to_string(),
                kind: "generation_error",
                code: code.as_str().into(),
                param: None,
                raw: Some(raw.clone()),
            },
            Self::Hung { raw, .. } => ApiError {
                status: 504,
                message: self.to_string(),
                kind: "generation_error",
                code: EngineCode::ChildHung.as_str().into(),
                param: None,
                raw: Some(raw.clone()),
            },
            Self::Upstream { status, body } => super::wire_upstream::upstream_error(*status, body.as_ref()),
            // The death's code and status, its sentence with why not.
            Self::NotResumed { cause, .. } => ApiError {
                message: self.to_string(),
                ..cause.to_api()
            },
            Self::Transport(_) => ApiError {
                status: 502,
                message: self.to_string(),
                kind: "generation_error",
                code: "upstream_transport".into(),
                param: None,
                raw: None,
            },
            Self::WorkerLost { raw, .. } => ApiError {
                status: 502,
                message: self.to_string(),
                kind: "generation_error",
                code: "worker_lost".into(),
                param: None,
                raw: Some(raw.clone()),
            },
        }
    }
}
