//! The child's environment, built explicitly: a short allow-list of what a
//! process needs to run (paths, locale, temp dir, dynamic libraries, GPU
//! runtime), plus the per-spawn key. Nothing else of the warden's
//! environment passes, so its secrets (`WARDEN_API_KEY`, cloud tokens) and
//! stray `LLAMA_ARG_*` settings that would silently change the child's flags
//! never reach it.

use std::ffi::OsString;

/// Variables passed through when the warden has them.
const PASS_THROUGH: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "TMPDIR",
    "TEMP",
    "TMP",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "LD_LIBRARY_PATH",
    "DYLD_LIBRARY_PATH",
    "DYLD_FALLBACK_LIBRARY_PATH",
    "SYSTEMROOT",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "CUDA_PATH",
    "CUDA_HOME",
    "OMP_NUM_THREADS",
];

/// Prefixes passed through: llama.cpp's own ggml tuning knobs and the
/// NVIDIA driver's, which a user sets for the model server on purpose.
const PASS_PREFIXES: &[&str] = &["GGML_", "NVIDIA_"];

/// The pass-through part of a child's environment, from `source`.
pub fn base_env(source: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    source
        .into_iter()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            PASS_THROUGH.contains(&k.as_ref()) || PASS_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .collect()
}

/// The pass-through part of the warden's own environment.
pub fn inherited() -> Vec<(OsString, OsString)> {
    base_env(std::env::vars_os())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_allow_list_passes() {
        let src = [
            ("PATH", "/bin"),
            ("WARDEN_API_KEY", "secret"),
            ("LLAMA_ARG_CTX_SIZE", "2"),
            ("LLAMA_API_KEY", "stale"),
            ("GGML_CUDA_NO_PINNED", "1"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let got: Vec<String> = base_env(src)
            .into_iter()
            .map(|(k, _)| k.into_string().unwrap())
            .collect();
        assert_eq!(got, ["PATH", "GGML_CUDA_NO_PINNED"]);
    }
}
