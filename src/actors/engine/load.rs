//! Loading: the model's header check, the plan, the spawn on a free port
//! (retrying the next port when the child loses the bind race), readiness,
//! `/props`, the post-load check. Part of `EngineCore`; runs inside an atomic
//! handler.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::core::{EngineCore, LiveChild};
use super::outbox::Outbox;
use crate::catalog::{ModelEntry, ModelFormat};
use crate::child::client::ChildClient;
use crate::child::key::ApiKey;
use crate::child::port::{SPAWN_PORT_ATTEMPTS, pick_port};
use crate::child::process::{self, ExitInfo};
use crate::child::ready::{NotReady, probe_ready};
use crate::engines::{Backend, SpawnPlan};
use crate::error::{EngineError, ModelLoadError};
use crate::gguf::{self, ModelFacts};
use crate::law::crash::{self, EngineCode, Hints};
use crate::law::{caps, window};
use crate::messages::{Notice, TurnEvent};
use crate::sensors::{footprint, ram};
use crate::status::WardenEvent;

impl EngineCore {
    /// Makes `entry` the loaded model: reuses a live child of it, replaces a
    /// dead one or another model's, or loads it fresh. `events`, when given,
    /// receives the `loading` notice before a spawn.
    pub(super) async fn ensure_loaded(
        &mut self,
        entry: &Arc<ModelEntry>,
        events: Option<&mut Outbox>,
    ) -> Result<(), ModelLoadError> {
        if self.child.as_ref().is_some_and(|c| c.process.exit().is_some()) {
            // Died while idle: record it, then load again below.
            self.take_dead_child();
        }
        self.retire_if_worker_lost().await;
        if let Some(c) = &self.child {
            if c.plan.entry.id == entry.id {
                return Ok(());
            }
            self.retire(super::retire::Retire::Switch).await;
        }
        // A keep-alive holds for its model until another model runs.
        if self.keep_alive.as_ref().is_some_and(|(m, _)| *m != entry.id) {
            self.keep_alive = None;
        }
        self.load(entry.clone(), events).await
    }

    /// Loads `entry` with no child running.
    async fn load(&mut self, entry: Arc<ModelEntry>, events: Option<&mut Outbox>) -> Result<(), ModelLoadError> {
        if !self.backend.accepts(entry.format) {
            return Err(ModelLoadError::WrongFormat {
                id: entry.id.clone(),
                format: match entry.format {
                    ModelFormat::Gguf => "GGUF",
                    ModelFormat::Mlx => "MLX",
                },
                engine: self.backend.kind().tag(),
            });
        }
        let facts = self.read_facts(&entry).await?;
        // The unload's carry, else the window memory, seeds this spawn: its
        // cap folds into the window.
        let seed = self.brake_seed(&entry.id);
        let plan = self.backend.plan(&self.cfg, entry.clone(), facts, seed.cap);
        let mut events = events;
        let plan = match self.plan_over_workers(plan, events.as_deref_mut()).await {
            Ok(p) => p,
            Err(e) => return Err(self.load_failed(&entry.id, e)),
        };
        self.log_plan(&plan);
        if let Some(out) = events {
            // A refusal is seen by the relay, which checks the outbox again.
            let _ = out
                .send(TurnEvent::Notice(Notice::Loading {
                    model: entry.id.clone(),
                }))
                .await;
        }
        self.activity = super::core::Activity::Loading;
        self.publish();
        let mut result = self.spawn_ready(plan.clone(), self.cfg.load_timeout, false).await;
        if let Err(ModelLoadError::Exited { raw, .. }) = &result
            && self.oom_retry_due(&plan, raw)
        {
            tracing::warn!(
                "[CUDA_Engine] CUDA out of memory loading {} with a {}-token window; retrying once at the 4096 floor (the failed allocation may also be the host's pinned memory: cudaHostAlloc prints the same)",
                entry.id,
                plan.window.ctx().unwrap_or(0)
            );
            let floor = Backend::at_window(&plan, crate::law::caps::WINDOW_FLOOR_TOKENS);
            result = self.spawn_ready(floor, self.cfg.load_timeout, false).await;
        }
        match result {
            Ok(child) => {
                if seed.seeded {
                    tracing::info!(model = %entry.id, cap = ?seed.cap, "reloaded with the memory brake's cap (the unload's episode continues)");
                }
                self.brake.state = seed;
                // Any successful spawn forgets the unload's record.
                self.brake.reload = None;
                self.install(child);
                Ok(())
            }
            Err(e) => Err(self.load_failed(&entry.id, e)),
        }
    }

    /// A failed load: published, counted, logged, and handed back.
    fn load_failed(&mut self, id: &str, e: ModelLoadError) -> ModelLoadError {
        self.activity = super::core::Activity::Resting;
        self.publish();
        self.emit(WardenEvent::LoadFailed {
            model: id.to_string(),
            code: e.code(),
        });
        tracing::error!(engine = self.backend.kind().tag(), model = %id, code = %e.code(), "load failed: {e}");
        e
    }

    /// Whether a failed CUDA load is retried at the floor: sized by the
    /// warden, not pinned, a CUDA allocation failure in its output.
    fn oom_retry_due(&self, plan: &SpawnPlan, raw: &str) -> bool {
        let Backend::Cuda(_) = &self.backend else { return false };
        let tail: Vec<String> = raw.lines().map(str::to_string).collect();
        let sized = matches!(plan.window, crate::law::window::Window::Sized { .. });
        crate::law::cuda::retry_at_floor(
            sized,
            self.cfg.ctx_pin.is_some(),
            false,
            plan.window.ctx(),
            crate::law::cuda::cuda_oom(&tail),
        )
    }

    /// Makes a ready child the live one.
    pub(super) fn install(&mut self, child: LiveChild) {
        self.child = Some(child);
        self.activity = super::core::Activity::Resting;
        self.touch();
        self.publish();
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
            Err(e) if crate::law::header::is_fatal(e.code()) => Err(ModelLoadError::Invalid(e)),
            Err(e) => {
                tracing::warn!(model = %entry.id, "GGUF header unreadable ({e}); starting without -c");
                Ok(None)
            }
        }
    }

    fn log_plan(&self, plan: &SpawnPlan) {
        let tag = self.backend.kind().tag();
        match (plan.window, plan.shape, plan.ram) {
            (
                window::Window::Sized {
                    ctx,
                    memory_bound,
                    budget_bytes,
                },
                Some(s),
                ram,
            ) => tracing::info!(
                "[{tag}] Loading {}: window={ctx} (trained={:?}, kv_bytes_per_token={}, weights={} MiB, ram={} MiB from {}, budget={} MiB, memory_bound={memory_bound})",
                plan.entry.id,
                s.trained,
                s.kv_per_token,
                s.weights_bytes >> 20,
                ram.map_or(0, |r| r.bytes >> 20),
                ram.map_or("-", |r| r.source.describe()),
                budget_bytes >> 20,
            ),
            (window::Window::Pinned { ctx }, ..) => {
                tracing::info!("[{tag}] Loading {}: window={ctx} (pinned by WARDEN_CTX)", plan.entry.id)
            }
            _ if plan.mlx.is_some() => tracing::info!(
                "[{tag}] Loading {}: trained window {} (bounded by memory once the child's base footprint is measured)",
                plan.entry.id,
                plan.mlx.map_or(0, |f| f.trained)
            ),
            _ => tracing::info!("[{tag}] Loading {}: no -c (window left to llama-server)", plan.entry.id),
        }
    }

    /// Spawns a child for `plan` and waits until it is ready, retrying the
    /// next port when the child reports its port taken. `respawn`: a brake
    /// respawn (its post-load notes are INFO, not WARNING).
    pub(super) async fn spawn_ready(
        &mut self,
        plan: SpawnPlan,
        timeout: Duration,
        respawn: bool,
    ) -> Result<LiveChild, ModelLoadError> {
        let id = plan.entry.id.clone();
        let pool = self.backend.ports();
        let mut tried: Vec<u16> = Vec::new();
        let mut last_err = None;
        for _ in 0..SPAWN_PORT_ATTEMPTS {
            let lease = pick_port(pool.clone(), &tried).ok_or(EngineError::NoFreePort {
                first: *pool.start(),
                last: *pool.end(),
            })?;
            let port = lease.port();
            let key = ApiKey::mint();
            let mut spec = self.backend.spawn_spec(&plan, port, &key);
            if let Some(store) = &self.kv {
                // llama-server writes and reads slot files only here.
                spec.args.push("--slot-save-path".into());
                spec.args.push(store.dir().as_os_str().to_owned());
            }
            let oom_before = ram::oom_kill_count();
            let started = Instant::now();
            let mut proc = process::spawn(&spec).map_err(|source| EngineError::Spawn {
                program: spec.program.clone(),
                source,
            })?;
            self.emit(WardenEvent::Loading {
                model: id.clone(),
                port,
            });
            let client = ChildClient::new(self.http.clone(), port, key);
            let ping = self.backend.ping(&plan.entry);
            let loss = self.loss_of(Some(&plan));
            let ready = tokio::select! {
                r = probe_ready(&proc, &client, timeout, ping) => r,
                (worker, why) = loss => {
                    process::terminate(&mut proc, super::retire::LOST_STOP_GRACE).await;
                    return Err(ModelLoadError::WorkerLost { id, worker, why });
                }
            };
            match ready {
                Ok(()) => {
                    let allocated = self.read_allocated(&client, &plan).await;
                    let cap = plan.cap;
                    let mut child = LiveChild {
                        process: proc,
                        client,
                        port: lease,
                        allocated,
                        loaded_since: SystemTime::now(),
                        oom_kills_at_spawn: oom_before,
                        base_bytes: None,
                        ceiling: None,
                        memory_bound: None,
                        offload: None,
                        brake_off: None,
                        spill_baseline: None,
                        slot: None,
                        given: Vec::new(),
                        plan,
                    };
                    if child.plan.cuda.is_some() {
                        self.cuda_after_load(&mut child, respawn).await;
                    } else if child.plan.mlx.is_some() {
                        self.mlx_bound_at_load(&mut child, cap).await;
                        if let Some(p) = &self.prefix {
                            p.do_send(crate::messages::prefix::PrefixChildChanged);
                        }
                    } else if child.plan.rpc.is_some() {
                        // The prediction is of a whole model here; over
                        // workers each device's share is read back instead.
                        self.read_given(&mut child);
                    } else {
                        self.post_load_check(&child);
                    }
                    let load_ms = started.elapsed().as_millis() as u64;
                    tracing::info!(
                        engine = self.backend.kind().tag(),
                        model = %id,
                        pid = child.process.pid(),
                        port,
                        context_tokens = ?child.allocated,
                        load_ms,
                        "model ready"
                    );
                    self.emit(WardenEvent::Ready {
                        model: id,
                        pid: child.process.pid(),
                        context_tokens: child.allocated,
                        load_ms,
                    });
                    return Ok(child);
                }
                Err(NotReady::Exited(info)) => {
                    let code = classify_load_exit(&proc, info, oom_before);
                    let raw = proc.output().raw_tail();
                    if code.is_port_conflict() {
                        tracing::warn!(
                            port,
                            "the child lost port {port} to another process; trying the next port"
                        );
                        tried.push(port);
                        last_err = Some(ModelLoadError::Exited {
                            id: id.clone(),
                            code,
                            exit: info,
                            raw,
                        });
                        continue;
                    }
                    return Err(ModelLoadError::Exited {
                        id,
                        code,
                        exit: info,
                        raw,
                    });
                }
                Err(NotReady::TimedOut) => {
                    process::terminate(&mut proc, self.cfg.stop_grace).await;
                    return Err(ModelLoadError::TimedOut {
                        id,
                        after: timeout,
                        raw: proc.output().raw_tail(),
                    });
                }
                Err(NotReady::Foreign) => unreachable!("probe_ready resolves Foreign itself"),
                Err(NotReady::PingFailed(reason)) => {
                    process::terminate(&mut proc, self.cfg.stop_grace).await;
                    return Err(ModelLoadError::PingFailed {
                        id,
                        reason,
                        raw: proc.output().raw_tail(),
                    });
                }
            }
        }
        Err(last_err.unwrap_or(ModelLoadError::Engine(EngineError::NoFreePort {
            first: *pool.start(),
            last: *pool.end(),
        })))
    }

    /// The allocated window: `/props` when it answers, else the `-c` given
    /// (a llama-server spawned with `-c` keeps it), else unknown. A failed
    /// read or a value other than the `-c` (padded) is one WARNING.
    async fn read_allocated(&self, client: &ChildClient, plan: &SpawnPlan) -> Option<u32> {
        let requested = plan.window.ctx();
        match self.backend.read_window(client, plan).await {
            Ok(Some(n)) => {
                if let Some(r) = requested.filter(|&r| !caps::matches_requested(n, r)) {
                    tracing::warn!(model = %plan.entry.id, "the child reports a window of {n} tokens, not the {r} it was given");
                }
                Some(n)
            }
            Ok(None) | Err(_) => {
                tracing::warn!(model = %plan.entry.id, "could not read the child's window from /props; keeping {requested:?}");
                requested
            }
        }
    }

    /// The CPU post-load check: the child's anonymous memory against the
    /// window's prediction (one WARNING above it, never an action).
    fn post_load_check(&self, child: &LiveChild) {
        if child.plan.entry.mmproj.is_some() {
            tracing::debug!("post-load memory check skipped: a vision projector is loaded");
            return;
        }
        let (Some(shape), Some(window)) = (child.plan.shape, child.allocated) else {
            return;
        };
        let Some(anon) = footprint::anon_bytes(child.process.pid()) else {
            return;
        };
        let limit = window::postload_limit_bytes(&shape, window);
        if anon > limit {
            tracing::warn!(
                model = child.model_id(),
                "llama-server allocated more than the window budget predicted: anonymous memory {} MiB > {} MiB allowed for a {window}-token window",
                anon >> 20,
                limit >> 20
            );
        }
    }
}

/// Classifies a child that died while loading.
fn classify_load_exit(proc: &process::ChildProcess, info: ExitInfo, oom_before: Option<u64>) -> EngineCode {
    let hints = Hints {
        stopped_by_us: proc.stopped_by_us(),
        oom_kill_seen: matches!((oom_before, ram::oom_kill_count()), (Some(a), Some(b)) if b > a),
    };
    crash::classify(
        &proc.output().tail(crate::child::output::RAW_TAIL_LINES),
        info.kind(),
        hints,
    )
}
