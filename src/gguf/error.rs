//! Errors of the GGUF header reader: one variant per failure a caller can act on.

use std::path::{Path, PathBuf};

/// Why a model file could not be turned into [`super::ModelFacts`].
///
/// Every variant carries the path of the file at fault and, where one exists,
/// a human reason; [`GgufError::code`] gives the stable machine code that the
/// warden reports to its clients.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The model path does not exist (code `model_missing`): the caller can
    /// tell the user to download the model or fix the path.
    #[error("model file {path:?} does not exist")]
    Missing {
        /// The path that was looked up.
        path: PathBuf,
    },

    /// The file exists but could not be opened or read (code
    /// `model_unreadable`): permissions, a directory, an I/O fault.
    #[error("model file {path:?} is unreadable: {reason}")]
    Unreadable {
        /// The file that failed.
        path: PathBuf,
        /// What went wrong, from the OS or from the reader.
        reason: String,
    },

    /// The file is zero bytes long (code `model_empty`), usually a download
    /// that never started.
    #[error("model file {path:?} is empty (0 bytes)")]
    Empty {
        /// The empty file.
        path: PathBuf,
    },

    /// The file does not start with the `GGUF` magic (code `not_gguf`): it
    /// is some other format (safetensors, an HTML error page, ...).
    #[error("model file {path:?} is not GGUF: {reason}")]
    NotGguf {
        /// The file that failed.
        path: PathBuf,
        /// What was found instead of the magic.
        reason: String,
    },

    /// The GGUF version is not 2 or 3 (code `gguf_version_unsupported`).
    #[error("model file {path:?} has unsupported GGUF version {version}: {reason}")]
    VersionUnsupported {
        /// The file that failed.
        path: PathBuf,
        /// The version field as read (little-endian).
        version: u32,
        /// Why it is refused (too old, too new, wrong byte order).
        reason: String,
    },

    /// The header ends before all of its declared records (code
    /// `gguf_truncated`): an interrupted download or copy.
    #[error("GGUF header of {path:?} is truncated at byte {offset}: {reason}")]
    Truncated {
        /// The file that failed.
        path: PathBuf,
        /// Byte offset where the reader ran out of data.
        offset: u64,
        /// What the reader was trying to read.
        reason: String,
    },

    /// The header is malformed (code `gguf_invalid`): absurd counts or
    /// lengths, unknown value or tensor types, bad dimensions, a required key
    /// missing or of the wrong type.
    #[error("GGUF header of {path:?} is invalid: {reason}")]
    Invalid {
        /// The file that failed.
        path: PathBuf,
        /// What is wrong, naming the key or tensor at fault.
        reason: String,
    },

    /// The tensor data runs past the end of the file (code
    /// `model_truncated`): the header is whole but the weights are not.
    #[error("model file {path:?} is truncated: tensor data needs {needed} bytes, file has {size}")]
    ModelTruncated {
        /// The file (or split part) that is too short.
        path: PathBuf,
        /// Bytes the header says the file must have.
        needed: u64,
        /// Bytes the file has.
        size: u64,
    },

    /// A part of a split family is missing (code `split_part_missing`).
    #[error("split model {path:?}: part {part} of {count} is missing ({missing:?})")]
    SplitPartMissing {
        /// The first part, as given by the caller.
        path: PathBuf,
        /// The part file that does not exist.
        missing: PathBuf,
        /// The 1-based number of the missing part.
        part: u32,
        /// How many parts the family has.
        count: u32,
    },
}

impl GgufError {
    /// The stable machine code of this failure, reported to clients and used
    /// by tests; one code per variant.
    pub fn code(&self) -> &'static str {
        match self {
            GgufError::Missing { .. } => "model_missing",
            GgufError::Unreadable { .. } => "model_unreadable",
            GgufError::Empty { .. } => "model_empty",
            GgufError::NotGguf { .. } => "not_gguf",
            GgufError::VersionUnsupported { .. } => "gguf_version_unsupported",
            GgufError::Truncated { .. } => "gguf_truncated",
            GgufError::Invalid { .. } => "gguf_invalid",
            GgufError::ModelTruncated { .. } => "model_truncated",
            GgufError::SplitPartMissing { .. } => "split_part_missing",
        }
    }

    /// The file at fault, so a caller can name it without matching on the
    /// variant.
    pub fn path(&self) -> &Path {
        match self {
            GgufError::Missing { path }
            | GgufError::Unreadable { path, .. }
            | GgufError::Empty { path }
            | GgufError::NotGguf { path, .. }
            | GgufError::VersionUnsupported { path, .. }
            | GgufError::Truncated { path, .. }
            | GgufError::Invalid { path, .. }
            | GgufError::ModelTruncated { path, .. }
            | GgufError::SplitPartMissing { path, .. } => path,
        }
    }

    /// Shorthand for a [`GgufError::Invalid`] on `path`.
    pub(crate) fn invalid(path: &Path, reason: impl Into<String>) -> Self {
        GgufError::Invalid {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// Maps an I/O error from opening or reading `path` to the matching
    /// variant: not-found is [`GgufError::Missing`], an early end of file is
    /// [`GgufError::Truncated`] at `offset`, anything else is unreadable.
    pub(crate) fn from_io(path: &Path, offset: u64, err: std::io::Error) -> Self {
        match err.kind() {
            std::io::ErrorKind::NotFound => GgufError::Missing {
                path: path.to_path_buf(),
            },
            std::io::ErrorKind::UnexpectedEof => GgufError::Truncated {
                path: path.to_path_buf(),
                offset,
                reason: "file ended while reading".to_string(),
            },
            _ => GgufError::Unreadable {
                path: path.to_path_buf(),
                reason: err.to_string(),
            },
        }
    }
}
