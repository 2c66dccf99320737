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
pub mod mlx;

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
pub use mlx::{MlxEngine, MlxFacts};

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
    /// An MLX model's facts (`config.json`).
    pub mlx: Option<MlxFacts>,
}

/// The engine in use.
#[derive(Debug, Clone)]
pub enum Backend {
    /// llama-server on the CPU.
    Cpu(CpuEngine),
    /// mlx_vlm.server.
    Mlx(MlxEngine),
}

/// Which memory brake an engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrakeKind {
    /// `law::brake::llama_step` over RAM: respawn in place (CPU).
    LlamaRam,
    /// `law::mlx::mlx_step`: release, and the memory bound (MLX).
    Mlx,
}

/// Bound of the `/props` read after readiness.
const PROPS_TIMEOUT: Duration = Duration::from_secs(5);

impl Backend {
    /// The engine family.
    pub fn kind(&self) -> EngineKind {
        match self {
            Self::Cpu(_) => EngineKind::Cpu,
            Self::Mlx(_) => EngineKind::Mlx,
        }
    }

    /// The child's port pool.
    pub fn ports(&self) -> RangeInclusive<u16> {
        match self {
            Self::Cpu(_) => llama::LLAMA_PORTS,
            Self::Mlx(_) => mlx::MLX_PORTS,
        }
    }

    /// Whether the memory brake can act on this engine's child (the CPU
    /// engine's RAM brake; CUDA's spill brake and MLX's release brake are
    /// their engines' own).
    pub fn brake_capable(&self) -> bool {
        self.brake_kind().is_some()
    }

    /// The memory brake this engine runs.
    pub fn brake_kind(&self) -> Option<BrakeKind> {
        match self {
            Self::Cpu(_) => Some(BrakeKind::LlamaRam),
            Self::Mlx(_) => Some(BrakeKind::Mlx),
        }
    }

    /// Whether this engine runs models of `format`.
    pub fn accepts(&self, format: ModelFormat) -> bool {
        match self {
            Self::Cpu(_) => format == ModelFormat::Gguf,
            Self::Mlx(_) => format == ModelFormat::Mlx,
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
                    mlx: None,
                }
            }
            // MLX runs the trained window; memory bounds it after the load
            // (the bound needs the child's measured base footprint).
            Self::Mlx(_) => SpawnPlan {
                mlx: mlx::read_facts(&entry.path),
                entry,
                facts,
                shape,
                window: Window::Unsized,
                ram: Some(ram::ram_total(cfg.ram_override_bytes)),
                cap,
            },
        }
    }

    /// The process to start for `plan` on `port` with `key`.
    pub fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        match self {
            Self::Cpu(e) => llama::spawn_spec(&e.server, e.argv(plan), port, key, env::inherited()),
            Self::Mlx(e) => e.spawn_spec(plan, port, key),
        }
    }

    /// Adapts an OpenAI request body for this engine's child.
    pub fn adapt_request(&self, body: &mut serde_json::Map<String, serde_json::Value>, entry: &ModelEntry) {
        match self {
            Self::Cpu(_) => llama::adapt_request(body),
            Self::Mlx(_) => mlx::adapt_request(body, &entry.path),
        }
    }

    /// The readiness ping's request body.
    pub fn ping_body(&self, entry: &ModelEntry) -> Bytes {
        match self {
            Self::Cpu(_) => llama::ping_body(),
            Self::Mlx(_) => mlx::ping_body(&entry.path),
        }
    }

    /// The allocated window as the child reports it (`/props` n_ctx; an MLX
    /// child runs its trained window until memory bounds it).
    pub async fn read_window(&self, client: &ChildClient, plan: &SpawnPlan) -> Result<Option<u32>, String> {
        match self {
            Self::Mlx(_) => Ok(plan.mlx.map(|f| f.trained)),
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
        EngineKind::Mlx => Ok(Backend::Mlx(MlxEngine::build(cfg)?)),
        EngineKind::Cpu | EngineKind::Cuda => Ok(Backend::Cpu(CpuEngine {
            server: llama::find_llama_server(cfg, llama::Flavour::Cpu)?,
            verbosity: cfg.child_verbosity,
        })),
    }
}
