//! What a real test needs and may lack: the environment's configuration,
//! the real llama-server build, the real models, the client Python; each
//! missing one is `skip_or_fail` (a failure under `WARDEN_REQUIRE_REAL=1`).
use std::path::PathBuf;

use llm_warden::config::WardenConfig;

/// The warden's configuration from this environment, which says where the
/// real builds and models are; `None` (after `skip_or_fail`, naming the bad
/// variable) when the environment is not a valid configuration.
pub fn env_config() -> Option<WardenConfig> {
    match WardenConfig::from_env() {
        Ok(cfg) => Some(cfg),
        Err(e) => skip_or_fail(&format!("the environment is not a valid warden configuration: {e}")),
    }
}

/// The real llama-server build-llama.sh made, or `None` (the test then says
/// so and passes, unless `WARDEN_REQUIRE_REAL=1`, which test.sh sets).
pub fn real_llama_server() -> Option<PathBuf> {
    let cfg = env_config()?;
    match llm_warden::engines::llama::find_llama_server(&cfg, llm_warden::engines::llama::Flavour::Cpu) {
        Ok(p) => Some(p),
        Err(e) => skip_or_fail(&e.to_string()),
    }
}

/// A real model from the build cache.
pub fn real_model(file: &str) -> Option<PathBuf> {
    let cfg = env_config()?;
    let p = cfg.models_dir().join(file);
    if p.is_file() {
        Some(p)
    } else {
        skip_or_fail(&format!("{} is missing (run ./build-llama.sh)", p.display()))
    }
}

/// A test that needs something real (an engine, a model, a client) and
/// lacks it: skipped with a note, or failed under `WARDEN_REQUIRE_REAL=1`
/// (what `./test.sh` sets, so CI never passes by skipping).
pub fn skip_or_fail<T>(why: &str) -> Option<T> {
    if std::env::var("WARDEN_REQUIRE_REAL").is_ok_and(|v| v == "1") {
        panic!("a real test cannot run: {why}");
    }
    eprintln!("SKIPPED (real test): {why}");
    None
}

/// A test that needs an NVIDIA GPU (or what only a GPU run has: the CUDA
/// build, the generated models) and lacks it: skipped with a note, or
/// failed under `WARDEN_REQUIRE_GPU=1` (what `scripts/gpu-proof.sh` sets).
/// Not under `WARDEN_REQUIRE_REAL=1`: this project's CI machines have no GPU,
/// and `./test.sh` must pass there.
pub fn skip_or_fail_gpu<T>(why: &str) -> Option<T> {
    if std::env::var("WARDEN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        panic!("a GPU test cannot run: {why}");
    }
    eprintln!("SKIPPED (GPU test): {why}");
    None
}

/// The SmolLM2 file name.
pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The Gemma file name.
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// The Python of the client environment build-llama.sh makes (`clients`
/// flavour: the OpenAI, Anthropic and Ollama clients, prometheus-client,
/// gguf-py).
pub fn client_python() -> Option<PathBuf> {
    let cfg = env_config()?;
    let py = cfg.cache_dir.join("py-clients/bin/python");
    if py.is_file() {
        Some(py)
    } else {
        skip_or_fail(&format!("{} missing (run ./build-llama.sh clients)", py.display()))
    }
}

/// `base` under forced critical pressure with 0.65 GiB of RAM standing in
/// for the machine's: SmolLM2 loads memory-bound at 6,400 tokens and the
/// brake shrinks it to the 4,096 floor at the first turn's end.
pub fn forced_critical(base: WardenConfig) -> WardenConfig {
    WardenConfig {
        ram_override_bytes: Some((0.65 * (1u64 << 30) as f64) as u64),
        force_pressure: Some(llm_warden::config::ForcedPressure::Critical),
        ..base
    }
}
