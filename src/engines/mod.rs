//! What differs per backend: argv, environment, ports, the window plan, the
//! request adaptation and the server properties read after readiness. The
//! engine actor holds one `Backend` and never matches on the kind itself.
//!
//! | engine | child | ports | window |
//! |---|---|---|---|
//! | CPU | `llama-server -ngl 0` | 27200-27299 | `law::window::cpu` |
//! | CUDA | `llama-server -ngl -1 -fitt 1024` | 27200-27299 | `law::window::cuda` |
//! | MLX | `python mlx_runner.py` (mlx_vlm.server) | 27300-27399 | trained, memory bound by PATCH |
//!
//! `contract_tests` asserts the table's fixed facts.
//! `preflight` decides which of them runs here (selection and the CUDA
//! pre-flight).
//! `plan` plans every spawn: it gathers the readings `law::plan` decides
//! from (loads, `inspect` and `/v1/models` alike).

#[cfg(test)]
mod contract_tests;
pub mod cpu;
pub mod cuda;
pub mod env;
pub(crate) mod hooks;
pub mod live;
pub mod llama;
pub mod mlx;
pub mod plan;
pub mod preflight;

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::{ModelEntry, ModelFormat};
use crate::child::client::ChildClient;
use crate::secret::ApiKey;
use crate::child::process::SpawnSpec;
use crate::config::WardenConfig;
use crate::gguf::ModelFacts;
use crate::law::window::Window;
use crate::status::EngineKind;

pub use cpu::CpuEngine;
pub use cuda::CudaEngine;
#[cfg(feature = "testing")]
pub use cuda::GpuSource;
pub(crate) use hooks::EngineHooks;
pub use mlx::MlxEngine;
pub use plan::{EnginePlan, Site, SpawnPlan};

/// The engine in use.
#[derive(Debug, Clone)]
pub enum Backend {
    /// llama-server on the CPU.
    Cpu(CpuEngine),
    /// mlx_vlm.server.
    Mlx(MlxEngine),
    /// llama-server on one NVIDIA GPU.
    Cuda(CudaEngine),
}

/// Bound of the `/props` read after readiness.
const PROPS_TIMEOUT: Duration = Duration::from_secs(5);

impl Backend {
    /// The engine family.
    pub fn kind(&self) -> EngineKind {
        match self {
            Self::Cpu(_) => EngineKind::Cpu,
            Self::Mlx(_) => EngineKind::Mlx,
            Self::Cuda(_) => EngineKind::Cuda,
        }
    }

    /// The child's port pool.
    pub fn ports(&self) -> RangeInclusive<u16> {
        match self {
            Self::Cpu(_) | Self::Cuda(_) => llama::LLAMA_PORTS,
            Self::Mlx(_) => mlx::MLX_PORTS,
        }
    }

    /// Whether this engine runs models of `format`.
    pub fn accepts(&self, format: ModelFormat) -> bool {
        match self {
            Self::Cpu(_) | Self::Cuda(_) => format == ModelFormat::Gguf,
            Self::Mlx(_) => format == ModelFormat::Mlx,
        }
    }

    /// Which law plans this engine's spawns, and where it reads its GPUs.
    pub fn site(&self) -> Site<'_> {
        hooks::on_engine!(self, e => EngineHooks::plan_site(e))
    }

    /// Decides the window (and anything else) for a spawn of `entry`: the
    /// readings now, then `law::plan` (`engines::plan`).
    pub fn plan(
        &self,
        cfg: &WardenConfig,
        entry: Arc<ModelEntry>,
        facts: Option<Arc<ModelFacts>>,
        cap: Option<u32>,
        beside: u64,
    ) -> SpawnPlan {
        plan::plan(self.site(), cfg, entry, facts, cap, beside)
    }

    /// The process to start for `plan` on `port` with `key`.
    pub fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        hooks::on_engine!(self, e => EngineHooks::spawn_spec(e, plan, port, key))
    }

    /// The plan of a brake respawn: the same model with `cap`. The CPU
    /// engine sizes again over the same RAM total; the CUDA engine folds the
    /// cap into the live child's static window (no new NVML reading) and
    /// places every layer (`-ngl -2`: under the spill brake the child must
    /// spill, not drop layers).
    pub fn respawn_plan(&self, cfg: &WardenConfig, old: &SpawnPlan, cap: u32) -> SpawnPlan {
        match self {
            Self::Cuda(_) => {
                let mut plan = old.clone();
                plan.cap = Some(cap);
                if let Some(c) = plan.cuda_mut() {
                    c.all_layers = true;
                    if let Some(w) = crate::law::plan::cuda_respawn_window(c.static_window, cap, cfg.ctx_pin_for(&old.entry.id)) {
                        plan.window = w;
                    }
                }
                plan
            }
            _ => self.plan(cfg, old.entry.clone(), old.facts.clone(), Some(cap), old.beside_bytes),
        }
    }

    /// A copy of a plan with the window set to `ctx` (the CUDA engine's one
    /// retry at the floor after an out-of-memory load).
    pub fn at_window(plan: &SpawnPlan, ctx: u32) -> SpawnPlan {
        let mut p = plan.clone();
        p.window = Window::Sized {
            ctx,
            memory_bound: false,
            budget_bytes: 0,
        };
        p
    }

    /// How this engine's child reads a generation's body on `route`.
    pub fn wire(&self, route: crate::law::route::Route, entry: &ModelEntry) -> crate::messages::body::Wire {
        hooks::on_engine!(self, e => EngineHooks::wire(e, route, entry))
    }

    /// The readiness ping.
    pub fn ping(&self, plan: &SpawnPlan) -> crate::child::ready::Ping {
        match self {
            Self::Cpu(_) | Self::Cuda(_) => llama::ping(plan.facts.as_deref().is_some_and(ModelFacts::is_embedding)),
            Self::Mlx(_) => mlx::ping(&plan.entry.path),
        }
    }

    /// The allocated window as the child reports it (`/props` n_ctx; an MLX
    /// child runs its trained window until memory bounds it, and one whose
    /// model names none has no window until the bound gives it one).
    pub async fn read_window(&self, client: &ChildClient, plan: &SpawnPlan) -> Result<Option<u32>, String> {
        match self {
            Self::Mlx(_) => Ok(plan.mlx().and_then(|f| f.trained)),
            Self::Cpu(_) | Self::Cuda(_) => {
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
        EngineKind::Cuda => {
            let server = llama::find_llama_server(cfg, llama::Flavour::Cuda)?;
            Ok(Backend::Cuda(CudaEngine {
                server,
                gpus: cuda::GpuSource::Nvml,
            }))
        }
        EngineKind::Cpu => Ok(Backend::Cpu(CpuEngine {
            server: llama::find_llama_server(cfg, llama::Flavour::Cpu)?,
            verbosity: cfg.child_verbosity,
            // Linked when the warden starts the workers' watch.
            workers: None,
        })),
    }
}
