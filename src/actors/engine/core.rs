//! `EngineCore`: everything the engine owns, as plain async Rust. The actor
//! (`actors::engine`) moves the core into each atomic handler's future and
//! takes it back at the end, so the core is only ever touched by one message
//! at a time without a lock, and its logic reads as ordinary sequential code.

use std::sync::Arc;

use actix::Recipient;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::catalog::{Catalog, ModelEntry};
use crate::child::launch::Launcher;
use crate::child::process;
use crate::config::{Live, WardenConfig};
use crate::engines::Backend;
use crate::error::{GenerationError, WardenError};
pub(crate) use super::brake_state::Brake;
pub(crate) use super::child_holder::{ChildHolder, LiveChild};
pub(crate) use super::kv::Kv;
pub(crate) use super::state::{Activity, Usage, state};
use crate::law::crash::{self, EngineCode, Hints};
use crate::messages::prefix::ResetFailed;
use crate::metrics::Metrics;
use crate::sensors::ram;
use crate::sensors::view::PressureView;
use crate::status::{EngineStatus, WardenEvent};

/// What an engine core is wired to, given whole at its creation: the
/// pressure view its brake reads, the KV store's shared view, and the
/// outlets it talks through.
#[derive(Debug)]
pub struct Wiring {
    /// Where brake samples read the sensor's latest reading (a test's
    /// script instead); the brake controller's.
    pub sensor: Box<dyn PressureView>,
    /// The KV store as the status shows it, one cell for every engine; the
    /// KV controller's.
    pub kv_view: SharedStoreView,
    /// The channels and actors the core talks to.
    pub outlets: Outlets,
}

/// The channels and actors an engine core talks to, kept as one value.
#[derive(Debug)]
pub struct Outlets {
    /// Where status snapshots go.
    pub status_tx: watch::Sender<EngineStatus>,
    /// Where lifecycle events go.
    pub events_tx: broadcast::Sender<WardenEvent>,
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
    pub peers: Option<Arc<dyn super::peers::Peers>>,
    /// The turns routed to this engine, waiting or running.
    pub queue: Arc<crate::queue::QueueGauge>,
}

pub use super::kv::SharedStoreView;

/// The engine's whole state, divided by who writes it: the child holder
/// (`child_holder`: the child and the activity), the brake controller
/// (`brake_state`), the KV controller (`kv`) and the use (`state::Usage`)
/// each own their fields; the core's methods call theirs. What the core
/// writes itself is two flags of its own lifecycle.
#[derive(Debug)]
pub struct EngineCore {
    /// Configuration, as the settings file says now (`config::live`):
    /// read whole per decision through `cfg()`.
    pub(crate) settings: Live<WardenConfig>,
    /// The backend (CPU, CUDA, MLX).
    pub(crate) backend: Backend,
    /// The models, as the last scan found them.
    pub(crate) catalog: Live<Catalog>,
    /// The HTTP client shared by every child.
    pub(crate) http: reqwest::Client,
    /// Where the core talks.
    pub(crate) outlets: Outlets,
    /// The live child and what the engine is busy with.
    pub(crate) child: ChildHolder,
    /// The memory brake (its state and protocol; no I/O).
    pub(crate) brake: Brake,
    /// What the brake reads: the pressure view and the clock.
    pub(crate) sensor: crate::sensors::view::BrakeSensor,
    /// The saved KV caches.
    pub(crate) kv: Kv,
    /// The idle clock, the turn count, the keep-alive, the reaped model.
    pub(crate) usage: Usage,
    /// What waits to be admitted, what runs, a brake action held for the
    /// running turns, the last child's death.
    pub(crate) intake: super::intake::Intake<super::waiting::Live>,
    /// Set by `Shutdown`: no further child is started.
    pub(crate) shut_down: bool,
    /// The model whose load the residents' law admitted, until its child is
    /// published or the load failed (`room`: its reservation is given back).
    pub(crate) admitted: Option<String>,
    /// A load waiting for room among the residents (`peers::RoomWait`), between
    /// handlers.
    pub(crate) room: Option<super::peers::RoomWait>,
    /// The model this one yields its memory to, and why, once said
    /// (`schedule`).
    pub(crate) yielding: Option<(String, String)>,
    /// The engine's own address, for what runs beside its mailbox (set when
    /// the actor starts; `None` for a core driven without its actor).
    pub(crate) own: Option<Own>,
    /// A test asked the next turn to panic once its model is loaded.
    #[cfg(feature = "testing")]
    pub(crate) panic_next_turn: bool,
}

/// Where what runs beside the mailbox reports back to the engine.
#[derive(Debug)]
pub(crate) struct Own {
    /// A turn's relay task, at its end.
    pub ends: Recipient<super::relay::TurnRelayed>,
    /// A load waiting for room, when what it waits on changed
    /// (`peers::Wake`).
    pub wake: Recipient<super::peers::Wake>,
}

impl super::state::Used {
    /// Now, on both clocks: read here, by the core, when an event happens;
    /// the owners of the engine's state take the time as a value.
    pub fn read() -> Self {
        Self {
            at: tokio::time::Instant::now(),
            wall: std::time::SystemTime::now(),
        }
    }
}

impl EngineCore {
    /// A core with no child.
    pub fn new(settings: Live<WardenConfig>, backend: Backend, catalog: Live<Catalog>, wiring: Wiring) -> Self {
        let Wiring {
            sensor,
            kv_view,
            outlets,
        } = wiring;
        let kv = Kv::open(&settings.get(), &backend, kv_view);
        let core = Self {
            settings,
            backend,
            catalog,
            http: crate::child::client::shared_http_client(),
            outlets,
            child: ChildHolder::default(),
            brake: Brake::default(),
            sensor: crate::sensors::view::BrakeSensor::new(sensor),
            kv,
            usage: Usage::default(),
            intake: Default::default(),
            shut_down: false,
            admitted: None,
            room: None,
            yielding: None,
            own: None,
            #[cfg(feature = "testing")]
            panic_next_turn: false,
        };
        core.publish();
        core
    }

/// Sends a lifecycle event (nobody listening is fine) after counting it.
    pub(crate) fn emit(&self, event: WardenEvent) {
        self.outlets.metrics.observe(&event);
        let _ = self.outlets.events_tx.send(event);
    }

    /// A named point of a handler: the engine is now busy with `activity`
    /// (or at rest), published at once so a reader sees a load or a turn as
    /// it starts. The end of every handler publishes anyway (`atomic`).
    pub(crate) fn enter(&mut self, activity: Activity) {
        self.child.set_activity(activity);
        self.publish();
    }

    /// Looks a model id up; `None` is the default model.
    pub(crate) fn resolve(&self, id: Option<&str>) -> Result<Arc<ModelEntry>, WardenError> {
        let catalog = self.catalog.get();
        match id {
            Some(id) => catalog.get(id).ok_or_else(|| WardenError::ModelNotFound(id.to_string())),
            None => catalog.default_entry().ok_or(WardenError::NoModel),
        }
    }

    /// The configuration now: one snapshot per decision.
    pub(crate) fn cfg(&self) -> Arc<WardenConfig> {
        self.settings.get()
    }

    /// The classified death of the current child, clearing it.
    pub(crate) fn take_dead_child(&mut self) -> Option<GenerationError> {
        let (c, info) = self.child.take_dead()?;
        let code = classify_exit(&c, info);
        tracing::warn!(
            engine = %self.backend.kind().name(),
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
        self.brake.child_gone();
        self.intake.forget_brake();
        self.publish();
        let e = GenerationError::ChildDied {
            code,
            exit: info,
            raw: c.process.output().raw_tail(),
        };
        // Every other turn that ran on it is told the same.
        self.intake.record_death(c.process.pid(), &e);
        Some(e)
    }
}

/// Classifies a dead child from its tail, its exit and the OOM counter.
pub(crate) fn classify_exit(c: &LiveChild, info: process::ExitInfo) -> EngineCode {
    let oom_kill_seen = crash::oom_killed_since(c.oom_kills_at_spawn, ram::oom_kill_count());
    let hints = Hints {
        stopped_by_us: c.process.stopped_by_us(),
        oom_kill_seen,
        // A child that served died of something else than its bind.
        port_held: false,
    };
    crash::classify(
        &c.process.output().tail(crate::child::output::RAW_TAIL_LINES),
        info.kind(),
        hints,
    )
}
