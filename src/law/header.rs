//! What a model header the warden cannot read means for a load.
//!
//! Fatal (the load fails at once, with the reader's reason): the file is
//! missing, unreadable, empty, not GGUF, truncated, or a split family lacks a
//! part; llama-server would fail the same way, later and with a worse
//! message. Anything else (a key or type the reader does not know) only
//! means the warden cannot size the model: one WARNING, no `-c`, and
//! llama-server decides.

/// Whether the header error with `code` fails the load.
pub fn is_fatal(code: &str) -> bool {
    matches!(
        code,
        "model_missing"
            | "model_unreadable"
            | "model_empty"
            | "not_gguf"
            | "gguf_truncated"
            | "model_truncated"
            | "split_part_missing"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_rows() {
        let rows = [
            // why: the file itself is unusable
            ("model_missing", true),
            ("not_gguf", true),
            ("gguf_truncated", true),
            ("split_part_missing", true),
            // why: the reader cannot size it; llama-server may still run it
            ("gguf_invalid", false),
            ("gguf_version_unsupported", false),
        ];
        for (i, (code, want)) in rows.into_iter().enumerate() {
            assert_eq!(is_fatal(code), want, "row {i}: {code}");
        }
    }
}
