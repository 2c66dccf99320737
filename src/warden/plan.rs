//! What a load of a model would be given here, planned exactly as the
//! engine plans its loads (`engines::plan`), without starting anything: for
//! a running warden's catalog (`GET /v1/models`), and as free planning
//! calls for a face with no warden running (`llm-warden inspect`), so the
//! faces reach the engines only through the front door.

use std::sync::Arc;

use super::Warden;
use crate::catalog::{ModelEntry, ModelFormat};
use crate::config::WardenConfig;
pub(crate) use crate::engines::SpawnPlan;
use crate::engines::cpu::rpc::{self, Reading};
use crate::engines::{Backend, Site, llama, plan};
use crate::error::ModelLoadError;
use crate::gguf::ModelFacts;
use crate::law::plan::Readings;
use crate::rpc::remote::{LOAD_READ_TIMEOUT, Remote};
use crate::status::EngineKind;

impl Warden {
    /// What this machine gives every plan now (the RAM total; NVML on the
    /// CUDA engine): read once for a list of `plan_for`. Reads files and
    /// NVML: call it off the server's threads.
    pub(crate) fn plan_readings(&self) -> Readings {
        plan::machine(self.inner.planner.site(), &self.inner.config.get())
    }

    /// The plan a fresh load of `entry` would get on `machine`, before any
    /// memory brake's cap (the engine's window memory is its own).
    pub(crate) fn plan_for(
        &self,
        machine: &Readings,
        entry: Arc<ModelEntry>,
        facts: Option<Arc<ModelFacts>>,
    ) -> SpawnPlan {
        let readings = plan::for_entry(machine.clone(), &entry);
        plan::plan_on(
            readings,
            self.inner.planner.site(),
            &self.inner.config.get(),
            entry,
            facts,
            None,
        )
    }
}

/// The plan a warden started here with `cfg` would make for the GGUF model
/// `entry`: the engine it would plan with (selected as at start; the CPU
/// engine's plan stands in where the chosen one runs no GGUF or no
/// llama-server is found) and the plan, before any brake cap.
pub(crate) fn plan_here(cfg: &WardenConfig, entry: Arc<ModelEntry>, facts: Arc<ModelFacts>) -> (EngineKind, SpawnPlan) {
    let backend = crate::engines::preflight::choose(cfg)
        .ok()
        .map(|(b, _)| b)
        .filter(|b| b.accepts(ModelFormat::Gguf));
    let site = backend.as_ref().map_or(Site::Cpu, Backend::site);
    let kind = backend.as_ref().map_or(EngineKind::Cpu, Backend::kind);
    (kind, plan::plan(site, cfg, entry, Some(facts), None, 0))
}

/// The CPU engine's plan for `entry` (the base a split over RPC workers
/// refines).
pub(crate) fn plan_cpu(cfg: &WardenConfig, entry: Arc<ModelEntry>, facts: Arc<ModelFacts>) -> SpawnPlan {
    plan::plan(Site::Cpu, cfg, entry, Some(facts), None, 0)
}

/// The CPU plan `base` split over `cfg.workers` exactly as a load would
/// split it (every worker read now), or why a load would fail.
pub(crate) async fn plan_over_workers(cfg: &WardenConfig, base: SpawnPlan) -> Result<SpawnPlan, ModelLoadError> {
    let remote = Remote::new(cfg.worker_key.clone());
    let now = remote.read_all(&cfg.workers, LOAD_READ_TIMEOUT).await;
    let readings: Vec<Reading> = cfg
        .workers
        .iter()
        .zip(now)
        .map(|(addr, now)| Reading {
            addr: addr.clone(),
            now,
            last_good: None,
            polls: 0,
        })
        .collect();
    // The warden's own build, as a load compares it.
    let ours = llama::find_llama_server(cfg, llama::Flavour::Cpu)
        .map(|p| crate::rpc::build::of_binary(&p))
        .unwrap_or_else(|_| crate::rpc::status::WorkerBuild {
            llama_cpp: None,
            rpc_protocol: None,
            flavour: None,
        });
    let pin = cfg.ctx_pin_for(&base.entry.id);
    rpc::plan(base, &readings, &ours, pin)
}

/// The `--rpc` and `--tensor-split` arguments a plan over workers gives
/// llama-server (`None` for a plan on this machine alone).
pub(crate) fn rpc_argv(plan: &SpawnPlan) -> Option<Vec<String>> {
    plan.rpc()
        .map(|r| rpc::argv(r).iter().map(|a| a.to_string_lossy().into_owned()).collect())
}
