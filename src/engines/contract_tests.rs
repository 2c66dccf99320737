//! The spec's fixed facts about each engine's child, one assertion each,
//! so no rule of it stands untested: the port ranges, the
//! CPU child's `-ngl 0`, the MLX child's one sequence and its prefix-cache
//! pool, the configured llama.cpp build tried before the other.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::SpawnPlan;
use super::cpu::CpuEngine;
use super::llama::{self, Flavour};
use super::mlx::{MlxEngine, MlxFacts};
use super::plan::EnginePlan;
use crate::config::WardenConfig;
use crate::secret::ApiKey;

fn plan(engine: EnginePlan) -> SpawnPlan {
    SpawnPlan::for_tests(None, engine)
}

fn strings(v: &[OsString]) -> Vec<String> {
    v.iter().map(|a| a.to_string_lossy().into_owned()).collect()
}

/// The spec's three port ranges: llama-server children, MLX children, the
/// warden itself; none overlaps another.
#[test]
fn the_port_ranges_are_the_specs() {
    assert_eq!(llama::LLAMA_PORTS, 27200..=27299);
    assert_eq!(super::mlx::MLX_PORTS, 27300..=27399);
    assert_eq!(crate::server::WARDEN_PORTS, 27182..=27199);
}

/// The CPU child offloads no layer (`-ngl 0`): a CUDA build found as the
/// fallback must not touch the GPU for a CPU plan; `-lv` only off its
/// default.
#[test]
fn the_cpu_child_offloads_nothing() {
    let rows = [
        // why: llama-server's default verbosity is not passed
        (3, vec!["-ngl", "0"]),
        (4, vec!["-ngl", "0", "-lv", "4"]),
    ];
    for (verbosity, want) in rows {
        let e = CpuEngine {
            server: "/x/llama-server".into(),
            verbosity,
            workers: None,
        };
        let args = strings(&e.argv(&plan(EnginePlan::Cpu { rpc: None })));
        assert_eq!(&args[args.len() - want.len()..], want.as_slice(), "{args:?}");
        assert_eq!(args.iter().filter(|a| *a == "-ngl").count(), 1, "{args:?}");
    }
}

/// The MLX child runs one sequence (`MLX_VLM_MAX_NUM_SEQS=1`: a barrier
/// request proves the child idle), its prefix-cache pool sized on the
/// trained window in 16-token blocks (it fills lazily; mlx-vlm's own
/// default when the model names no trained window), it outwaits the
/// warden's watchdog per token, and its key is only in the environment.
#[test]
fn the_mlx_child_runs_one_sequence_with_a_pool_of_the_trained_window() {
    let e = MlxEngine {
        python: "/py/bin/python".into(),
        runner: "/c/mlx_runner.py".into(),
        cache_home: "/c/mlx-cache".into(),
    };
    let key = ApiKey::mint();
    let rows = [
        // (facts' trained window, APC_NUM_BLOCKS, MLX_VLM_TOKEN_QUEUE_TIMEOUT, why)
        // why: 8192 / 16; the default watchdog leaves mlx-vlm's 600 s
        (Some(Some(8192)), Some("512"), "600"),
        // why: a partial block is a block
        (Some(Some(8200)), Some("513"), "600"),
        // why: no trained window: no pool size of the warden's, 3660 s a token
        (Some(None), None, "3660"),
        // why: no readable config.json: the same
        (None, None, "3660"),
    ];
    for (trained, blocks, wait) in rows {
        let facts = trained.map(|trained| MlxFacts {
            trained,
            kv_per_token: 1,
            weights_bytes: 1,
        });
        let token_wait = crate::law::mlx::token_wait(trained.flatten(), Duration::from_secs(300));
        let spec = e.spawn_spec(&plan(EnginePlan::Mlx { facts, token_wait }), 27301, &key);
        let env = |k: &str| {
            spec.env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(env("MLX_VLM_MAX_NUM_SEQS").as_deref(), Some("1"));
        assert_eq!(env("APC_NUM_BLOCKS").as_deref(), blocks, "{trained:?}");
        assert_eq!(env("MLX_VLM_TOKEN_QUEUE_TIMEOUT").as_deref(), Some(wait), "{trained:?}");
        assert_eq!(env("MLX_VLM_SERVER_API_KEY").as_deref(), Some(key.expose()));
        let args = strings(&spec.args);
        assert!(args.windows(2).any(|w| w == ["--host", "127.0.0.1"]), "{args:?}");
        assert!(!args.iter().any(|a| a.contains(key.expose())));
    }
}

/// Makes an executable llama-server of flavour `f` under `root`.
fn build(root: &Path, f: Flavour) -> std::path::PathBuf {
    let bin = root.join("artifacts/llama-cpp").join(f.dir()).join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join(if cfg!(windows) { "llama-server.exe" } else { "llama-server" });
    std::fs::write(&exe, "#!/bin/sh\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    exe
}

/// The configured flavour's build is tried before the other (a CUDA build
/// runs CPU inference; the CPU build is the CUDA engine's last resort), and
/// `WARDEN_LLAMA_SERVER` before both.
#[test]
fn the_configured_build_is_tried_before_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let both = dir.path().join("both");
    let cpu_both = build(&both, Flavour::Cpu);
    let cuda_both = build(&both, Flavour::Cuda);
    let only_cpu = dir.path().join("only-cpu");
    let cpu_only = build(&only_cpu, Flavour::Cpu);
    let cfg = |root: &Path, server: Option<&Path>| WardenConfig {
        artifact_roots: vec![root.to_path_buf()],
        cache_dir: dir.path().join("no-cache"),
        llama_server: server.map(Path::to_path_buf),
        ..WardenConfig::default()
    };
    let rows = [
        (cfg(&both, None), Flavour::Cpu, &cpu_both),
        (cfg(&both, None), Flavour::Cuda, &cuda_both),
        // why: the other flavour when the configured one is missing
        (cfg(&only_cpu, None), Flavour::Cuda, &cpu_only),
        // why: the user's binary first
        (cfg(&both, Some(&cpu_only)), Flavour::Cuda, &cpu_only),
    ];
    for (i, (c, f, want)) in rows.into_iter().enumerate() {
        assert_eq!(&llama::find_llama_server(&c, f).unwrap(), want, "row {i}");
    }
    let none = cfg(&dir.path().join("nothing"), None);
    assert!(llama::find_llama_server(&none, Flavour::Cpu).is_err());
}
