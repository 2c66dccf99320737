//! What the engine does about its RPC workers (CPU engine with
//! `WARDEN_WORKERS`): the split planned before a load and the notice when a
//! worker is left out, a worker lost during a load, a turn or while idle
//! (the child retired, the turn's `worker_lost`). The readings, the split
//! and the loss itself are the engine's (`engines::cpu::workers`). Part of
//! `EngineCore`.

use std::future::Future;
use std::pin::Pin;

use super::core::EngineCore;
use super::outbox::Outbox;
use super::leaving::Retire;
use crate::engines::SpawnPlan;
use crate::engines::cpu::workers::Lost;
use crate::error::{GenerationError, ModelLoadError};
use crate::law::workers::WorkerPressure;
use crate::messages::{Notice, TurnEvent};

/// How long a child that died over workers waits for the watch to name the
/// worker that took it down (the watch calls one lost within ~0.5 s).
const LOSS_NAMING_BOUND: std::time::Duration = std::time::Duration::from_millis(1500);

impl EngineCore {
    /// The CPU plan `plan` split over the workers that answer now (each read
    /// before the load); a notice when one was left out and the window is
    /// smaller for it.
    pub(crate) async fn plan_over_workers(
        &self,
        plan: SpawnPlan,
        events: Option<&mut Outbox>,
    ) -> Result<SpawnPlan, ModelLoadError> {
        let Some(link) = self.backend.workers() else { return Ok(plan) };
        let readings = link.read_for_load().await;
        let pin = self.cfg().ctx_pin_for(&plan.entry.id);
        let plan = link.split(plan, &readings, pin)?;
        if let (Some(r), Some(out)) = (plan.rpc().filter(|r| !r.left_out.is_empty()), events) {
            let _ = out
                .send(TurnEvent::Notice(Notice::WorkerMissing {
                    workers: r.left_out.iter().map(|l| l.addr.clone()).collect(),
                    window: plan.window.ctx(),
                    full_window: r.full_window,
                }))
                .await;
        }
        Ok(plan)
    }

    /// A brake respawn's `plan` for the child that ran on `old`: split
    /// again over the watch's latest readings when `old` ran over workers
    /// (the respawn plan itself is this machine's alone), else as it is.
    pub(crate) fn replan_from_views(&self, old: &SpawnPlan, plan: SpawnPlan) -> Result<SpawnPlan, ModelLoadError> {
        let (Some(link), Some(_)) = (self.backend.workers(), old.rpc()) else {
            return Ok(plan);
        };
        let pin = self.cfg().ctx_pin_for(&plan.entry.id);
        link.split(plan, &link.read_from_views(), pin)
    }

    /// The first worker of the live child that the watch calls lost.
    fn lost_worker(&self) -> Option<Lost> {
        let used = &self.child.get()?.plan.rpc()?.used;
        self.backend.workers()?.lost(used)
    }

    /// Resolves when a worker of the live child is lost (never without one).
    pub(crate) fn worker_loss(&self) -> Pin<Box<dyn Future<Output = Lost> + Send + 'static>> {
        self.loss_of(self.child.get().map(|c| &c.plan))
    }

    /// Resolves when a worker of `plan` is lost (never without one): a load
    /// races it too, so a worker gone mid-upload fails the load at once.
    pub(crate) fn loss_of(&self, plan: Option<&SpawnPlan>) -> Pin<Box<dyn Future<Output = Lost> + Send + 'static>> {
        let used = plan.and_then(|p| p.rpc()).map(|r| r.used.clone());
        match (used, self.backend.workers()) {
            (Some(used), Some(link)) => link.loss_of(used),
            _ => Box::pin(std::future::pending()),
        }
    }

    /// After a child over workers died: the worker that took it down, once
    /// the watch names one (bounded).
    pub(crate) async fn loss_behind_death(&self) -> Option<Lost> {
        let rpc = self.child.get()?.plan.rpc()?;
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
        let pid = self.child.get().map(|c| c.process.pid());
        let raw = self.retire(Retire::WorkerLost).await.unwrap_or_default();
        let e = GenerationError::WorkerLost { worker, why, raw };
        if let Some(pid) = pid {
            self.intake.record_death(pid, &e);
        }
        e
    }

    /// `WorkerCheck` with no turn running: a child whose worker is gone is
    /// retired now, so the next request reloads instead of meeting an abort.
    pub(crate) async fn worker_check(&mut self) {
        self.retire_if_worker_lost().await;
    }

    /// The workers as the status shows them (`None` without a link): each
    /// one's last reading, the live child's split and what each was given.
    pub(crate) fn workers_status(&self) -> Option<crate::status::WorkersStatus> {
        let link = self.backend.workers()?;
        let c = self.child.get();
        Some(crate::status::WorkersStatus {
            workers: link.views.borrow().clone(),
            split: c.and_then(|c| c.plan.rpc().cloned()),
            given: c.map(|c| c.engine.given().to_vec()).unwrap_or_default(),
        })
    }

    /// The used workers' pressure for a brake sample of the live child.
    pub(crate) fn worker_pressure(&self) -> Vec<WorkerPressure> {
        match (self.child.get(), self.backend.workers()) {
            (Some(c), Some(link)) => link.pressure(&c.plan),
            _ => Vec::new(),
        }
    }
}
