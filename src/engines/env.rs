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
    base_env_on(source, cfg!(windows))
}

/// As `base_env`; `windows`: names compare without case, as Windows'
/// do (its PATH is usually spelled `Path`, and a child without it finds no
/// DLL).
fn base_env_on(source: impl IntoIterator<Item = (OsString, OsString)>, windows: bool) -> Vec<(OsString, OsString)> {
    let fold = |k: &str| if windows { k.to_ascii_uppercase() } else { k.to_string() };
    source
        .into_iter()
        .filter(|(k, _)| {
            let k = fold(&k.to_string_lossy());
            PASS_THROUGH.iter().any(|p| fold(p) == k) || PASS_PREFIXES.iter().any(|p| k.starts_with(&fold(p)))
        })
        .collect()
}

/// The pass-through part of the warden's own environment.
pub fn inherited() -> Vec<(OsString, OsString)> {
    base_env(std::env::vars_os())
}

/// On Windows, the CUDA toolkit's `bin` (`%CUDA_PATH%\bin`) first on the
/// child's PATH: the CUDA build of llama-server loads cudart and cuBLAS
/// from PATH (Windows has no rpath), and a toolkit installed for one user,
/// or a warden run as a service, does not have it there. Nothing changes
/// without `CUDA_PATH`, when PATH already starts with it, or off Windows
/// (the loader's path and the build's rpath find the libraries there).
pub fn cuda_bin_first(env: &mut [(OsString, OsString)], windows: bool) -> Option<()> {
    if !windows {
        return None;
    }
    let is = |k: &OsString, name: &str| k.to_string_lossy().eq_ignore_ascii_case(name);
    let cuda = env.iter().find(|(k, _)| is(k, "CUDA_PATH"))?.1.to_string_lossy().into_owned();
    let bin = format!("{}\\bin", cuda.trim_end_matches(['\\', '/']));
    let (_, path) = env.iter_mut().find(|(k, _)| is(k, "PATH"))?;
    let old = path.to_string_lossy().into_owned();
    if old.split(';').next().is_some_and(|first| first.eq_ignore_ascii_case(&bin)) {
        return Some(());
    }
    *path = OsString::from(if old.is_empty() { bin } else { format!("{bin};{old}") });
    Some(())
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

    /// Windows' names have no case: its `Path` passes there, not elsewhere.
    #[test]
    fn windows_names_compare_without_case() {
        let src = || [("Path", "C:\\Windows"), ("SystemRoot", "C:\\Windows"), ("ggml_x", "1"), ("warden_api_key", "s")].map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let names = |windows| -> Vec<String> {
            base_env_on(src(), windows).into_iter().map(|(k, _)| k.into_string().unwrap()).collect()
        };
        assert_eq!(names(true), ["Path", "SystemRoot", "ggml_x"]);
        assert!(names(false).is_empty());
    }

    /// The toolkit's bin goes first, once, on Windows only.
    #[test]
    fn the_cuda_toolkit_bin_goes_first_on_windows() {
        let env = |path: &str| {
            vec![
                (OsString::from("CUDA_PATH"), OsString::from("C:\\CUDA\\v12.6\\")),
                (OsString::from("Path"), OsString::from(path)),
            ]
        };
        let path_of = |e: &[(OsString, OsString)]| e[1].1.to_string_lossy().into_owned();
        let mut e = env("C:\\Windows");
        cuda_bin_first(&mut e, true);
        assert_eq!(path_of(&e), "C:\\CUDA\\v12.6\\bin;C:\\Windows");
        // why: already first: unchanged, not doubled
        cuda_bin_first(&mut e, true);
        assert_eq!(path_of(&e), "C:\\CUDA\\v12.6\\bin;C:\\Windows");
        let mut e = env("");
        cuda_bin_first(&mut e, true);
        assert_eq!(path_of(&e), "C:\\CUDA\\v12.6\\bin");
        // why: off Windows the loader finds the libraries
        let mut e = env("/usr/bin");
        assert_eq!(cuda_bin_first(&mut e, false), None);
        assert_eq!(path_of(&e), "/usr/bin");
        // why: no toolkit named: nothing to add
        let mut e = vec![(OsString::from("PATH"), OsString::from("C:\\Windows"))];
        assert_eq!(cuda_bin_first(&mut e, true), None);
    }
}
