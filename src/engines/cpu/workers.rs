//! The engine over RPC workers: reading every worker before a load and
//! planning the split (`engines::cpu::rpc`), the notice when a worker is left
//! out, what each device was given, a worker lost during a turn or while
//! idle (`worker_lost`), and the workers' pressure in brake samples. Part of
//! `EngineCore`; the watch's views are read without a round trip, and the
//! child's client never leaves the engine.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;

use crate::actors::engine::outbox::Outbox;
use crate::actors::engine::{EngineCore, LiveChild};
use crate::engines::SpawnPlan;
use crate::engines::cpu::rpc::{self, Reading, RpcUse};
use crate::error::{GenerationError, ModelLoadError};
use crate::law::workers::{self, WorkerPressure};
use crate::messages::{Notice, TurnEvent};
use crate::rpc::remote::{self, Remote, WorkerAddr, WorkerView};
use crate::rpc::status::WorkerBuild;

/// How long a child that died over workers waits for the watch to name the
/// worker that took it down (the watch calls one lost within ~0.5 s).
const LOSS_NAMING_BOUND: std::time::Duration = std::time::Duration::from_millis(1500);

/// What the engine holds of its workers.
#[derive(Debug)]
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

impl EngineCore {
    /// The CPU plan `plan` split over the workers that answer now (each read
    /// before the load); a notice when one was left out and the window is
    /// smaller for it.
    pub(crate) async fn plan_over_workers(
        &self,
        plan: SpawnPlan,
        events: Option<&mut Outbox>,
    ) -> Result<SpawnPlan, ModelLoadError> {
        let Some(link) = &self.workers else { return Ok(plan) };
        let now = link.remote.read_all(&link.addrs, remote::LOAD_READ_TIMEOUT).await;
        let views = link.views.borrow().clone();
        let readings: Vec<Reading> = link
            .addrs
            .iter()
            .zip(now)
            .map(|(addr, now)| {
                let v = view_of(&views, addr);
                // A worker the watch calls lost is left out even when it
                // answered the load's slower reading: joined, it would end
                // the first turn with worker_lost, and again, and again.
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
            .collect();
        let plan = rpc::plan(plan, &readings, &link.ours, self.cfg.ctx_pin)?;
        let Some(r) = &plan.rpc else { return Ok(plan) };
        tracing::info!(model = %plan.entry.id, "split: {}", rpc::summary(r, plan.window));
        if !r.left_out.is_empty() {
            let names: Vec<String> = r.left_out.iter().map(|l| format!("{} ({})", l.addr, l.why)).collect();
            tracing::warn!(
                model = %plan.entry.id,
                "loading without {}: window {:?} (all workers would give {:?})",
                names.join(", "),
                plan.window.ctx(),
                r.full_window
            );
            if let Some(out) = events {
                let _ = out
                    .send(TurnEvent::Notice(Notice::WorkerMissing {
                        workers: r.left_out.iter().map(|l| l.addr.clone()).collect(),
                        window: plan.window.ctx(),
                        full_window: r.full_window,
                    }))
                    .await;
            }
        }
        Ok(plan)
    }

    /// A brake respawn's plan over the watch's latest readings (no new
    /// reading inside a safe point's handler beyond the views).
    pub(crate) fn replan_from_views(&self, plan: SpawnPlan) -> Result<SpawnPlan, ModelLoadError> {
        let Some(link) = &self.workers else { return Ok(plan) };
        let views = link.views.borrow().clone();
        let readings: Vec<Reading> = link
            .addrs
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
            .collect();
        rpc::plan(plan, &readings, &link.ours, self.cfg.ctx_pin)
    }

    /// Records what each device was given, from the child's load lines.
    pub(crate) fn read_given(&self, child: &mut LiveChild) {
        let Some(r) = &child.plan.rpc else { return };
        let given = rpc::given(&child.process.output().kept(), r);
        for g in &given {
            tracing::info!(
                model = child.model_id(),
                device = %g.device,
                "given: {} MiB model, {} MiB KV, {} MiB compute",
                g.model_bytes >> 20,
                g.kv_bytes >> 20,
                g.compute_bytes >> 20
            );
        }
        if let Some(cpu) = child.engine.cpu_mut() {
            cpu.given = given;
        }
    }

    /// The first worker of the live child that the watch calls lost.
    pub(crate) fn lost_worker(&self) -> Option<Lost> {
        let used = &self.child.as_ref()?.plan.rpc.as_ref()?.used;
        first_lost(&self.workers.as_ref()?.views.borrow(), used)
    }

    /// Resolves when a worker of the live child is lost (never without one).
    pub(crate) fn worker_loss(&self) -> Pin<Box<dyn Future<Output = Lost> + Send + 'static>> {
        self.loss_of(self.child.as_ref().map(|c| &c.plan))
    }

    /// Resolves when a worker of `plan` is lost (never without one): a load
    /// races it too, so a worker gone mid-upload fails the load at once.
    pub(crate) fn loss_of(&self, plan: Option<&SpawnPlan>) -> Pin<Box<dyn Future<Output = Lost> + Send + 'static>> {
        let used = plan
            .and_then(|p| p.rpc.as_ref())
            .map(|r| r.used.clone())
            .filter(|u| !u.is_empty());
        let (Some(used), Some(link)) = (used, &self.workers) else {
            return Box::pin(std::future::pending());
        };
        let mut views = link.views.clone();
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

    /// After a child over workers died: the worker that took it down, once
    /// the watch names one (bounded).
    pub(crate) async fn loss_behind_death(&self) -> Option<Lost> {
        let rpc = self.child.as_ref()?.plan.rpc.as_ref()?;
        if rpc.used.is_empty() {
            return None;
        }
        tokio::time::timeout(LOSS_NAMING_BOUND, self.worker_loss()).await.ok()
    }

    /// A live child one of whose workers is lost is retired before a turn
    /// uses it (the watch's `WorkerCheck` may still wait behind the turn).
    pub(crate) async fn retire_if_worker_lost(&mut self) {
        if let Some(lost) = self.lost_worker() {
            let _ = self.retire_for_worker(lost).await;
        }
    }

    /// Stops the child whose worker `lost` is gone, and the turn's error.
    pub(crate) async fn retire_for_worker(&mut self, lost: Lost) -> GenerationError {
        let (worker, why) = lost;
        tracing::warn!(worker = %worker, "the RPC worker {worker} was lost ({why}); stopping the model server");
        let raw = self
            .retire(crate::actors::engine::retire::Retire::WorkerLost)
            .await
            .unwrap_or_default();
        GenerationError::WorkerLost { worker, why, raw }
    }

    /// `WorkerCheck` with no turn running: a child whose worker is gone is
    /// retired now, so the next request reloads instead of meeting an abort.
    pub(crate) async fn worker_check(&mut self) {
        self.publish();
        self.retire_if_worker_lost().await;
    }

    /// The used workers' pressure for a brake sample.
    pub(crate) fn worker_pressure(&self) -> Vec<WorkerPressure> {
        let (Some(c), Some(link)) = (self.child.as_ref(), &self.workers) else {
            return Vec::new();
        };
        let Some(r) = &c.plan.rpc else { return Vec::new() };
        let views = link.views.borrow();
        r.used
            .iter()
            .map(|u| {
                let level = views
                    .iter()
                    .find(|v| v.addr == u.addr && v.misses == 0)
                    .and_then(|v| v.status.as_ref()?.pressure);
                let per_layer = c
                    .plan
                    .facts
                    .as_ref()
                    .zip(c.plan.shape)
                    .map(|(f, s)| crate::law::split::layer_costs(f, s.kv_per_token).kv_per_token_layer)
                    .unwrap_or(0);
                WorkerPressure {
                    level,
                    total_bytes: u.ram_bytes,
                    kv_per_token: per_layer * u.ram_layers as u64,
                }
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
        build = ?ours.llama_cpp,
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
