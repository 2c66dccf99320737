//! The one trait of hooks every engine implements, and the one place that
//! dispatches on the engine: the core (`actors::engine`) calls these through
//! `Backend` and never matches on the kind. A hook gets plain values (the
//! plan, a `ChildView` lent for the call, the config) and returns a value or
//! a decision; the actor alone spawns, respawns, retires and unloads. Each
//! engine's home (`engines::cpu`, `engines::cuda`, `engines::mlx`, with the
//! llama.cpp engines' shared part in `engines::llama`) owns what differs.
//!
//! | hook | CPU | CUDA | MLX |
//! |---|---|---|---|
//! | `plan_site` | RAM | RAM, NVML | RAM, `config.json` |
//! | `spawn_spec` | llama-server `-ngl 0` (or the RPC split) | llama-server `-ngl -1 -fitt`, pinned GPU | `mlx_vlm.server` |
//! | `wire` | llama.cpp's names | llama.cpp's names | mlx-vlm's names, its model path |
//! | `after_load` | footprint check, or each device's share over workers | placement, device check, spill baseline | base footprint, memory bound |
//! | `brake_input` | RAM sensor, `llama_step` | its own spill gauge, `llama_step` | RAM sensor + footprint, `mlx_step` |
//! | `retry_at_floor` | never | a CUDA OOM at load, once at 4096 | never |

use crate::catalog::ModelEntry;
use crate::secret::ApiKey;
use crate::child::process::SpawnSpec;
use crate::config::WardenConfig;
use crate::law::brake::WindowFacts;
use crate::law::mlx::MlxFacts;
use crate::law::route::Route;
use crate::messages::body::Wire;

use super::live::{ChildState, ChildView};
use super::plan::Site;
use super::{Backend, CpuEngine, CudaEngine, MlxEngine, SpawnPlan};

/// What an engine read of its child right after it became ready.
#[derive(Debug)]
pub struct AfterLoad {
    /// The engine's state of the child.
    pub state: ChildState,
    /// The window the child enforces now, when the engine changed it (MLX's
    /// memory bound); `None` keeps the one read from the child.
    pub allocated: Option<u32>,
}

/// How a brake sample of a child is read and which law decides on it: the
/// engine's answer to "is this child sampled, and how". `None` from the
/// hook: never sampled (no window the warden sized, a partial CUDA
/// placement, an MLX child whose base footprint is unknown).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BrakeInput {
    /// The llama.cpp engines: `law::brake::llama_step` over `facts`.
    Llama {
        /// The law's view of the child's window.
        facts: WindowFacts,
        /// Where the level is read.
        gauge: Gauge,
    },
    /// mlx_vlm.server: `law::mlx::mlx_step`, against its base footprint.
    Mlx {
        /// The law's view of the child.
        facts: MlxFacts,
        /// Its footprint right after load.
        base_bytes: u64,
    },
}

/// Where a llama.cpp child's pressure level is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gauge {
    /// The machine's RAM sensor (and the RPC workers' own, when used).
    Sensor,
    /// The child's Shared GPU memory above its baseline (CUDA on a spill
    /// platform), `healthy` being the amount a sound child holds.
    Spill {
        /// Bytes of Shared GPU memory a healthy child of this window holds.
        healthy: u64,
    },
}

/// What an engine does at each moment of its child's life.
#[allow(async_fn_in_trait)] // crate-private; every caller awaits in place
pub(crate) trait EngineHooks {
    /// The plan's inputs: which readings `engines::plan::gather` takes for
    /// this engine (RAM; NVML for CUDA; `config.json` for MLX).
    fn plan_site(&self) -> Site<'_>;
    /// The process to start for `plan` on `port` with `key`.
    fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec;
    /// How this engine's child reads a generation's body on `route`: the
    /// field of its bound, the client's names it knows by others, the
    /// `model` it must be named (`TurnBody::to_child` writes them).
    fn wire(&self, route: Route, entry: &ModelEntry) -> Wire;
    /// Right after the child is ready, before the brake is seeded: what the
    /// engine reads of it. `respawn`: a brake respawn (its notes are INFO).
    async fn after_load(&self, child: ChildView<'_>, cfg: &WardenConfig, respawn: bool) -> AfterLoad;
    /// How a brake sample of this child is read and decided, or `None`.
    fn brake_input(&self, child: ChildView<'_>, state: &ChildState, cfg: &WardenConfig) -> Option<BrakeInput>;
    /// After a load of `plan` failed with `raw` in its output: the plan of
    /// the one retry the engine wants, or `None`.
    fn retry_at_floor(&self, plan: &SpawnPlan, raw: &str, cfg: &WardenConfig) -> Option<SpawnPlan>;
}

/// Calls `$f` on the backend's engine.
macro_rules! on_engine {
    ($backend:expr, $e:ident => $call:expr) => {
        match $backend {
            $crate::engines::Backend::Cpu($e) => $call,
            $crate::engines::Backend::Cuda($e) => $call,
            $crate::engines::Backend::Mlx($e) => $call,
        }
    };
}
pub(crate) use on_engine;

/// The hooks the core calls, on whichever engine runs.
impl Backend {
    /// The `after_load` hook.
    pub(crate) async fn after_load(&self, child: ChildView<'_>, cfg: &WardenConfig, respawn: bool) -> AfterLoad {
        on_engine!(self, e => e.after_load(child, cfg, respawn).await)
    }

    /// The `brake_input` hook.
    pub(crate) fn brake_input(
        &self,
        child: ChildView<'_>,
        state: &ChildState,
        cfg: &WardenConfig,
    ) -> Option<BrakeInput> {
        on_engine!(self, e => e.brake_input(child, state, cfg))
    }

    /// The `retry_at_floor` hook.
    pub(crate) fn retry_at_floor(&self, plan: &SpawnPlan, raw: &str, cfg: &WardenConfig) -> Option<SpawnPlan> {
        on_engine!(self, e => e.retry_at_floor(plan, raw, cfg))
    }

    /// The child saves and restores its KV in slot files (llama-server's
    /// `--slot-save-path`; mlx_vlm.server has none).
    pub fn slot_files(&self) -> bool {
        !matches!(self, Self::Mlx(_))
    }

    /// The child keeps a prefix cache one conversation owns at a time,
    /// with an owner outside the engine (`PrefixCacheActor`).
    pub fn prefix_cache(&self) -> bool {
        matches!(self, Self::Mlx(_))
    }

    /// The RPC workers' link (the CPU engine's, when configured).
    pub fn workers(&self) -> Option<&crate::engines::cpu::workers::WorkersLink> {
        match self {
            Self::Cpu(c) => c.workers.as_ref(),
            _ => None,
        }
    }

    /// The window is sized against a RAM budget (`CPU_RAM_FRACTION` of
    /// the total) that the status reports.
    pub fn ram_budget(&self) -> bool {
        matches!(self, Self::Cpu(_))
    }
}

impl EngineHooks for CpuEngine {
    fn plan_site(&self) -> Site<'_> {
        Site::Cpu
    }

    fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        super::llama::spawn_spec(&self.server, self.argv(plan), port, key, super::env::inherited())
    }

    fn wire(&self, route: Route, _entry: &ModelEntry) -> Wire {
        super::llama::wire(route)
    }

    async fn after_load(&self, child: ChildView<'_>, _cfg: &WardenConfig, _respawn: bool) -> AfterLoad {
        AfterLoad {
            state: ChildState::Cpu(self.state_at_load(child)),
            allocated: None,
        }
    }

    fn brake_input(&self, child: ChildView<'_>, _state: &ChildState, cfg: &WardenConfig) -> Option<BrakeInput> {
        Some(BrakeInput::Llama {
            facts: super::cpu::brake::window_facts(child, cfg)?,
            gauge: Gauge::Sensor,
        })
    }

    fn retry_at_floor(&self, _plan: &SpawnPlan, _raw: &str, _cfg: &WardenConfig) -> Option<SpawnPlan> {
        None // a RAM load does not fail for want of memory: it pages
    }
}

impl EngineHooks for CudaEngine {
    fn plan_site(&self) -> Site<'_> {
        Site::Cuda(&self.gpus)
    }

    fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        let mut env = super::env::inherited();
        if let Some(v) = CudaEngine::visible_devices(plan, plan.user_visible()) {
            env.push(("CUDA_VISIBLE_DEVICES".into(), v.into()));
        }
        super::env::cuda_bin_first(&mut env, cfg!(windows));
        super::llama::spawn_spec(&self.server, self.argv(plan), port, key, env)
    }

    fn wire(&self, route: Route, _entry: &ModelEntry) -> Wire {
        super::llama::wire(route)
    }

    async fn after_load(&self, child: ChildView<'_>, cfg: &WardenConfig, respawn: bool) -> AfterLoad {
        AfterLoad {
            state: ChildState::Cuda(self.state_at_load(child, cfg, respawn)),
            allocated: None,
        }
    }

    fn brake_input(&self, child: ChildView<'_>, state: &ChildState, cfg: &WardenConfig) -> Option<BrakeInput> {
        // The spill gauge, not the RAM reading, is this engine's sensor.
        super::cuda::live::brake_input(child, state.cuda()?, cfg)
    }

    fn retry_at_floor(&self, plan: &SpawnPlan, raw: &str, cfg: &WardenConfig) -> Option<SpawnPlan> {
        super::cuda::live::retry_at_floor(plan, raw, cfg)
    }
}

impl EngineHooks for MlxEngine {
    fn plan_site(&self) -> Site<'_> {
        Site::Mlx
    }

    fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        MlxEngine::spawn_spec(self, plan, port, key)
    }

    fn wire(&self, route: Route, entry: &ModelEntry) -> Wire {
        super::mlx::wire(route, &entry.path)
    }

    async fn after_load(&self, child: ChildView<'_>, _cfg: &WardenConfig, _respawn: bool) -> AfterLoad {
        let (state, allocated) = super::mlx::live::state_at_load(child).await;
        AfterLoad {
            state: ChildState::Mlx(state),
            allocated,
        }
    }

    fn brake_input(&self, child: ChildView<'_>, state: &ChildState, cfg: &WardenConfig) -> Option<BrakeInput> {
        super::mlx::live::brake_input(child, state.mlx()?, cfg)
    }

    fn retry_at_floor(&self, _plan: &SpawnPlan, _raw: &str, _cfg: &WardenConfig) -> Option<SpawnPlan> {
        None
    }
}
