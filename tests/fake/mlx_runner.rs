//! The MLX child's runner (`scripts/mlx_runner.py`, the very file the binary
//! embeds) run by the system `python3` over fake `mlx` and `mlx_vlm`
//! packages: it bounds MLX's buffer cache with `mx.set_cache_limit(0)`
//! before the server is imported, says one WARNING when that is missing and
//! starts the server all the same, passes its arguments on unchanged, and
//! sets `MLX_VLM_MAX_NUM_SEQS=1` and `HF_HUB_OFFLINE=1` unless already set.
//! The real mlx_vlm.server runs it in `tests/real/real_mlx.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// The fake `mlx.core` of a row.
#[derive(Debug, Clone, Copy)]
enum Mlx {
    /// `set_cache_limit` records each argument in `calls`.
    WithCacheLimit,
    /// An MLX without `set_cache_limit` (AttributeError).
    WithoutCacheLimit,
    /// `set_cache_limit` exists but fails (a runtime error in MLX).
    CacheLimitRaises,
    /// No `mlx` package at all (ImportError).
    Absent,
}

const CORE_WITH: &str = "calls = []\n\ndef set_cache_limit(n):\n    calls.append(n)\n    return 0\n";
const CORE_RAISES: &str = "def set_cache_limit(n):\n    raise RuntimeError('no Metal device')\n";

/// The fake server: says, as one JSON line on stdout, what the runner left
/// it: its argv, the two variables, the cache-limit calls made before it
/// was imported and by the time it ran (`null` without a recording MLX).
/// It reads `mlx.core` from `sys.modules` only: importing it here would
/// hide a runner that never tried.
const SERVER: &str = r#"import json, os, sys

def _calls():
    core = sys.modules.get("mlx.core")
    calls = getattr(core, "calls", None)
    return None if calls is None else list(calls)

CALLS_AT_IMPORT = _calls()

def main():
    print("FAKE_SERVER " + json.dumps({
        "argv": sys.argv,
        "seqs": os.environ.get("MLX_VLM_MAX_NUM_SEQS"),
        "offline": os.environ.get("HF_HUB_OFFLINE"),
        "calls_at_import": CALLS_AT_IMPORT,
        "calls": _calls(),
    }), flush=True)
"#;

/// The runner as the binary embeds it (`include_str!` in src/engines/mlx.rs).
fn runner() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mlx_runner.py")
}

/// Writes the fake packages of `mlx` under `dir`.
fn fake_packages(dir: &Path, mlx: Mlx) {
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("mlx_vlm/__init__.py", "");
    write("mlx_vlm/server/__init__.py", SERVER);
    let core = match mlx {
        Mlx::WithCacheLimit => CORE_WITH,
        Mlx::WithoutCacheLimit => "",
        Mlx::CacheLimitRaises => CORE_RAISES,
        Mlx::Absent => return,
    };
    write("mlx/__init__.py", "");
    write("mlx/core.py", core);
}

/// The runner's result: exit status, what the fake server saw, and stderr.
struct Ran {
    success: bool,
    seen: Option<Value>,
    stderr: String,
}

/// Variables the caller sets in the runner's environment.
type Preset<'a> = &'a [(&'a str, &'a str)];

/// Runs the runner over the fake packages of `mlx`, with `preset` in its
/// environment and the two variables it sets otherwise removed.
fn run(mlx: Mlx, args: &[&str], preset: Preset<'_>) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    fake_packages(dir.path(), mlx);
    let mut cmd = Command::new("python3");
    // -S: no site-packages (nor user site), so an `mlx` installed on the
    // machine can neither stand in for an absent one nor shadow the fakes,
    // which PYTHONPATH (this child only) puts first.
    cmd.arg("-S")
        .arg(runner())
        .args(args)
        .env("PYTHONPATH", dir.path())
        .env("PYTHONNOUSERSITE", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // No re-exec with an OpenBLAS preload: the fakes need none.
        .env("WARDEN_MLX_RUNNER_REEXEC", "1")
        .env_remove("MLX_VLM_MAX_NUM_SEQS")
        .env_remove("HF_HUB_OFFLINE");
    for (k, v) in preset {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("python3 is needed to run scripts/mlx_runner.py: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen = stdout
        .lines()
        .find_map(|l| l.strip_prefix("FAKE_SERVER "))
        .map(|j| serde_json::from_str(j).unwrap());
    Ran {
        success: out.status.success(),
        seen,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `mx.set_cache_limit(0)` once, before the server is imported; one WARNING
/// naming the exception's class when MLX or the call is missing (or fails),
/// and the server runs all the same.
#[test]
fn the_runner_bounds_mlx_s_buffer_cache_or_warns_once() {
    let args = ["--model", "/models/m dir", "--host", "127.0.0.1", "--port", "27301"];
    let rows: &[(Mlx, Value, Option<&str>)] = &[
        // why: the spec's bound: 0, one call, before the server's import
        (Mlx::WithCacheLimit, json!([0]), None),
        // why: an MLX without set_cache_limit: MLX's default, said once
        (Mlx::WithoutCacheLimit, Value::Null, Some("AttributeError")),
        // why: a call that fails is the same: one WARNING, never a dead child
        (Mlx::CacheLimitRaises, Value::Null, Some("RuntimeError")),
        // why: no mlx.core at all (ImportError's subclass)
        (Mlx::Absent, Value::Null, Some("ModuleNotFoundError")),
    ];
    for (i, (mlx, calls, warning)) in rows.iter().enumerate() {
        let ran = run(*mlx, &args, &[]);
        let ctx = format!("row {i} ({mlx:?}), stderr:\n{}", ran.stderr);
        assert!(ran.success, "{ctx}");
        let seen = ran.seen.unwrap_or_else(|| panic!("the server never ran: {ctx}"));
        assert_eq!(seen["calls_at_import"], *calls, "{ctx}");
        assert_eq!(seen["calls"], *calls, "{ctx}");
        let warnings: Vec<&str> = ran.stderr.lines().filter(|l| l.contains("WARNING")).collect();
        match warning {
            None => assert!(warnings.is_empty(), "{ctx}"),
            Some(class) => {
                assert_eq!(warnings.len(), 1, "{ctx}");
                assert!(
                    warnings[0].contains(&format!("mlx buffer cache limit unavailable ({class})")),
                    "{ctx}"
                );
            }
        }
    }
}

/// The runner hands its arguments to mlx_vlm.server's CLI unchanged, and
/// sets one sequence and the offline hub only where the caller set nothing.
#[test]
fn the_runner_passes_its_arguments_and_defaults_its_variables() {
    let args = ["--model", "/models/m dir", "--host", "127.0.0.1", "--port", "27301"];
    let rows: &[(Preset, &str, &str)] = &[
        // why: unset: the runner's defaults
        (&[], "1", "1"),
        // why: set by the caller: kept (setdefault, never overwritten)
        (&[("MLX_VLM_MAX_NUM_SEQS", "4"), ("HF_HUB_OFFLINE", "0")], "4", "0"),
    ];
    for (i, (preset, seqs, offline)) in rows.iter().enumerate() {
        let ran = run(Mlx::WithCacheLimit, &args, preset);
        let ctx = format!("row {i} ({preset:?}), stderr:\n{}", ran.stderr);
        assert!(ran.success, "{ctx}");
        let seen = ran.seen.unwrap_or_else(|| panic!("the server never ran: {ctx}"));
        let mut argv = vec!["mlx_vlm.server"];
        argv.extend(args);
        assert_eq!(seen["argv"], json!(argv), "{ctx}");
        assert_eq!(seen["seqs"], *seqs, "{ctx}");
        assert_eq!(seen["offline"], *offline, "{ctx}");
    }
}
