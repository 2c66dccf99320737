//! The MLX engine: `mlx_vlm.server` 0.7.x started through the project's
//! runner module (`scripts/mlx_runner.py`, embedded in the binary and written
//! to the cache), from the Python environment `build-llama.sh mlx` makes.
//!
//! What the child is told, and why:
//! - `--model DIR --host 127.0.0.1 --port N` (27300-27399); the same `DIR`
//!   string is every request's `model` (mlx-vlm unloads its model for any
//!   other name);
//! - `MLX_VLM_SERVER_API_KEY`: the per-spawn key, in the environment only;
//! - `MLX_VLM_MAX_NUM_SEQS=1`: one sequence, so a barrier request proves a
//!   cancelled one has left the batch (the spec's prefix-cache reasoning);
//! - `APC_ENABLED=1` with `APC_NUM_BLOCKS` sized on the trained window (the
//!   pool fills lazily; mlx-vlm's own default without one) and
//!   `APC_DISK_ENABLED=0`: the prefix cache holds one
//!   conversation in memory, owned by `PrefixCacheActor`; mlx-vlm's default
//!   20 GB disk tier would outlive every reset;
//! - `MLX_VLM_TOKEN_QUEUE_TIMEOUT`: the child outwaits the warden's
//!   watchdog (`law::mlx::token_wait`; 3660 s without a trained window);
//! - `HF_HUB_OFFLINE=1`, `MLX_VLM_CACHE_HOME` in the warden's cache.
//!
//! The window: the trained window (`max_position_embeddings`; a model
//! without one has the memory ceiling alone), bounded by memory through `PATCH /v1/settings {"max_kv_size": N}` (see
//! `actors::engine::mlx_bound`).

pub mod live;
pub mod prefix;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use super::SpawnPlan;
use crate::child::client::ChildClient;
use crate::secret::ApiKey;
use crate::child::process::SpawnSpec;
use crate::config::WardenConfig;
use crate::error::EngineError;

/// The port pool of MLX children.
pub const MLX_PORTS: std::ops::RangeInclusive<u16> = 27300..=27399;
/// The pinned mlx-vlm, which names the environment build-llama.sh makes.
pub const MLX_VLM_VERSION: &str = "0.7.10";
/// The runner module, embedded so an installed binary needs no source tree.
const RUNNER_PY: &str = include_str!("../../scripts/mlx_runner.py");
/// mlx-vlm's APC block size (tokens), for sizing the pool.
const APC_BLOCK_TOKENS: u64 = 16;
/// Bound of a settings call (the spec's 2 s).
pub const SETTINGS_TIMEOUT: Duration = Duration::from_secs(2);

/// The MLX engine's own state.
#[derive(Debug, Clone)]
pub struct MlxEngine {
    /// The environment's Python.
    pub python: PathBuf,
    /// The runner module on disk.
    pub runner: PathBuf,
    /// `MLX_VLM_CACHE_HOME`.
    pub cache_home: PathBuf,
}

/// What the warden reads from an MLX model directory's `config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MlxFacts {
    /// `max_position_embeddings`, when `config.json` names it (`None`: the
    /// window is bounded by memory alone, `law::mlx::memory_bound`).
    pub trained: Option<u32>,
    /// KV bytes per token: layers x KV heads x head dim x 2 (K and V) x the
    /// element size of the model's dtype (mlx-vlm keeps the cache in it).
    pub kv_per_token: u64,
    /// The safetensors on disk.
    pub weights_bytes: u64,
}

impl MlxEngine {
    /// The engine for `cfg`: its Python (`WARDEN_MLX_PYTHON`, else the one
    /// build-llama.sh made), and the runner written into the cache.
    pub fn build(cfg: &WardenConfig) -> Result<Self, EngineError> {
        let python = cfg
            .mlx_python
            .clone()
            .unwrap_or_else(|| cfg.cache_dir.join(format!("mlx-venv-{MLX_VLM_VERSION}/bin/python")));
        if !python.is_file() {
            return Err(EngineError::MlxPythonMissing);
        }
        let runner = cfg.cache_dir.join("mlx_runner.py");
        // Rewritten only when it differs, so a running child's file is never
        // touched needlessly.
        if std::fs::read_to_string(&runner).ok().as_deref() != Some(RUNNER_PY) {
            std::fs::create_dir_all(&cfg.cache_dir)
                .and_then(|()| std::fs::write(&runner, RUNNER_PY))
                .map_err(|source| EngineError::Spawn {
                    program: runner.clone(),
                    source,
                })?;
        }
        Ok(Self {
            python,
            runner,
            cache_home: cfg.cache_dir.join("mlx-cache"),
        })
    }

    /// The process for `plan` on `port`.
    pub fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        let model = model_arg(&plan.entry.path);
        let args: Vec<OsString> = vec![
            self.runner.clone().into(),
            "--model".into(),
            model.into(),
            "--host".into(),
            "127.0.0.1".into(),
            "--port".into(),
            port.to_string().into(),
        ];
        let trained = plan.mlx().and_then(|f| f.trained);
        let mut env = super::env::inherited();
        if let Some(t) = trained {
            let blocks = u64::from(t).div_ceil(APC_BLOCK_TOKENS);
            env.push(("APC_NUM_BLOCKS".into(), blocks.to_string().into()));
        }
        if let Some(wait) = plan.mlx_token_wait() {
            env.push(("MLX_VLM_TOKEN_QUEUE_TIMEOUT".into(), wait.as_secs().to_string().into()));
        }
        for (k, v) in [
            ("MLX_VLM_SERVER_API_KEY", key.expose().to_string()),
            ("MLX_VLM_MAX_NUM_SEQS", "1".into()),
            ("APC_ENABLED", "1".into()),
            ("APC_DISK_ENABLED", "0".into()),
            ("HF_HUB_OFFLINE", "1".into()),
            ("PYTHONUNBUFFERED", "1".into()),
            ("MLX_VLM_CACHE_HOME", self.cache_home.display().to_string()),
        ] {
            env.push((k.into(), v.into()));
        }
        SpawnSpec {
            program: self.python.clone(),
            args,
            env,
            label: "mlx_vlm.server",
            secret: Some(key.clone()),
        }
    }
}

/// The `--model` string, which every request must repeat exactly.
pub fn model_arg(dir: &Path) -> String {
    dir.display().to_string()
}

/// How mlx_vlm.server reads a generation's body: the `model` field it
/// requires (exactly the `--model` string), and the bound in `max_tokens`,
/// the one field it reads one from, whatever the route.
pub fn wire(_route: crate::law::route::Route, dir: &Path) -> crate::messages::body::Wire {
    crate::messages::body::Wire {
        bound_field: "max_tokens",
        renames: &[],
        model: Some(model_arg(dir)),
    }
}

/// The readiness ping: one token, not streamed (mlx-vlm clears its buffer
/// cache after a non-streamed request).
pub fn ping(dir: &Path) -> crate::child::ready::Ping {
    crate::child::ready::Ping {
        path: "/v1/chat/completions",
        body: ping_body(dir),
    }
}

/// The ping's chat body.
fn ping_body(dir: &Path) -> Bytes {
    let v = serde_json::json!({
        "model": model_arg(dir),
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "stream": false,
    });
    Bytes::from(v.to_string())
}

/// Reads `config.json` of a model directory.
pub fn read_facts(dir: &Path) -> Option<MlxFacts> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).ok()?).ok()?;
    let v = v.get("text_config").cloned().unwrap_or(v);
    let num = |k: &str| v.get(k).and_then(|x| x.as_u64());
    let layers = num("num_hidden_layers")?;
    let heads = num("num_attention_heads")?;
    let kv_heads = num("num_key_value_heads").unwrap_or(heads);
    let head_dim = num("head_dim").or_else(|| Some(num("hidden_size")? / heads.max(1)))?;
    let elem = match v.get("torch_dtype").and_then(|d| d.as_str()) {
        Some("float32") => 4,
        _ => 2,
    };
    let weights_bytes = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .sum();
    Some(MlxFacts {
        trained: num("max_position_embeddings").map(|n| n.min(u32::MAX as u64) as u32),
        kv_per_token: layers * kv_heads * head_dim * 2 * elem,
        weights_bytes,
    })
}

/// What a settings call established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundAnswer {
    /// The child confirmed it enforces this `max_kv_size`.
    Applied(u32),
    /// The child enforces another value (read back).
    Enforces(u32),
}

/// Bound of a prefix-cache reset (the spec's 5 s).
pub const RESET_TIMEOUT: Duration = Duration::from_secs(5);

/// `POST /v1/cache/reset`; `{"enabled": false}` (no cache) counts as done.
pub async fn reset_cache(client: &ChildClient) -> Result<(), String> {
    let r = client
        .request(reqwest::Method::POST, "/v1/cache/reset")
        .timeout(RESET_TIMEOUT)
        .send()
        .await
        .map_err(|e| crate::child::ready::transport(&e))?;
    if !r.status().is_success() {
        return Err(format!("HTTP {}", r.status().as_u16()));
    }
    let v: serde_json::Value = r.json().await.map_err(|_| "an unreadable answer".to_string())?;
    let ok =
        v.get("enabled") == Some(&serde_json::Value::Bool(false)) || v.get("status").is_some_and(|s| s == "cleared");
    if ok { Ok(()) } else { Err("an unexpected answer".into()) }
}

/// A one-token non-streamed request: the barrier's shape (its completion
/// proves the batch is empty), and the release's (mlx-vlm clears its buffer
/// cache after a non-streamed request).
pub async fn one_token(client: &ChildClient, model: &str, timeout: Duration) -> Result<(), String> {
    let body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "stream": false,
    });
    let r = client
        .request(reqwest::Method::POST, "/v1/chat/completions")
        .timeout(timeout)
        .json(&body)
        .send()
        .await
        .map_err(|e| crate::child::ready::transport(&e))?;
    let status = r.status();
    let _ = r.bytes().await;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("HTTP {}", status.as_u16()))
    }
}

/// Sends `max_kv_size = bound`; an unconfirmed answer is settled by one
/// `GET /v1/settings` read-back. `Err` names the failure (an HTTP status or
/// an error's kind), never the key or a body.
pub async fn apply_bound(client: &ChildClient, bound: u32) -> Result<BoundAnswer, String> {
    let sent = client
        .request(reqwest::Method::PATCH, "/v1/settings")
        .timeout(SETTINGS_TIMEOUT)
        .json(&serde_json::json!({ "max_kv_size": bound }))
        .send()
        .await;
    let failure = match sent {
        Ok(r) if r.status().is_success() => match r.json::<serde_json::Value>().await {
            Ok(v) if v.pointer("/applied/max_kv_size").and_then(|x| x.as_u64()) == Some(bound as u64) => {
                return Ok(BoundAnswer::Applied(bound));
            }
            Ok(_) => "an unexpected answer".to_string(),
            Err(_) => "an unreadable answer".to_string(),
        },
        Ok(r) => format!("HTTP {}", r.status().as_u16()),
        Err(e) => crate::child::ready::transport(&e),
    };
    // The change may have applied anyway (a timeout can fire after it): the
    // child's live value settles it.
    let live = client
        .get_json("/v1/settings", SETTINGS_TIMEOUT)
        .await
        .map_err(|e| format!("{failure}; read-back: {}", crate::child::ready::transport(&e)))?;
    match live.pointer("/current/max_kv_size").and_then(|x| x.as_u64()) {
        Some(n) => Ok(BoundAnswer::Enforces(n.min(u32::MAX as u64) as u32)),
        None => Err(format!("{failure}; read-back without max_kv_size")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_from_config_json() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"num_hidden_layers":30,"num_attention_heads":9,"num_key_value_heads":3,"head_dim":64,"hidden_size":576,"max_position_embeddings":8192,"torch_dtype":"float32"}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("model.safetensors"), vec![0u8; 1000]).unwrap();
        let f = read_facts(dir.path()).unwrap();
        // why: 30 layers x 3 KV heads x 64 x 2 x 4 B (float32)
        assert_eq!(
            f,
            MlxFacts {
                trained: Some(8192),
                kv_per_token: 46_080,
                weights_bytes: 1000
            }
        );
        // why: head_dim defaults to hidden / heads; bf16 is 2 B;
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"num_hidden_layers":2,"num_attention_heads":4,"hidden_size":64,"torch_dtype":"bfloat16"}"#,
        )
        .unwrap();
        let f = read_facts(dir.path()).unwrap();
        // why: no max_position_embeddings: no trained window (memory bounds it)
        assert_eq!((f.trained, f.kv_per_token), (None, 2 * 4 * 16 * 2 * 2));
    }

    #[test]
    fn requests_name_the_model_exactly() {
        use crate::messages::body::{ChildTurn, TurnBody};
        let mut fields = serde_json::Map::new();
        fields.insert("model".into(), "whatever".into());
        fields.insert("n_predict".into(), 40.into());
        let wire = wire(crate::law::route::Route::Chat, Path::new("/m/SmolLM2"));
        let turn = ChildTurn {
            wire: &wire,
            bound: 12,
            stream: false,
            slot: None,
        };
        let sent = TurnBody::new(fields).to_child(Some(turn));
        let body: serde_json::Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(body["model"], "/m/SmolLM2");
        // why: mlx-vlm reads its bound from max_tokens only
        assert_eq!(
            (body.get("max_tokens"), body.get("n_predict")),
            (Some(&12.into()), None)
        );
    }
}

/// What the MLX engine keeps about its live child.
#[derive(Debug, Default)]
pub struct MlxChild {
    /// The footprint measured right after load.
    pub base_bytes: Option<u64>,
    /// The memory ceiling (tokens).
    pub ceiling: Option<u32>,
    /// The bound the child enforces, when memory bounds it.
    pub memory_bound: Option<u32>,
    /// What its prefix cache holds (`law::prefix::plan_reset`).
    pub cache: crate::law::prefix::ChildCache,
    /// The size of the last turn's request (the brake's useful-shrink
    /// test): measured, the tokens the child's `timings` counted (cached,
    /// read and generated), else the in-flight estimate.
    pub last_request_tokens: u32,
    /// The in-flight estimate of the request now with the child: its body
    /// bytes / 4 plus its own bound (what an abandoned or uncounted turn
    /// leaves as its size).
    pub in_flight_tokens: u32,
}
