//! What differs per backend: argv, environment, ports, the window plan, the
//! request adaptation and the server properties read after readiness. The
//! engine actor holds one `Backend` and never matches on the kind itself.
//!
//! | engine | child | ports | window |
//! |---|---|---|---|
//! | CPU | `llama-server -ngl 0` | 27200-27299 | `law::window::cpu` |
//! | CUDA | `llama-server -ngl -1 -fitt 1024` | 27200-27299 | `law::window::cuda` |
//! | MLX | `python mlx_runner.py` (mlx_vlm.server) | 27300-27399 | trained, memory bound by PATCH |

pub mod cpu;
pub mod env;
pub mod llama;

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::catalog::{ModelEntry, ModelFormat};
use crate::child::client::ChildClient;
use crate::child::key::ApiKey;
use crate::child::process::SpawnSpec;
use crate::config::WardenConfig;
use crate::gguf::ModelFacts;
use crate::law::window::{self, ModelShape, Window};
use crate::sensors::ram::{self, RamTotal};
use crate::status::EngineKind;

pub use cpu::CpuEngine;

/// Everything decided about one spawn before it happens.
#[derive(Debug, Clone)]
pub struct SpawnPlan {
    /// The model.
    pub entry: Arc<ModelEntry>,
    /// Its header facts, when readable.
    pub facts: Option<Arc<ModelFacts>>,
    /// The law's view of it, when the facts were read.
    pub shape: Option<ModelShape>,
    /// The window chosen.
    pub window: Window,
    /// The RAM total the window was sized against (CPU).
    pub ram: Option<RamTotal>,
    /// The brake's cap folded into the window, when there was one.
    pub cap: Option<u32>,
}

/// The engine in use.
#[derive(Debug, Clone)]
pub enum Backend {
    /// llama-server on the CPU.
    Cpu(CpuEngine),
}

/// Bound of the `/props` read after readiness.
const PROPS_TIMEOUT: Duration = Duration::from_secs(5);

impl Backend {
    /// The engine family.
    pub fn kind(&self) -> EngineKind {
        match self {
            Self::Cpu(_) => EngineKind::Cpu,
        }
    }

    /// The child's port pool.
    pub fn ports(&self) -> RangeInclusive<u16> {
        match self {
            Self::Cpu(_) => llama::LLAMA_PORTS,
        }
    }

    /// Whether the memory brake can act on this engine's child (the CPU
    /// engine's RAM brake; CUDA's spill brake and MLX's release brake are
    /// their engines' own).
    pub fn brake_capable(&self) -> bool {
        match self {
            Self::Cpu(_) => true,
        }
    }

    /// Whether this engine runs models of `format`.
    pub fn accepts(&self, format: ModelFormat) -> bool {
        match self {
            Self::Cpu(_) => format == ModelFormat::Gguf,
        }
    }

    /// Decides the window (and anything else) for a spawn of `entry`.
    pub fn plan(
        &self,
        cfg: &WardenConfig,
        entry: Arc<ModelEntry>,
        facts: Option<Arc<ModelFacts>>,
        cap: Option<u32>,
    ) -> SpawnPlan {
        let mmproj_bytes = entry
            .mmproj
            .as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len());
        let shape = facts.as_deref().map(|f| window::shape_of(f, mmproj_bytes));
        match self {
            Self::Cpu(_) => {
                let ram = ram::ram_total(cfg.ram_override_bytes);
                let window = match (&shape, cfg.ctx_pin) {
                    (_, Some(pin)) => Window::Pinned { ctx: pin },
                    (Some(s), None) => window::cpu(s, ram.bytes, cap, None),
                    (None, None) => Window::Unsized,
                };
                SpawnPlan {
                    entry,
                    facts,
                    shape,
                    window,
                    ram: Some(ram),
                    cap,
                }
            }
        }
    }

    /// The process to start for `plan` on `port` with `key`.
    pub fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        match self {
            Self::Cpu(e) => llama::spawn_spec(&e.server, e.argv(plan), port, key, env::inherited()),
        }
    }

    /// Adapts an OpenAI request body for this engine's child.
    pub fn adapt_request(&self, body: &mut serde_json::Map<String, serde_json::Value>, _entry: &ModelEntry) {
        match self {
            Self::Cpu(_) => llama::adapt_request(body),
        }
    }

    /// The readiness ping's request body.
    pub fn ping_body(&self, _entry: &ModelEntry) -> Bytes {
        match self {
            Self::Cpu(_) => llama::ping_body(),
        }
    }

    /// The allocated window as the child reports it (`/props` n_ctx).
    pub async fn read_window(&self, client: &ChildClient) -> Result<Option<u32>, String> {
        match self {
            Self::Cpu(_) => {
                let props = client
                    .get_json("/props", PROPS_TIMEOUT)
                    .await
                    .map_err(|e| crate::child::ready::transport(&e))?;
                Ok(props
                    .pointer("/default_generation_settings/n_ctx")
                    .and_then(|v| v.as_u64())
                    .map(|n| n.min(u32::MAX as u64) as u32))
            }
        }
    }
}

/// Builds the backend of the selected engine, finding its child program.
pub fn build(cfg: &WardenConfig, kind: EngineKind) -> Result<Backend, crate::error::EngineError> {
    match kind {
        EngineKind::Cpu | EngineKind::Cuda | EngineKind::Mlx => Ok(Backend::Cpu(CpuEngine {
            server: llama::find_llama_server(cfg, llama::Flavour::Cpu)?,
            verbosity: cfg.child_verbosity,
        })),
    }
}
