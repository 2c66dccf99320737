//! `EngineCore`: everything the engine owns, as plain async Rust. The actor
//! (`actors::engine`) moves the core into each atomic handler's future and
//! takes it back at the end, so the core is only ever touched by one message
//! at a time without a lock, and its logic reads as ordinary sequential code.

use std::sync::Arc;
use std::time::SystemTime;

use actix::Recipient;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::catalog::{Catalog, ModelEntry};
use crate::child::client::ChildClient;
use crate::child::launch::Launcher;
use crate::child::port::PortLease;
use crate::child::process::{self, ChildProcess};
use crate::config::WardenConfig;
use crate::engines::live::{ChildState, ChildView};
use crate::engines::{Backend, SpawnPlan};
use crate::error::{GenerationError, WardenError};
pub(crate) use super::state::{Activity, Brake, Used, state};
use crate::law::crash::{self, EngineCode, Hints};
use crate::law::keep_alive::KeepAlive;
use crate::messages::prefix::ResetFailed;
use crate::metrics::Metrics;
use crate::sensors::ram;
use crate::sensors::view::PressureView;
use crate::status::{EngineStatus, WardenEvent};

/// The live child and what the engine knows of it.
#[derive(Debug)]
pub struct LiveChild {
    /// The process.
    pub process: ChildProcess,
    /// The HTTP client to it (holds its key).
    pub client: ChildClient,
    /// How it was planned (model, facts, window).
    pub plan: SpawnPlan,
    /// Its port, leased for its life.
    pub port: PortLease,
    /// The allocated window (`/props` n_ctx, else the `-c` given, else unknown).
    pub allocated: Option<u32>,
    /// When it became ready.
    pub loaded_since: SystemTime,
    /// The cgroup's OOM-kill count when it was spawned.
    pub oom_kills_at_spawn: Option<u64>,
    /// The engine's own state of this child.
    pub engine: ChildState,
    /// The conversation whose KV its slot holds (`kv`); `None` for a fresh
    /// slot or one a keyless turn used.
    pub slot: Option<super::kv::SlotHeld>,
}

impl LiveChild {
    /// The model id.
    pub fn model_id(&self) -> &str {
        &self.plan.entry.id
    }

    /// What it holds by the law, bytes: weights, KV and compute at its
    /// allocated window (`window::footprint_bytes`) and the compute
    /// intercept the window law set aside for it, `None` without the
    /// header's shape or a known window. The law's count, not the measured
    /// RSS, is what admission and eviction weigh: llama-server touches its
    /// KV pages as the window fills, so a fresh child's RSS undercounts
    /// what it will hold, and mapped weights are not anonymous memory.
    pub fn footprint_bytes(&self) -> Option<u64> {
        let shape = self.plan.shape?;
        let window = self.allocated.or(self.plan.window.ctx())?;
        Some(crate::law::window::footprint_bytes(&shape, window) + crate::law::window::COMPUTE_INTERCEPT_BYTES)
    }

    /// The read-only face an engine's hook is lent.
    pub(crate) fn view(&self) -> ChildView<'_> {
        ChildView {
            pid: self.process.pid(),
            plan: &self.plan,
            allocated: self.allocated,
            client: &self.client,
            output: self.process.output(),
        }
    }

    /// The face and the engine's own state, to write (the MLX release and
    /// bound, the prefix cache's reset).
    pub(crate) fn parts(&mut self) -> (ChildView<'_>, &mut ChildState) {
        let view = ChildView {
            pid: self.process.pid(),
            plan: &self.plan,
            allocated: self.allocated,
            client: &self.client,
            output: self.process.output(),
        };
        (view, &mut self.engine)
    }
}

/// The channels and actors an engine core talks to.
#[derive(Debug)]
pub struct Wiring {
    /// Where status snapshots go.
    pub status_tx: watch::Sender<EngineStatus>,
    /// Where lifecycle events go.
    pub events_tx: broadcast::Sender<WardenEvent>,
    /// Where brake samples read the sensor's latest reading (a test's
    /// script instead).
    pub sensor: Box<dyn PressureView>,
    /// The MLX prefix-cache owner, told of a failed reset.
    pub prefix: Option<Recipient<ResetFailed>>,
    /// Where the side door to the live child is published.
    pub door_tx: watch::Sender<Option<super::Door>>,
    /// Where the end of the last turn is published on the monotonic clock
    /// (the idle timer's; the wire status carries wall-clock times only).
    pub idle_clock_tx: watch::Sender<Option<Instant>>,
    /// The counters every event feeds.
    pub metrics: Arc<Metrics>,
    /// How children are started (an OS process; a test's in-process fake).
    pub launcher: Launcher,
    /// The other residents (`None`: this engine serves every model, one
    /// child at a time, switching).
    pub peers: Option<Arc<dyn super::room::Peers>>,
    /// The turns routed to this engine, waiting or running.
    pub queue: Arc<crate::queue::QueueGauge>,
    /// The KV store as the status shows it, one cell for every engine.
    pub kv_view: SharedStoreView,
}

/// The KV store's view, shared by every resident's engine and the warden.
pub type SharedStoreView = Arc<std::sync::RwLock<Option<crate::kv_store::StoreView>>>;

/// The engine's whole state.
#[derive(Debug)]
pub struct EngineCore {
    /// Configuration.
    pub(crate) cfg: Arc<WardenConfig>,
    /// The backend (CPU, CUDA, MLX).
    pub(crate) backend: Backend,
    /// The models.
    pub(crate) catalog: Arc<Catalog>,
    /// The HTTP client shared by every child.
    pub(crate) http: reqwest::Client,
    /// The child, when one runs.
    pub(crate) child: Option<LiveChild>,
    /// Status publication.
    pub(crate) status_tx: watch::Sender<EngineStatus>,
    /// Lifecycle events.
    pub(crate) events_tx: broadcast::Sender<WardenEvent>,
    /// End of the last turn (or of the last load).
    pub(crate) last_used: Option<Used>,
    /// Turns handled.
    pub(crate) turns: u64,
    /// What the engine is busy with; the published state is derived from
    /// it and the child (`state`), never assigned.
    pub(crate) activity: Activity,
    /// Set by `Shutdown`: no further child is started.
    pub(crate) shut_down: bool,
    /// The model an idle reap unloaded, until a turn consumes it (the spec's
    /// `_idle_unload`, read by `take_idle_reload`).
    pub(crate) idle_reload: Option<String>,
    /// Where brake samples read the sensor's latest reading.
    pub(crate) sensor: Box<dyn PressureView>,
    /// Everything the memory brake keeps.
    pub(crate) brake: Brake,
    /// The MLX child's prefix-cache owner (`None` on the llama.cpp engines).
    pub(crate) prefix: Option<Recipient<ResetFailed>>,
    /// Where the side door is published.
    pub(crate) door_tx: watch::Sender<Option<super::Door>>,
    /// Where `last_used` is published for the idle timer.
    pub(crate) idle_clock_tx: watch::Sender<Option<Instant>>,
    /// The counters every event feeds.
    pub(crate) metrics: Arc<Metrics>,
    /// The keep-alive a request set, and the model it holds for.
    pub(crate) keep_alive: Option<(String, KeepAlive)>,
    /// The saved KV caches (`None`: `WARDEN_KV_SAVE=0`, or an engine
    /// without slot files).
    pub(crate) kv: Option<crate::kv_store::KvStore>,
    /// The store as status shows it, refreshed after each change of the
    /// store (not derived at each publish: reading it is a directory scan
    /// and a JSON parse per save, and every handler publishes). One cell
    /// for every resident's engine: they share the store's directory, and
    /// the warden's status reads the cell, not a snapshot that may predate
    /// another engine's save.
    pub(crate) kv_view: SharedStoreView,
    /// How children are started.
    pub(crate) launcher: Launcher,
    /// The other residents (`room`); `None` when this engine serves every model.
    pub(crate) peers: Option<Arc<dyn super::room::Peers>>,
    /// The turns routed to this engine (an eviction is refused while any).
    pub(crate) queue: Arc<crate::queue::QueueGauge>,
    /// The model whose load the residents' law admitted, until its child is
    /// published or the load failed (`room`: its reservation is given back).
    pub(crate) admitted: Option<String>,
    /// A test asked the next turn to panic once its model is loaded.
    #[cfg(feature = "testing")]
    pub(crate) panic_next_turn: bool,
}

impl EngineCore {
    /// A core with no child.
    pub fn new(cfg: Arc<WardenConfig>, backend: Backend, catalog: Arc<Catalog>, wiring: Wiring) -> Self {
        let Wiring {
            status_tx,
            events_tx,
            sensor,
            prefix,
            door_tx,
            idle_clock_tx,
            metrics,
            launcher,
            peers,
            queue,
            kv_view,
        } = wiring;
        let kv = super::kv::open_store(&cfg, &backend);
        let mut core = Self {
            cfg,
            backend,
            catalog,
            http: crate::child::client::shared_http_client(),
            child: None,
            status_tx,
            events_tx,
            last_used: None,
            turns: 0,
            activity: Activity::Resting,
            shut_down: false,
            idle_reload: None,
            sensor,
            brake: Brake::new(Instant::now()),
            prefix,
            door_tx,
            idle_clock_tx,
            metrics,
            keep_alive: None,
            kv: None,
            kv_view,
            launcher,
            peers,
            queue,
            admitted: None,
            #[cfg(feature = "testing")]
            panic_next_turn: false,
        };
        core.kv = kv;
        core.refresh_kv_view();
        core.publish();
        core
    }

    /// Reads the store's view into the shared cell (after a change of the
    /// store; `None` without one).
    pub(crate) fn refresh_kv_view(&self) {
        let view = self.kv.as_ref().map(|s| s.view());
        // A poisoned cell still holds a view; this write replaces it.
        *self.kv_view.write().unwrap_or_else(|p| p.into_inner()) = view;
    }

    /// Sends a lifecycle event (nobody listening is fine) after counting it.
    pub(crate) fn emit(&self, event: WardenEvent) {
        self.metrics.observe(&event);
        let _ = self.events_tx.send(event);
    }

    /// A named point of a handler: the engine is now busy with `activity`
    /// (or at rest), published at once so a reader sees a load or a turn as
    /// it starts. The end of every handler publishes anyway (`atomic`).
    pub(crate) fn enter(&mut self, activity: Activity) {
        self.activity = activity;
        self.publish();
    }

    /// Marks the idle clock at now.
    pub(crate) fn touch(&mut self) {
        self.last_used = Some(Used {
            at: Instant::now(),
            wall: SystemTime::now(),
        });
    }

    /// Looks a model id up; `None` is the default model.
    pub(crate) fn resolve(&self, id: Option<&str>) -> Result<Arc<ModelEntry>, WardenError> {
        match id {
            Some(id) => self
                .catalog
                .get(id)
                .ok_or_else(|| WardenError::ModelNotFound(id.to_string())),
            None => self.catalog.default_entry().ok_or(WardenError::NoModel),
        }
    }

    /// The classified death of the current child, clearing it.
    pub(crate) fn take_dead_child(&mut self) -> Option<GenerationError> {
        let info = self.child.as_ref()?.process.exit()?;
        let c = self.child.take()?;
        let code = classify_exit(&c, info);
        tracing::warn!(
            engine = self.backend.kind().tag(),
            model = c.model_id(),
            pid = c.process.pid(),
            code = code.as_str(),
            "the model server died ({info})"
        );
        self.emit(WardenEvent::ChildExited {
            model: c.model_id().to_string(),
            pid: c.process.pid(),
            code: code.as_str().into(),
        });
        // As in `retire`: the live brake state goes with the child.
        self.brake.state = Default::default();
        self.publish();
        Some(GenerationError::ChildDied {
            code,
            exit: info,
            raw: c.process.output().raw_tail(),
        })
    }
}

/// Classifies a dead child from its tail, its exit and the OOM counter.
pub(crate) fn classify_exit(c: &LiveChild, info: process::ExitInfo) -> EngineCode {
    let oom_kill_seen = crash::oom_killed_since(c.oom_kills_at_spawn, ram::oom_kill_count());
    let hints = Hints {
        stopped_by_us: c.process.stopped_by_us(),
        oom_kill_seen,
    };
    crash::classify(
        &c.process.output().tail(crate::child::output::RAW_TAIL_LINES),
        info.kind(),
        hints,
    )
}
