//! The one trait of hooks every engine implements, and the one place that
//! dispatches on the engine: the core (`actors::engine`) calls these and
//! never matches on the kind. The engine-neutral parts (the plan's law, the
//! spawn, the retire path, the brake's memory) stay in the core; each
//! engine's home (`engines::cpu`, `engines::cuda`, `engines::mlx`, with the
//! llama.cpp engines' shared part in `engines::llama`) owns what differs.
//!
//! | hook | CPU | CUDA | MLX |
//! |---|---|---|---|
//! | `plan_site` | RAM | RAM, NVML | RAM, `config.json` |
//! | `spawn_spec` | llama-server `-ngl 0` (or the RPC split) | llama-server `-ngl -1 -fitt`, pinned GPU | `mlx_vlm.server` |
//! | `adapt_request` | llama.cpp's names | llama.cpp's names | mlx-vlm's names, its model path |
//! | `after_load` | footprint check, or each device's share over workers | placement, device check, spill baseline | base footprint, memory bound |
//! | `brake_sample` | RAM + workers, `llama_step` | VRAM spill, `llama_step` | pressure + footprint, `mlx_step` |

use crate::actors::engine::brake::Given;
use crate::actors::engine::{EngineCore, LiveChild};
use crate::catalog::ModelEntry;
use crate::child::key::ApiKey;
use crate::child::process::SpawnSpec;
use crate::law::brake::Point;
use crate::status::EngineKind;

use super::plan::Site;
use super::{CpuEngine, CudaEngine, MlxEngine, SpawnPlan};

/// What an engine does at each moment of its child's life.
#[allow(async_fn_in_trait)] // crate-private; every caller awaits in place
pub(crate) trait EngineHooks {
    /// The plan's inputs: which readings `engines::plan::gather` takes for
    /// this engine (RAM; NVML for CUDA; `config.json` for MLX).
    fn plan_site(&self) -> Site<'_>;
    /// The process to start for `plan` on `port` with `key`.
    fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec;
    /// Adapts an OpenAI request body for this engine's child.
    fn adapt_request(&self, body: &mut serde_json::Map<String, serde_json::Value>, entry: &ModelEntry);
    /// Right after the child is ready, before the brake is seeded: what the
    /// engine reads of it into its own state.
    async fn after_load(core: &mut EngineCore, child: &mut LiveChild, respawn: bool);
    /// One brake sample at `point` (the core checked the brake is on), and
    /// its action.
    async fn brake_sample(core: &mut EngineCore, point: Point, given: Option<Given>);
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

/// The `after_load` hook of the core's engine.
pub(crate) async fn after_load(core: &mut EngineCore, child: &mut LiveChild, respawn: bool) {
    match core.backend.kind() {
        EngineKind::Cpu => CpuEngine::after_load(core, child, respawn).await,
        EngineKind::Cuda => CudaEngine::after_load(core, child, respawn).await,
        EngineKind::Mlx => MlxEngine::after_load(core, child, respawn).await,
    }
}

/// The `brake_sample` hook of the core's engine.
pub(crate) async fn brake_sample(core: &mut EngineCore, point: Point, given: Option<Given>) {
    match core.backend.kind() {
        EngineKind::Cpu => CpuEngine::brake_sample(core, point, given).await,
        EngineKind::Cuda => CudaEngine::brake_sample(core, point, given).await,
        EngineKind::Mlx => MlxEngine::brake_sample(core, point, given).await,
    }
}

impl EngineHooks for CpuEngine {
    fn plan_site(&self) -> Site<'_> {
        Site::Cpu
    }

    fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        super::llama::spawn_spec(&self.server, self.argv(plan), port, key, super::env::inherited())
    }

    fn adapt_request(&self, body: &mut serde_json::Map<String, serde_json::Value>, _entry: &ModelEntry) {
        super::llama::adapt_request(body)
    }

    async fn after_load(core: &mut EngineCore, child: &mut LiveChild, _respawn: bool) {
        if child.plan.rpc.is_some() {
            // The prediction is of a whole model here; over workers each
            // device's share is read back instead.
            core.read_given(child);
        } else {
            core.post_load_check(child);
        }
    }

    async fn brake_sample(core: &mut EngineCore, point: Point, given: Option<Given>) {
        let sampled = core.ram_sample(point, given);
        core.llama_brake(point, sampled).await;
    }
}

impl EngineHooks for CudaEngine {
    fn plan_site(&self) -> Site<'_> {
        Site::Cuda(&self.gpus)
    }

    fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        let mut env = super::env::inherited();
        if let Some(v) = CudaEngine::visible_devices(plan, plan.user_visible.as_deref()) {
            env.push(("CUDA_VISIBLE_DEVICES".into(), v.into()));
        }
        super::llama::spawn_spec(&self.server, self.argv(plan), port, key, env)
    }

    fn adapt_request(&self, body: &mut serde_json::Map<String, serde_json::Value>, _entry: &ModelEntry) {
        super::llama::adapt_request(body)
    }

    async fn after_load(core: &mut EngineCore, child: &mut LiveChild, respawn: bool) {
        core.cuda_after_load(child, respawn).await;
    }

    async fn brake_sample(core: &mut EngineCore, point: Point, _given: Option<Given>) {
        // The spill gauge, not the RAM reading, is this engine's sensor.
        let sampled = core.spill_sample(point);
        core.llama_brake(point, sampled).await;
    }
}

impl EngineHooks for MlxEngine {
    fn plan_site(&self) -> Site<'_> {
        Site::Mlx
    }

    fn spawn_spec(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        MlxEngine::spawn_spec(self, plan, port, key)
    }

    fn adapt_request(&self, body: &mut serde_json::Map<String, serde_json::Value>, entry: &ModelEntry) {
        super::mlx::adapt_request(body, &entry.path)
    }

    async fn after_load(core: &mut EngineCore, child: &mut LiveChild, _respawn: bool) {
        let cap = child.plan.cap;
        core.mlx_bound_at_load(child, cap).await;
    }

    async fn brake_sample(core: &mut EngineCore, point: Point, given: Option<Given>) {
        if core.child.is_some() && core.take_sample(point) {
            core.mlx_brake_point(point, given).await;
        }
    }
}

/// What the core may ask about its engine without knowing which it is.
impl super::Backend {
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

    /// A load that ran out of device memory is retried once at the floor
    /// (CUDA: fit's own estimate can be short; RAM loads do not fail so).
    pub fn retries_oom_at_floor(&self) -> bool {
        matches!(self, Self::Cuda(_))
    }

    /// The window is sized against a RAM budget (`CPU_RAM_FRACTION` of
    /// the total) that the status reports.
    pub fn ram_budget(&self) -> bool {
        matches!(self, Self::Cpu(_))
    }
}
