//! Spawning a child for a plan (through the configured `Launcher`: an OS
//! process, or a test's in-process fake) and waiting until it is ready: a
//! free port (the next one when the child loses the bind race, as
//! `spawning` orders), the key,
//! readiness raced against the plan's RPC workers, then what each engine
//! reads after load. Part of `EngineCore`; runs inside an atomic handler (a load or a
//! brake respawn).

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::core::{EngineCore, LiveChild};
use super::spawning::{Next, Spawning};
use crate::child::client::ChildClient;
use crate::secret::ApiKey;
use crate::child::port::{PortLease, SPAWN_PORT_ATTEMPTS, pick_port};
use crate::child::process::{self, ChildProcess, ExitInfo, SpawnSpec};
use crate::child::ready::{NotReady, probe_ready};
use crate::engines::SpawnPlan;
use crate::error::{EngineError, ModelLoadError};
use crate::law::crash::{self, EngineCode, Hints};
use crate::sensors::ram;
use crate::status::WardenEvent;

/// A spawned child before it is ready.
struct Started {
    proc: ChildProcess,
    client: ChildClient,
    lease: PortLease,
    oom_before: Option<u64>,
    at: Instant,
}

/// What one spawn attempt came to.
enum Attempt {
    Ready(Box<LiveChild>),
    /// The child lost its port to another process: try the next one.
    PortTaken(ModelLoadError),
    Failed(ModelLoadError),
}

impl EngineCore {
    /// Spawns a child for `plan` and waits until it is ready, retrying the
    /// next port when the child reports its port taken. `respawn`: a brake
    /// respawn (its post-load notes are INFO, not WARNING).
    pub(crate) async fn spawn_ready(
        &mut self,
        plan: SpawnPlan,
        timeout: Duration,
        respawn: bool,
    ) -> Result<LiveChild, ModelLoadError> {
        let pool = self.backend.ports();
        let no_port = || EngineError::NoFreePort {
            first: *pool.start(),
            last: *pool.end(),
        };
        let mut spawning = Spawning::new(SPAWN_PORT_ATTEMPTS);
        loop {
            let skip = match spawning.next() {
                Next::Launch { skip } => skip,
                Next::GiveUp(last) => return Err(last.unwrap_or(ModelLoadError::Engine(no_port()))),
            };
            let lease = pick_port(pool.clone(), skip).ok_or_else(no_port)?;
            let port = lease.port();
            match self.attempt(&plan, lease, timeout, respawn).await? {
                Attempt::Ready(child) => return Ok(*child),
                Attempt::PortTaken(e) => {
                    tracing::warn!(
                        port,
                        "the child lost port {port} to another process; trying the next port"
                    );
                    spawning.port_taken(port, e);
                }
                Attempt::Failed(e) => return Err(e),
            }
        }
    }

    /// One spawn on `lease`'s port, to readiness or to why not.
    async fn attempt(
        &mut self,
        plan: &SpawnPlan,
        lease: PortLease,
        timeout: Duration,
        respawn: bool,
    ) -> Result<Attempt, ModelLoadError> {
        let id = plan.entry.id.clone();
        let key = ApiKey::mint();
        let spec = self.spec_for(plan, lease.port(), &key);
        let oom_before = ram::oom_kill_count();
        let at = Instant::now();
        let mut proc = self.outlets.launcher.spawn(&spec).map_err(|source| EngineError::Spawn {
            program: spec.program.clone(),
            source,
        })?;
        self.emit(WardenEvent::Loading {
            model: id.clone(),
            port: lease.port(),
        });
        let client = ChildClient::new(self.http.clone(), lease.port(), key);
        let ping = self.backend.ping(plan);
        let loss = self.loss_of(Some(plan));
        let ready = tokio::select! {
            r = probe_ready(&proc, &client, timeout, ping) => r,
            (worker, why) = loss => {
                process::terminate(&mut proc, super::leaving::LOST_STOP_GRACE).await;
                return Ok(Attempt::Failed(ModelLoadError::WorkerLost { id, worker, why }));
            }
        };
        let started = Started {
            proc,
            client,
            lease,
            oom_before,
            at,
        };
        Ok(match ready {
            Ok(()) => Attempt::Ready(Box::new(self.after_ready(started, plan.clone(), respawn).await)),
            Err(why) => self.not_ready(started, id, why, timeout).await,
        })
    }

    /// The engine's process for `plan`, with the slot-file directory.
    fn spec_for(&self, plan: &SpawnPlan, port: u16, key: &ApiKey) -> SpawnSpec {
        let mut spec = self.backend.spawn_spec(plan, port, key);
        let kept = !matches!(
            crate::law::kv_keep::keep_at(plan.facts.as_deref(), plan.swa),
            crate::law::kv_keep::Keep::Not(_)
        );
        if let Some(dir) = self.kv.dir().filter(|_| kept) {
            // llama-server writes and reads slot files only here (and a
            // model whose saves are never used gets none).
            spec.args.push("--slot-save-path".into());
            spec.args.push(dir.as_os_str().to_owned());
        } else if plan.slots > 1 {
            // Clearing a slot to make room in the shared pool is a slot
            // action too, which llama-server serves only with a path: one
            // the warden never asks it to write to.
            let dir = self.cfg().cache_dir.join("slots-unused");
            if let Err(e) = std::fs::create_dir_all(&dir) {
                tracing::warn!("cannot create {} ({e}); idle conversations cannot be cleared to make room", dir.display());
            }
            spec.args.push("--slot-save-path".into());
            spec.args.push(dir.into_os_string());
        }
        spec
    }

    /// A ready child: its window read back, each engine's after-load step,
    /// the `model ready` line and event.
    async fn after_ready(&mut self, s: Started, plan: SpawnPlan, respawn: bool) -> LiveChild {
        let allocated = self.read_allocated(&s.client, &plan).await;
        let mut child = LiveChild {
            process: s.proc,
            client: s.client,
            port: s.lease,
            allocated,
            loaded_since: SystemTime::now(),
            oom_kills_at_spawn: s.oom_before,
            engine: crate::engines::live::ChildState::new(self.backend.kind()),
            slots: super::slots::Slots::new(plan.slots),
            plan,
        };
        let after = self.backend.after_load(child.view(), &self.cfg(), respawn).await;
        child.engine = after.state;
        if let Some(a) = after.allocated {
            child.allocated = Some(a);
        }
        let load_ms = s.at.elapsed().as_millis() as u64;
        tracing::info!(
            engine = %self.backend.kind().name(),
            model = %child.model_id(),
            pid = child.process.pid(),
            port = child.port.port(),
            context_tokens = child.allocated,
            load_ms,
            "model ready"
        );
        self.kv.say_keep(&child);
        self.emit(WardenEvent::Ready {
            model: child.model_id().to_string(),
            pid: child.process.pid(),
            context_tokens: child.allocated,
            load_ms,
        });
        child
    }

    /// A child that did not become ready: stopped when it still runs, and
    /// why, classified.
    async fn not_ready(&self, mut s: Started, id: String, why: NotReady, timeout: Duration) -> Attempt {
        match why {
            NotReady::Exited(info) => {
                let code = classify_load_exit(&s.proc, info, s.oom_before, s.lease.port());
                let e = ModelLoadError::Exited {
                    id,
                    code,
                    exit: info,
                    raw: s.proc.output().raw_tail(),
                };
                if code.is_port_conflict() {
                    Attempt::PortTaken(e)
                } else {
                    Attempt::Failed(e)
                }
            }
            NotReady::TimedOut => {
                process::terminate(&mut s.proc, self.cfg().stop_grace).await;
                Attempt::Failed(ModelLoadError::TimedOut {
                    id,
                    after: timeout,
                    raw: s.proc.output().raw_tail(),
                })
            }
            NotReady::Foreign => unreachable!("probe_ready resolves Foreign itself"),
            NotReady::PingFailed(reason) => {
                process::terminate(&mut s.proc, self.cfg().stop_grace).await;
                Attempt::Failed(ModelLoadError::PingFailed {
                    id,
                    reason,
                    raw: s.proc.output().raw_tail(),
                })
            }
        }
    }
}

/// Classifies a child that died while loading.
fn classify_load_exit(proc: &ChildProcess, info: ExitInfo, oom_before: Option<u64>, port: u16) -> EngineCode {
    let hints = Hints {
        stopped_by_us: proc.stopped_by_us(),
        oom_kill_seen: crash::oom_killed_since(oom_before, ram::oom_kill_count()),
        port_held: crate::child::port::held_elsewhere(port),
    };
    crash::classify(
        &proc.output().tail(crate::child::output::RAW_TAIL_LINES),
        info.kind(),
        hints,
    )
}
