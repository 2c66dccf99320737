//! What a model header the warden cannot read means for a load.
//!
//! Fatal (the load fails at once, with the reader's reason): the file is
//! missing, unreadable, empty, not GGUF, truncated, or a split family lacks a
//! part; llama-server would fail the same way, later and with a worse
//! message. Anything else (a key or type the reader does not know) only
//! means the warden cannot size the model: one WARNING, no `-c`, and
//! llama-server decides.

use crate::gguf::GgufError;

/// Whether the header error `e` fails the load. Every kind is named, so a
/// new one must be classified here before the crate builds.
pub fn is_fatal(e: &GgufError) -> bool {
    match e {
        GgufError::Missing { .. }
        | GgufError::Unreadable { .. }
        | GgufError::Empty { .. }
        | GgufError::NotGguf { .. }
        | GgufError::Truncated { .. }
        | GgufError::ModelTruncated { .. }
        | GgufError::SplitPartMissing { .. } => true,
        GgufError::VersionUnsupported { .. } | GgufError::Invalid { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn fatal_rows() {
        let path = PathBuf::from("m.gguf");
        let rows = [
            // why: the file itself is unusable
            (GgufError::Missing { path: path.clone() }, true),
            (
                GgufError::NotGguf {
                    path: path.clone(),
                    reason: "PK".into(),
                },
                true,
            ),
            (GgufError::Empty { path: path.clone() }, true),
            // why: the reader cannot size it; llama-server may still run it
            (
                GgufError::Invalid {
                    path: path.clone(),
                    reason: "odd key".into(),
                },
                false,
            ),
        ];
        for (i, (e, want)) in rows.into_iter().enumerate() {
            assert_eq!(is_fatal(&e), want, "row {i}: {}", e.code());
        }
    }
}
