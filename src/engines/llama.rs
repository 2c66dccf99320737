//! What the CPU and CUDA engines share: finding `llama-server`, the spec's
//! fixed flags, the request translation and the readiness ping.
//!
//! Fixed flags, after the engine's own argv, on every spawn: `--no-slots`,
//! `--no-webui`, `--cache-ram 0`, `--no-cache-idle-slots`, `--metrics`, `--host 127.0.0.1`, `--port N`. The
//! slots (`-np N`, and `--kv-unified` past one) and the HTTP threads they
//! need are the plan's, in the model's argv (`law::slots`).
//! `--metrics` is the warden's addition to the spec's list: it lets
//! `/metrics` relay the child's own counters; it costs a counter update per
//! batch and opens nothing beyond the key-guarded loopback port. One KV
//! pool and no prompt cache keep the child's memory to the window's KV
//! however many conversations share it (the spec's "slots and prompt
//! cache": the spec ran one slot for this; measured here, a unified
//! pool of N slots costs what one slot does). The per-spawn key goes in the environment as `LLAMA_API_KEY`
//! (llama-server's own equivalent of `--api-key`), so `ps` never shows it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::secret::ApiKey;
use crate::child::process::SpawnSpec;
use crate::config::WardenConfig;
use crate::error::EngineError;

/// llama-server's HTTP threads, set rather than left to its default
/// (max(n_parallel + 4, cores - 1), 5 here): each open keep-alive connection
/// holds one thread for its life (see `child::client`), and the warden may
/// hold each slot's turn connection, pooled ones and a probe at once: two
/// per slot and six more (8 at one slot). Idle threads
/// cost a stack's address space, not memory.
pub fn child_http_threads(slots: u32) -> u32 {
    slots.max(1) * 2 + 6
}

/// The port pool of llama-server children.
pub const LLAMA_PORTS: std::ops::RangeInclusive<u16> = 27200..=27299;

/// Which llama.cpp build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// Built without GPU support.
    Cpu,
    /// Built with `-DGGML_CUDA=ON`.
    Cuda,
}

impl Flavour {
    /// The directory name under `artifacts/llama-cpp/`.
    pub fn dir(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
        }
    }

    fn other(self) -> Self {
        match self {
            Self::Cpu => Self::Cuda,
            Self::Cuda => Self::Cpu,
        }
    }
}

/// The executable name on this platform.
fn exe_name() -> &'static str {
    if cfg!(windows) {
        "llama-server.exe"
    } else {
        "llama-server"
    }
}

/// Finds `llama-server`: `WARDEN_LLAMA_SERVER`, then the configured flavour's
/// artifact, then the other flavour's (a CUDA build runs CPU inference; the
/// CPU build never uses the GPU). Artifacts are looked for under each
/// artifact root's `artifacts/llama-cpp/<flavour>/bin/` and in the cache
/// build-llama.sh installs into.
pub fn find_llama_server(cfg: &WardenConfig, flavour: Flavour) -> Result<PathBuf, EngineError> {
    let mut tried = Vec::new();
    if let Some(p) = &cfg.llama_server {
        if is_executable(p) {
            return Ok(p.clone());
        }
        tried.push(format!("WARDEN_LLAMA_SERVER={}", p.display()));
    }
    for f in [flavour, flavour.other()] {
        match find_flavour(cfg, f) {
            Ok(p) => return Ok(p),
            Err(mut t) => tried.append(&mut t),
        }
    }
    Err(EngineError::ServerMissing {
        searched: tried.join(", "),
    })
}

/// The build of one flavour only (the CUDA pre-flight asks whether a CUDA
/// build exists): the artifact roots, then the cache. `Err` lists the places.
pub fn find_flavour(cfg: &WardenConfig, f: Flavour) -> Result<PathBuf, Vec<String>> {
    find_flavour_binary(cfg, f, exe_name())
}

/// As `find_flavour`, for another executable of the same build (`exe`, with
/// its platform suffix): the RPC worker's `ggml-rpc-server` sits beside
/// llama-server in every flavour.
pub fn find_flavour_binary(cfg: &WardenConfig, f: Flavour, exe: &str) -> Result<PathBuf, Vec<String>> {
    let mut candidates: Vec<PathBuf> = cfg
        .artifact_roots
        .iter()
        .map(|root| root.join("artifacts/llama-cpp").join(f.dir()).join("bin").join(exe))
        .collect();
    // build-llama.sh points `<cache>/llama-cpp/<flavour>` at the build it
    // installed last (its directory is keyed by the cmake options' hash).
    candidates.push(cfg.cache_dir.join("llama-cpp").join(f.dir()).join("bin").join(exe));
    match candidates.iter().find(|c| is_executable(c)) {
        Some(c) => Ok(c.clone()),
        None => Err(candidates.iter().map(|c| c.display().to_string()).collect()),
    }
}

/// Whether `p` is a file this process may execute.
pub(crate) fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// The model part of every llama-server argv: `-m`, `--alias` (answers name
/// the model by its catalog id, not its path), `--mmproj` when the model
/// has a projector, `-c` when the window was decided, and `--swa-full` for
/// a sliding-window model (`law::kv_keep`: without it a restored
/// conversation is re-read whole; with it the KV is the law's formula).
pub fn model_args(plan: &super::SpawnPlan) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "-m".into(),
        plan.entry.path.clone().into(),
        "--alias".into(),
        plan.entry.id.clone().into(),
    ];
    if let Some(mmproj) = &plan.entry.mmproj {
        a.push("--mmproj".into());
        a.push(mmproj.clone().into());
    }
    if let Some(ctx) = plan.window.ctx() {
        a.push("-c".into());
        a.push(ctx.to_string().into());
    }
    // The slots over one KV pool (`law::slots`): the pool is the window,
    // as at one slot, and each slot may use all of it; the warden decides
    // before the pool fills.
    a.push("-np".into());
    a.push(plan.slots.max(1).to_string().into());
    if plan.slots > 1 {
        a.push("--kv-unified".into());
    }
    a.push("--threads-http".into());
    a.push(child_http_threads(plan.slots).to_string().into());
    // The model's settings' own arguments, last (never a flag the warden
    // owns: `config::file::refused`).
    a.extend(plan.extra_args.iter().map(OsString::from));
    if plan.swa == crate::law::kv::SwaCache::Full && plan.facts.as_deref().is_some_and(crate::law::kv_keep::swa_full) {
        a.push("--swa-full".into());
    }
    if plan.facts.as_deref().is_some_and(crate::gguf::ModelFacts::is_embedding) {
        // llama-server answers /v1/embeddings only with --embedding (its
        // pooling is the header's). An encoder reads each input in one
        // micro-batch (a non-causal model cannot split it), so the batch
        // holds the whole window: an input up to the window fits.
        a.push("--embedding".into());
        if let Some(ctx) = plan.window.ctx() {
            for f in ["-b", "-ub"] {
                a.push(f.into());
                a.push(ctx.to_string().into());
            }
        }
    }
    a
}

/// The engine's argv plus the fixed flags, and the environment with the key.
pub fn spawn_spec(
    server: &Path,
    mut engine_args: Vec<OsString>,
    port: u16,
    key: &ApiKey,
    mut env: Vec<(OsString, OsString)>,
) -> SpawnSpec {
    for flag in [
        "--no-slots",
        "--no-webui",
        "--cache-ram",
        "0",
        "--no-cache-idle-slots",
    ] {
        engine_args.push(flag.into());
    }
    for flag in ["--metrics", "--host", "127.0.0.1", "--port"] {
        engine_args.push(flag.into());
    }
    engine_args.push(port.to_string().into());
    env.push(("LLAMA_API_KEY".into(), key.expose().into()));
    SpawnSpec {
        program: server.to_path_buf(),
        args: engine_args,
        env,
        label: "llama-server",
        secret: Some(key.clone()),
    }
}

/// How llama-server reads a generation's body: its bound in the route's
/// own field (`Route::bound_field`), and `repetition_penalty` (the Hugging
/// Face name many clients send) as llama.cpp's `repeat_penalty`, unless
/// that is sent too.
pub fn wire(route: crate::law::route::Route) -> crate::messages::body::Wire {
    crate::messages::body::Wire {
        bound_field: route.bound_field(),
        renames: &[("repetition_penalty", "repeat_penalty")],
        model: None,
    }
}

/// The readiness ping: an empty raw completion (no chat template, no
/// token). `/health` answering 200 already means the model and its context
/// are loaded; the ping proves what is left: the server on the port is ours
/// (it needs our key) and its task loop answers. A one-token ping cost a
/// forward pass (15-20 ms measured) on every cold load; a chat ping, with
/// SmolLM2's template, 31 prompt tokens (~250 ms). The first turn's own
/// request is the first inference.
pub fn ping(embedding: bool) -> crate::child::ready::Ping {
    if embedding {
        // An embedding model computes no logits: a completion would fail
        // ("the current context does not logits computation"), so its ping
        // is one embedding.
        return crate::child::ready::Ping {
            path: "/v1/embeddings",
            body: Bytes::from_static(br#"{"input":"ping"}"#),
        };
    }
    crate::child::ready::Ping {
        path: "/completion",
        body: Bytes::from_static(br#"{"prompt":"","n_predict":0,"stream":false}"#),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetition_penalty_is_translated_unless_repeat_penalty_is_set() {
        use crate::law::route::Route;
        use crate::messages::body::{ChildTurn, TurnBody};
        let rows = [
            // why: the HF name becomes llama.cpp's
            (
                serde_json::json!({"repetition_penalty": 1.1}),
                serde_json::json!({"repeat_penalty": 1.1}),
            ),
            // why: an explicit repeat_penalty wins, the HF name is dropped
            (
                serde_json::json!({"repetition_penalty": 1.1, "repeat_penalty": 1.3}),
                serde_json::json!({"repeat_penalty": 1.3}),
            ),
            // why: nothing to translate
            (serde_json::json!({"top_p": 0.9}), serde_json::json!({"top_p": 0.9})),
        ];
        let wire = wire(Route::Chat);
        for (i, (input, mut want)) in rows.into_iter().enumerate() {
            let body = TurnBody::new(input.as_object().unwrap().clone());
            let turn = ChildTurn {
                wire: &wire,
                bound: 8,
                stream: false,
                slot: None,
            };
            let sent: serde_json::Value = serde_json::from_slice(&body.to_child(Some(turn))).unwrap();
            want["n_predict"] = 8.into();
            want["stream"] = false.into();
            assert_eq!(sent, want, "row {i}");
        }
    }

    /// A sliding-window model's child gets `--swa-full`, no other does.
    #[test]
    fn swa_full_only_for_sliding_models() {
        use crate::gguf::ModelFacts;
        use crate::law::kv::tests::{gemma3, smollm2};
        let plan = |facts: Option<ModelFacts>| {
            super::super::SpawnPlan::for_tests(facts, crate::engines::plan::EnginePlan::Cpu { rpc: None })
        };
        let has = |facts| model_args(&plan(facts)).iter().any(|a| a == "--swa-full");
        let mamba = ModelFacts {
            architecture: "mamba".into(),
            ..smollm2()
        };
        let rows = [
            // why: a restored sliding cache is only reused when it is full-size
            (Some(gemma3()), true),
            // why: full attention needs nothing
            (Some(smollm2()), false),
            // why: not kept, so nothing to pay for
            (Some(mamba), false),
            // why: unknown facts: llama-server's default
            (None, false),
        ];
        for (i, (facts, want)) in rows.into_iter().enumerate() {
            assert_eq!(has(facts), want, "row {i}");
        }
    }

    #[test]
    fn fixed_flags_follow_the_engine_argv_and_the_key_is_only_in_env() {
        let key = ApiKey::mint();
        let spec = spawn_spec(
            Path::new("/x/llama-server"),
            vec!["-ngl".into(), "0".into()],
            27201,
            &key,
            vec![],
        );
        let args: Vec<String> = spec.args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            [
                "-ngl",
                "0",
                "--no-slots",
                "--no-webui",
                "--cache-ram",
                "0",
                "--no-cache-idle-slots",
                "--metrics",
                "--host",
                "127.0.0.1",
                "--port",
                "27201"
            ]
        );
        assert!(!args.iter().any(|a| a.contains(key.expose())));
        assert!(spec.env.iter().any(|(k, v)| k == "LLAMA_API_KEY" && v == key.expose()));
        assert!(!format!("{spec:?}").contains(key.expose()));
    }
}
