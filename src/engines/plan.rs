//! The plan's shell: `gather` reads what `law::plan::plan` decides from
//! (the RAM total, the projector's size, NVML for the CUDA engine), and
//! `plan` turns the law's answer into a `SpawnPlan` (with an MLX model's
//! `config.json` facts). A load, `llm-warden inspect` and `GET /v1/models`
//! all plan here; the RPC split (`engines::cpu::rpc`) refines a CPU plan after.

use std::sync::Arc;

use super::cpu::rpc;
use super::cuda::GpuSource;
use super::mlx::{self, MlxFacts};
use crate::catalog::ModelEntry;
use crate::config::WardenConfig;
use crate::gguf::ModelFacts;
use crate::law::cuda::CudaSpawn;
use crate::law::plan::{self as law, EngineReadings, GpuReadings, Readings};
use crate::law::cuda::CudaPlacement;
use crate::law::residents::{Memory, ModelKind, Newcomer};
use crate::law::window::{FA_COMPUTE_BYTES_PER_TOKEN, ModelShape, Window, cuda_slope};
use crate::sensors::ram::{self, RamTotal};

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
    /// The budget the window's law sized against (`law::plan::Plan`).
    pub budget_bytes: Option<i64>,
    /// The RAM total at the plan (the CPU window is sized on it).
    pub ram: Option<RamTotal>,
    /// The brake's cap folded into the window, when there was one.
    pub cap: Option<u32>,
    /// What the other residents held when it was planned (its window was
    /// sized beside them; a brake respawn sizes beside the same).
    pub beside_bytes: u64,
    /// The slots the child runs over its one KV pool (`law::slots`).
    pub slots: u32,
    /// How a sliding model's child keeps its sliding layers (`law::plan`).
    pub swa: crate::law::kv::SwaCache,
    /// More llama-server arguments from the model's settings (its chat
    /// template file, its own `args`).
    pub extra_args: Vec<String>,
    /// What the plan holds for its engine alone.
    pub engine: EnginePlan,
}

/// The part of a spawn's plan only one engine has.
#[derive(Debug, Clone)]
pub enum EnginePlan {
    /// llama-server on the CPU.
    Cpu {
        /// The split over RPC workers (`WARDEN_WORKERS`), once planned.
        rpc: Option<rpc::RpcPlan>,
    },
    /// llama-server on one NVIDIA GPU.
    Cuda {
        /// The placement and static window (`None`: no NVML reading).
        spawn: Option<CudaSpawn>,
        /// The user's `CUDA_VISIBLE_DEVICES`, passed on untouched when the
        /// warden does not pin the child itself.
        user_visible: Option<String>,
    },
    /// mlx_vlm.server.
    Mlx {
        /// The model's facts (`config.json`), when readable.
        facts: Option<MlxFacts>,
        /// How long the child waits for each token (`law::mlx::token_wait`).
        token_wait: std::time::Duration,
    },
}

impl SpawnPlan {
    /// A plan for tests of an engine's argv and environment: model `m` at
    /// `/m/m.gguf`, an 8192-token window pinned, one slot.
    #[cfg(test)]
    pub(crate) fn for_tests(facts: Option<ModelFacts>, engine: EnginePlan) -> Self {
        Self {
            entry: Arc::new(ModelEntry {
                id: "m".into(),
                format: crate::catalog::ModelFormat::Gguf,
                path: "/m/m.gguf".into(),
                mmproj: None,
            }),
            shape: None,
            facts: facts.map(Arc::new),
            window: crate::law::window::Window::Pinned { ctx: 8192 },
            budget_bytes: None,
            ram: None,
            cap: None,
            beside_bytes: 0,
            slots: 1,
            swa: crate::law::kv::SwaCache::Full,
            extra_args: Vec::new(),
            engine,
        }
    }

    /// The split over RPC workers (CPU engine).
    pub fn rpc(&self) -> Option<&rpc::RpcPlan> {
        match &self.engine {
            EnginePlan::Cpu { rpc } => rpc.as_ref(),
            _ => None,
        }
    }

    /// The CUDA engine's placement and static window.
    pub fn cuda(&self) -> Option<&CudaSpawn> {
        match &self.engine {
            EnginePlan::Cuda { spawn, .. } => spawn.as_ref(),
            _ => None,
        }
    }

    /// The same, to change (a brake respawn's).
    pub fn cuda_mut(&mut self) -> Option<&mut CudaSpawn> {
        match &mut self.engine {
            EnginePlan::Cuda { spawn, .. } => spawn.as_mut(),
            _ => None,
        }
    }

    /// The user's `CUDA_VISIBLE_DEVICES` (CUDA engine).
    pub fn user_visible(&self) -> Option<&str> {
        match &self.engine {
            EnginePlan::Cuda { user_visible, .. } => user_visible.as_deref(),
            _ => None,
        }
    }

    /// An MLX model's facts.
    pub fn mlx(&self) -> Option<MlxFacts> {
        match &self.engine {
            EnginePlan::Mlx { facts, .. } => *facts,
            _ => None,
        }
    }

    /// How long an MLX child waits for each token (`law::mlx::token_wait`).
    pub fn mlx_token_wait(&self) -> Option<std::time::Duration> {
        match &self.engine {
            EnginePlan::Mlx { token_wait, .. } => Some(*token_wait),
            _ => None,
        }
    }

    /// The GPU the plan placed the model on, as the status names it
    /// (`name (uuid)`), when a CUDA placement sized it.
    pub fn gpu_label(&self) -> Option<String> {
        match &self.cuda()?.placement {
            CudaPlacement::Sized { device, .. } => Some(format!("{} ({})", device.name, device.uuid)),
            _ => None,
        }
    }

    /// How the window was decided, as the load's log line says it after
    /// `Loading MODEL: ` (every engine's case; the actor only logs it).
    pub fn window_line(&self) -> String {
        match (self.window, self.shape) {
            (
                Window::Sized {
                    ctx,
                    memory_bound,
                    budget_bytes,
                },
                Some(s),
            ) => format!(
                "window={ctx} (trained={}, kv_bytes_per_token={}, weights={} MiB, ram={} MiB from {}, budget={} MiB, memory_bound={memory_bound})",
                s.trained.map_or_else(|| "unknown".to_string(), |t| t.to_string()),
                s.kv_per_token,
                s.weights_bytes >> 20,
                self.ram.map_or(0, |r| r.bytes >> 20),
                self.ram.map_or("-", |r| r.source.describe()),
                budget_bytes >> 20,
            ),
            (Window::Pinned { ctx }, _) => format!("window={ctx} (pinned by WARDEN_CTX)"),
            _ => match self.mlx() {
                Some(MlxFacts { trained: Some(t), .. }) => {
                    format!("trained window {t} (bounded by memory once the child's base footprint is measured)")
                }
                Some(_) => "no trained window in config.json (bounded by memory once the child's base footprint is measured)".to_string(),
                None => "no -c (window left to llama-server)".to_string(),
            },
        }
    }
}

/// What a load of `plan` asks of the residents' law (`law::residents`):
/// its needs at the floor and at its full window, and the memory it is
/// admitted on (the RAM total on the CPU; the placed GPU, its free memory
/// read at this plan, on CUDA). `None` when the plan sizes nothing (no
/// readable header, an unsized placement, MLX): such a load is admitted on
/// the count cap alone, as no law can weigh it.
pub fn newcomer(plan: &SpawnPlan, cfg: &WardenConfig) -> Option<(Newcomer, Memory)> {
    let shape = plan.shape?;
    let facts = plan.facts.as_deref()?;
    let kind = ModelKind::of(Some(facts));
    let (slope, memory) = match &plan.engine {
        EnginePlan::Cpu { .. } => (FA_COMPUTE_BYTES_PER_TOKEN, Memory::Ram(plan.ram?.bytes)),
        EnginePlan::Cuda { spawn, .. } => {
            let spawn = spawn.as_ref()?;
            let CudaPlacement::Sized { device, .. } = &spawn.placement else {
                return None;
            };
            let vram = crate::law::cuda::vram_for_sizing(device, cfg.vram_override_bytes);
            (cuda_slope(spawn.flash_attention, facts.head_count_max()), Memory::Gpu(vram))
        }
        EnginePlan::Mlx { .. } => return None,
    };
    Some((Newcomer::new(&plan.entry.id, kind, &shape, slope, cfg.ctx_pin_for(&plan.entry.id)), memory))
}

/// Which engine's law plans, and where the CUDA engine reads its GPUs.
#[derive(Debug, Clone, Copy)]
pub enum Site<'a> {
    /// llama-server on the CPU.
    Cpu,
    /// llama-server on one NVIDIA GPU.
    Cuda(&'a GpuSource),
    /// mlx_vlm.server.
    Mlx,
}

/// Reads what the law plans `entry` from. File and NVML I/O: the engine
/// calls it inside its load, `inspect` once.
pub fn gather(site: Site, cfg: &WardenConfig, entry: &ModelEntry) -> Readings {
    for_entry(machine(site, cfg), entry)
}

/// The machine's part of the readings (the RAM total, NVML for the CUDA
/// engine), read once for a whole list of plans (`/v1/models`).
pub fn machine(site: Site, cfg: &WardenConfig) -> Readings {
    let engine = match site {
        Site::Cpu => EngineReadings::Cpu,
        Site::Mlx => EngineReadings::Mlx,
        Site::Cuda(gpus) => EngineReadings::Cuda(GpuReadings {
            devices: gpus.snapshot().map(|s| s.devices),
            user_visible: cfg.cuda_visible_devices.clone(),
            vram_override_bytes: cfg.vram_override_bytes,
        }),
    };
    Readings {
        ram: ram::ram_total(cfg.ram_override_bytes),
        mmproj_bytes: 0,
        beside_bytes: 0,
        slots: 1,
        engine,
    }
}

/// `machine` with `entry`'s own reading: its vision projector's size.
pub fn for_entry(machine: Readings, entry: &ModelEntry) -> Readings {
    let mmproj_bytes = entry
        .mmproj
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    Readings {
        mmproj_bytes,
        ..machine
    }
}

/// The plan of a spawn of `entry` with the brake's `cap`, beside residents
/// that hold `beside` bytes: gather, then the law.
pub fn plan(
    site: Site,
    cfg: &WardenConfig,
    entry: Arc<ModelEntry>,
    facts: Option<Arc<ModelFacts>>,
    cap: Option<u32>,
    beside: u64,
) -> SpawnPlan {
    let readings = Readings {
        beside_bytes: beside,
        ..gather(site, cfg, &entry)
    };
    if let EngineReadings::Cuda(GpuReadings { devices: Err(why), .. }) = &readings.engine {
        tracing::warn!("[CUDA_Engine] {why}; the window is left to llama-server's fit");
    }
    plan_on(readings, site, cfg, entry, facts, cap)
}

/// The plan of a spawn of `entry` on readings already gathered.
pub fn plan_on(
    readings: Readings,
    site: Site,
    cfg: &WardenConfig,
    entry: Arc<ModelEntry>,
    facts: Option<Arc<ModelFacts>>,
    cap: Option<u32>,
) -> SpawnPlan {
    let child = match site {
        Site::Mlx => crate::law::slots::Child::Mlx,
        _ if facts.as_deref().is_some_and(ModelFacts::is_embedding) => crate::law::slots::Child::Encoder,
        _ if matches!(
            crate::law::kv_keep::keep(facts.as_deref()),
            crate::law::kv_keep::Keep::Not(_)
        ) =>
        {
            crate::law::slots::Child::Recurrent
        }
        _ => crate::law::slots::Child::Generating,
    };
    let slots = crate::law::slots::count(cfg.parallel_for(&entry.id), child);
    let readings = Readings { slots, ..readings };
    let p = law::plan(facts.as_deref(), &readings, cap, cfg.ctx_pin_for(&entry.id));
    let engine = match site {
        Site::Cpu => EnginePlan::Cpu { rpc: None },
        Site::Cuda(_) => EnginePlan::Cuda {
            spawn: p.cuda,
            user_visible: cfg.cuda_visible_devices.clone(),
        },
        Site::Mlx => {
            let facts = mlx::read_facts(&entry.path);
            let trained = facts.and_then(|f| f.trained);
            EnginePlan::Mlx {
                facts,
                token_wait: crate::law::mlx::token_wait(trained, cfg.first_token_timeout),
            }
        }
    };
    SpawnPlan {
        slots,
        swa: p.swa,
        extra_args: cfg.extra_args(&entry.id),
        entry,
        facts,
        shape: p.shape,
        window: p.window,
        budget_bytes: p.budget_bytes,
        ram: Some(readings.ram),
        cap,
        beside_bytes: readings.beside_bytes,
        engine,
    }
}
