//! Loading: the model's header check, the plan (over RPC workers too), the
//! room among the residents, the spawn (`spawn`), `/props`, the post-load
//! check, carried out in the order the machine `loading::Loading` keeps (no
//! I/O there). Part of `EngineCore`; runs inside an atomic handler.

use std::sync::Arc;

use super::core::{EngineCore, LiveChild};
use super::loading::{self, Outcome, Roomed, Spawned, Step};
use super::outbox::Outbox;
use super::peers::{Patience, Room};
use crate::catalog::{ModelEntry, ModelFormat};
use crate::child::client::ChildClient;
use crate::engines::SpawnPlan;
use crate::error::ModelLoadError;
use crate::gguf::{self, ModelFacts};
use crate::law::caps;
use crate::messages::{Notice, TurnEvent};
use crate::status::WardenEvent;

/// Whether a load is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Loading {
    /// The model's child is live.
    Ready,
    /// It waits for room among the residents (`peers::RoomWait`): the
    /// request goes back to the head of the intake, and the engine is woken
    /// when it may go on.
    Waits,
}

impl EngineCore {
    /// Makes `entry` the loaded model: reuses a live child of it, replaces a
    /// dead one or another model's, or loads it fresh, in the order the
    /// machine `loading::Loading` keeps (each step carried out here).
    /// `events`, when given, receives the `loading` notice before a spawn
    /// and `loaded` after it; `patience` bounds how long it waits for
    /// another model's memory.
    pub(crate) async fn ensure_loaded(
        &mut self,
        entry: &Arc<ModelEntry>,
        events: Option<&mut Outbox>,
        patience: Patience,
    ) -> Result<Loading, ModelLoadError> {
        let mut events = events;
        let mut loading = loading::Loading::new();
        // What the steps found, for the steps after them.
        let mut alone: Option<SpawnPlan> = None;
        let mut beside = 0;
        let mut seed = None;
        let mut facts = None;
        let mut plan: Option<SpawnPlan> = None;
        let mut failed: Option<ModelLoadError> = None;
        let mut spawned: Option<LiveChild> = None;
        let mut started = tokio::time::Instant::now();
        loop {
            let view = loading::View {
                holds: self.child.holds(&entry.id),
                live: self.child.is_live(),
                accepts: self.backend.accepts(entry.format),
                planned: self.room.as_ref().is_some_and(|r| r.model == entry.id && r.alone.is_some()),
            };
            let Some(step) = loading.next(view) else {
                unreachable!("a load ends in a verdict")
            };
            match step {
                Step::Recover => {
                    // Died while idle: recorded, then loaded again below.
                    self.take_dead_child();
                    self.retire_if_worker_lost().await;
                }
                Step::Reuse => return Ok(Loading::Ready),
                Step::Retire => {
                    self.retire(super::leaving::Retire::Switch).await;
                }
                Step::Switch => self.usage.switching_to(&entry.id),
                Step::Refuse => {
                    let e = ModelLoadError::WrongFormat {
                        id: entry.id.clone(),
                        format: match entry.format {
                            ModelFormat::Gguf => "GGUF",
                            ModelFormat::Mlx => "MLX",
                        },
                        engine: self.backend.kind().tag(),
                    };
                    return Err(self.load_failed(&entry.id, e));
                }
                // The unload's carry, else the window memory, seeds this
                // spawn: its cap folds into the window.
                Step::Seed => seed = Some(self.brake.seed(&entry.id, self.sensor.now_ms())),
                // A load waiting for room planned as it began to wait; its
                // wake reuses that plan.
                Step::Wake => alone = self.room.as_mut().and_then(|r| r.alone.take()),
                Step::Facts => {
                    // A file refused before any spawn (not a GGUF,
                    // truncated) is a failed load like any other.
                    facts = kept(self.read_facts(entry).await, &mut failed);
                    loading.took(Outcome::Read(facts.is_some()));
                }
                Step::Plan => {
                    let cap = seed.as_ref().and_then(|s| s.cap);
                    alone = Some(self.backend.plan(&self.cfg(), entry.clone(), facts.take().flatten(), cap, 0));
                }
                Step::Room => {
                    let a = alone.as_ref().expect("a plan before room is asked");
                    let roomed = match self.make_room(a, patience, events.as_deref()).await {
                        Ok(Room::Made(0)) => {
                            plan = alone.take();
                            Roomed::Made { beside: false }
                        }
                        Ok(Room::Made(n)) => {
                            beside = n;
                            Roomed::Made { beside: true }
                        }
                        Ok(Room::Waits) => Roomed::Waits,
                        Err(e) => {
                            failed = Some(e);
                            Roomed::Failed
                        }
                    };
                    loading.took(Outcome::Roomed(roomed));
                }
                // A window sized beside what stays.
                Step::Replan => {
                    let a = alone.take().expect("the plan alone");
                    let cap = seed.as_ref().and_then(|s| s.cap);
                    plan = Some(self.backend.plan(&self.cfg(), entry.clone(), a.facts.clone(), cap, beside));
                }
                Step::Keep => {
                    if let Some(r) = self.room.as_mut() {
                        r.alone = alone.take();
                    }
                    return Ok(Loading::Waits);
                }
                Step::Workers => {
                    let p = plan.take().expect("a plan before the workers");
                    plan = kept(self.plan_over_workers(p, events.as_deref_mut()).await, &mut failed);
                    loading.took(Outcome::Read(plan.is_some()));
                }
                Step::Announce => {
                    let p = plan.as_ref().expect("the plan it announces");
                    self.log_plan(p);
                    if let Some(out) = events.as_deref_mut() {
                        // A refusal is seen by the relay, which checks the outbox again.
                        let _ = out
                            .send(TurnEvent::Notice(Notice::Loading {
                                model: entry.id.clone(),
                            }))
                            .await;
                    }
                }
                Step::Spawn | Step::Retry => {
                    if step == Step::Spawn {
                        started = tokio::time::Instant::now();
                        self.enter(super::core::Activity::Loading);
                    }
                    let p = plan.take().expect("the plan it spawns");
                    let result = self.spawn_ready(p.clone(), self.cfg().load_timeout, false).await;
                    let came = match &result {
                        Ok(_) => Spawned::Ready,
                        Err(ModelLoadError::Exited { raw, .. }) if step == Step::Spawn => {
                            match self.backend.retry_at_floor(&p, raw, &self.cfg()) {
                                Some(retry) => {
                                    plan = Some(retry);
                                    Spawned::Retryable
                                }
                                None => Spawned::Failed,
                            }
                        }
                        Err(_) => Spawned::Failed,
                    };
                    spawned = kept(result, &mut failed);
                    loading.took(Outcome::Spawned(came));
                }
                Step::Install => {
                    let Some(child) = spawned.take() else {
                        unreachable!("a child is installed once spawned")
                    };
                    let seed = seed.take().expect("the seed of the spawn");
                    if seed.seeded {
                        tracing::info!(model = %entry.id, cap = seed.cap, "reloaded with the memory brake's cap (the unload's episode continues)");
                    }
                    self.brake.started(seed);
                    let load_ms = started.elapsed().as_millis() as u64;
                    self.usage.loaded(load_ms);
                    self.thrash_check(&entry.id, load_ms);
                    self.install(child);
                    if let Some(out) = events {
                        let _ = out
                            .send(TurnEvent::Notice(Notice::Loaded {
                                model: entry.id.clone(),
                                load_ms,
                            }))
                            .await;
                    }
                    return Ok(Loading::Ready);
                }
                Step::Fail => {
                    let e = failed.take().expect("the load's error");
                    return Err(self.load_failed(&entry.id, e));
                }
            }
        }
    }

    /// A failed load: published, counted, logged, and handed back.
    fn load_failed(&mut self, id: &str, e: ModelLoadError) -> ModelLoadError {
        // Said before the turn's error reaches its client.
        self.enter(super::core::Activity::Resting);
        self.settle_admission();
        self.emit(WardenEvent::LoadFailed {
            model: id.to_string(),
            code: e.code(),
        });
        tracing::error!(engine = %self.backend.kind().name(), model = %id, code = %e.code(), "load failed: {e}");
        e
    }

    /// Makes a loaded child the live one: a load is a use, so the idle
    /// clock starts at its end.
    fn install(&mut self, child: LiveChild) {
        self.child.install(child);
        self.usage.touch(super::state::Used::read());
        // The status now carries what the child holds: its reservation goes.
        if self.admitted.is_some() {
            self.publish();
            self.settle_admission();
        }
    }

    /// The header facts of a GGUF model (off the actor's thread: it is file
    /// I/O), `None` when the reader cannot size it but the file may still run.
    async fn read_facts(&self, entry: &ModelEntry) -> Result<Option<Arc<ModelFacts>>, ModelLoadError> {
        if entry.format != ModelFormat::Gguf {
            return Ok(None);
        }
        let path = entry.path.clone();
        let read = tokio::task::spawn_blocking(move || gguf::read_model_facts(&path))
            .await
            .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()));
        match read {
            Ok(f) => Ok(Some(Arc::new(f))),
            Err(e) if crate::law::header::is_fatal(&e) => Err(ModelLoadError::Invalid(e)),
            Err(e) => {
                tracing::warn!(model = %entry.id, "GGUF header unreadable ({e}); starting without -c");
                Ok(None)
            }
        }
    }

    fn log_plan(&self, plan: &SpawnPlan) {
        let tag = self.backend.kind().tag();
        tracing::info!("[{tag}] Loading {}: {}", plan.entry.id, plan.window_line());
        let trained = plan.shape.and_then(|s| s.trained);
        if let Some((pin, trained)) = crate::law::window::pinned_beyond_trained(plan.window, trained) {
            tracing::warn!(
                model = %plan.entry.id,
                "the pinned window of {pin} tokens (WARDEN_CTX, or the model's ctx setting) is beyond the {trained} the model was trained for: past {trained} tokens its answers degrade, and the window's memory is spent all the same"
            );
        }
    }

    /// The allocated window: `/props` when it answers, else the `-c` given
    /// (a llama-server spawned with `-c` keeps it), else unknown. A failed
    /// read or a value other than the `-c` (padded) is one WARNING.
    pub(crate) async fn read_allocated(&self, client: &ChildClient, plan: &SpawnPlan) -> Option<u32> {
        let requested = plan.window.ctx();
        match self.backend.read_window(client, plan).await {
            Ok(Some(n)) => {
                if let Some(r) = requested.filter(|&r| !caps::matches_requested(n, r)) {
                    tracing::warn!(model = %plan.entry.id, "the child reports a window of {n} tokens, not the {r} it was given");
                }
                Some(n)
            }
            // An MLX model that names no trained window: its window is the
            // memory bound, applied right after this.
            Ok(None) if plan.mlx().is_some() => None,
            Ok(None) | Err(_) => {
                tracing::warn!(model = %plan.entry.id, "could not read the child's window from /props; keeping {}", requested.map_or("the window unknown".to_string(), |n| format!("{n} tokens")));
                requested
            }
        }
    }
}

/// `r`'s value; its error kept in `failed` for the `Fail` step the load's
/// order asks next.
fn kept<T>(r: Result<T, ModelLoadError>, failed: &mut Option<ModelLoadError>) -> Option<T> {
    r.map_err(|e| *failed = Some(e)).ok()
}
