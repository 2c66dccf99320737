//! The CPU engine's link to its RPC workers: reading every worker before a
//! load and splitting the plan over them (`engines::cpu::rpc`), which worker
//! the watch calls lost, a future that resolves when one is, and the
//! workers' pressure for brake samples. The watch's views are read without
//! a round trip. What the actor does with a lost worker (retire the child,
//! end the turn with `worker_lost`) is `actors::engine::workers`.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;

use crate::engines::SpawnPlan;
use crate::engines::cpu::rpc::{self, Reading, RpcUse};
use crate::error::ModelLoadError;
use crate::law::workers::{self, WorkerPressure};
use crate::rpc::remote::{self, Remote, WorkerAddr, WorkerView};
use crate::rpc::status::WorkerBuild;

/// What the engine holds of its workers.
#[derive(Debug, Clone)]
pub struct WorkersLink {
    /// The configured workers, in `--rpc` order.
    pub addrs: Vec<WorkerAddr>,
    /// Reads their status.
    pub remote: Remote,
    /// The watch's latest views.
    pub views: watch::Receiver<Vec<WorkerView>>,
    /// The warden's own llama.cpp build.
    pub ours: WorkerBuild,
}

/// A lost worker: its address and what the watch saw.
pub type Lost = (String, String);

/// The watch's view of `addr`.
fn view_of<'a>(views: &'a [WorkerView], addr: &WorkerAddr) -> Option<&'a WorkerView> {
    let addr = addr.to_string();
    views.iter().find(|v| v.addr == addr)
}

/// A load's reading of `addr`: `now`, with the watch's last good reading
/// and its poll count.
fn reading(
    addr: &WorkerAddr,
    v: Option<&WorkerView>,
    now: Result<crate::rpc::status::WorkerStatus, String>,
) -> Reading {
    Reading {
        addr: addr.clone(),
        now,
        last_good: v.and_then(|v| v.status.clone()),
        polls: v.map_or(0, |v| v.polls),
    }
}

/// The first worker of `used` the views call lost.
fn first_lost(views: &[WorkerView], used: &[RpcUse]) -> Option<Lost> {
    used.iter().find_map(|u| {
        let v = views.iter().find(|v| v.addr == u.addr)?;
        let after_plan = v.polls > u.polls_at_plan;
        workers::is_lost(v.misses, v.status.as_ref(), Some(u.joined), after_plan).then(|| {
            let why = match (&v.error, &v.status) {
                (Some(e), _) if v.misses > 0 => e.clone(),
                (_, Some(s)) if !s.rpc.up => "its rpc-server stopped".to_string(),
                _ => "its rpc-server restarted".to_string(),
            };
            (u.addr.clone(), why)
        })
    })
}

impl WorkersLink {
    /// A load's readings: every worker read now, beside the watch's views.
    /// A worker the watch calls lost is left out even when it answered the
    /// load's slower reading: joined, it would end the first turn with
    /// worker_lost, and again, and again.
    pub async fn read_for_load(&self) -> Vec<Reading> {
        let now = self.remote.read_all(&self.addrs, remote::LOAD_READ_TIMEOUT).await;
        let views = self.views.borrow().clone();
        self.addrs
            .iter()
            .zip(now)
            .map(|(addr, now)| {
                let v = view_of(&views, addr);
                let now = match now {
                    Ok(_) if v.is_some_and(|v| workers::watch_lost(v.misses)) => Err(format!(
                        "it does not answer the watch within {} ms ({})",
                        remote::POLL_TIMEOUT.as_millis(),
                        v.and_then(|v| v.error.clone()).unwrap_or_default()
                    )),
                    r => r,
                };
                reading(addr, v, now)
            })
            .collect()
    }

    /// A brake respawn's readings: the watch's latest views only (no new
    /// reading inside a safe point's handler).
    pub fn read_from_views(&self) -> Vec<Reading> {
        let views = self.views.borrow().clone();
        self.addrs
            .iter()
            .map(|addr| {
                let v = view_of(&views, addr);
                let lost = v.is_none_or(|v| workers::watch_lost(v.misses));
                let now = match v.and_then(|v| v.status.clone()) {
                    Some(s) if !lost => Ok(s),
                    _ => Err(v.and_then(|v| v.error.clone()).unwrap_or_else(|| "not read yet".into())),
                };
                reading(addr, v, now)
            })
            .collect()
    }

    /// `plan` split over `readings` (`engines::cpu::rpc::plan`), the split
    /// said in the log, and a WARNING naming each worker left out.
    pub fn split(
        &self,
        plan: SpawnPlan,
        readings: &[Reading],
        ctx_pin: Option<u32>,
    ) -> Result<SpawnPlan, ModelLoadError> {
        let plan = rpc::plan(plan, readings, &self.ours, ctx_pin)?;
        let Some(r) = &plan.rpc() else { return Ok(plan) };
        tracing::info!(model = %plan.entry.id, "split: {}", rpc::summary(r, plan.window));
        if !r.left_out.is_empty() {
            let names: Vec<String> = r.left_out.iter().map(|l| format!("{} ({})", l.addr, l.why)).collect();
            tracing::warn!(
                model = %plan.entry.id,
                "loading without {}: window {} (all workers would give {})",
                names.join(", "),
                plan.window.ctx().map_or("unsized".to_string(), |n| n.to_string()),
                r.full_window.map_or("no larger one".to_string(), |n| n.to_string())
            );
        }
        Ok(plan)
    }

    /// The first worker of `used` the watch calls lost.
    pub fn lost(&self, used: &[RpcUse]) -> Option<Lost> {
        first_lost(&self.views.borrow(), used)
    }

    /// Resolves when a worker of `used` is lost (never when `used` is empty).
    pub fn loss_of(&self, used: Vec<RpcUse>) -> Pin<Box<dyn Future<Output = Lost> + Send + 'static>> {
        if used.is_empty() {
            return Box::pin(std::future::pending());
        }
        let mut views = self.views.clone();
        Box::pin(async move {
            loop {
                if let Some(l) = first_lost(&views.borrow_and_update(), &used) {
                    return l;
                }
                if views.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
    }

    /// The pressure of the workers `plan` uses, for a brake sample.
    pub fn pressure(&self, plan: &SpawnPlan) -> Vec<WorkerPressure> {
        let Some(r) = &plan.rpc() else { return Vec::new() };
        let views = self.views.borrow();
        let per_layer = plan
            .facts
            .as_ref()
            .zip(plan.shape)
            .map(|(f, s)| crate::law::split::layer_costs(f, s.kv_per_token).kv_per_token_layer)
            .unwrap_or(0);
        r.used
            .iter()
            .map(|u| WorkerPressure {
                level: views
                    .iter()
                    .find(|v| v.addr == u.addr && v.misses == 0)
                    .and_then(|v| v.status.as_ref()?.pressure),
                total_bytes: u.ram_bytes,
                kv_per_token: per_layer * u.ram_layers as u64,
            })
            .collect()
    }
}

/// The engine's link to its RPC workers and the sender of the watch's views,
/// when workers are configured. Only the CPU engine splits over workers (a
/// CUDA or MLX engine ignores them, with one WARNING): llama.cpp's layer
/// split across a local GPU and remote devices needs the CUDA law per
/// device, which this warden does not run yet.
pub fn workers_link(
    config: &crate::config::WardenConfig,
    backend: &crate::engines::Backend,
) -> (Option<WorkersLink>, Option<watch::Sender<Vec<WorkerView>>>) {
    if config.workers.is_empty() {
        return (None, None);
    }
    let crate::engines::Backend::Cpu(cpu) = backend else {
        tracing::warn!(
            "RPC workers are configured but the {} engine does not split over workers; they are not used (WARDEN_ENGINE=cpu uses them)",
            backend.kind().tag()
        );
        return (None, None);
    };
    let (tx, rx) = watch::channel(remote::initial_views(&config.workers));
    let ours = crate::rpc::build::of_binary(&cpu.server);
    tracing::info!(
        workers = %config.workers.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        build = %ours.llama_cpp.as_deref().unwrap_or("unknown"),
        "splitting models over RPC workers"
    );
    let link = WorkersLink {
        addrs: config.workers.clone(),
        remote: Remote::new(config.worker_key.clone()),
        views: rx,
        ours,
    };
    (Some(link), Some(tx))
}
