//! Starting a warden: `WardenBuilder` (the config, the catalog, and what an
//! embedder or a test may choose: the backend, the brake's readings, the
//! arbiter), then the assembly: the engine and its sensor on an arbiter of
//! their own (or the caller's, for tests on paused time), the MLX prefix
//! cache's owner, the worker watch, the idle timer and the memory history.

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::{broadcast, watch};

use super::{EVENTS_BUFFER, Inner, StartError, Warden};
use crate::actors::engine::Wiring;
use crate::actors::{EngineActor, EngineCore, IdleTimer, PrefixCacheActor, SensorActor};
use crate::catalog::Catalog;
use crate::child::launch::Launcher;
use crate::config::WardenConfig;
use crate::engines::{self, Backend};
use crate::metrics::Metrics;
use crate::queue::QueueGauge;
use crate::sensors::history::{self, History};
use crate::sensors::view::{Latest, PressureView};
use crate::status::EngineStatus;

/// How to start a warden: `Warden::builder(config, catalog)`, then any of
/// the choices below, then `start`. Must start inside an actix `System`.
pub struct WardenBuilder {
    config: WardenConfig,
    catalog: Catalog,
    /// `None`: selection and the CUDA pre-flight decide.
    backend: Option<Backend>,
    /// `None`: this platform's memory sensors on their own clock.
    sensor: Option<Box<dyn PressureView>>,
    /// The engine on the caller's arbiter instead of one of its own.
    here: bool,
    /// How the engine starts its child.
    launcher: Launcher,
}

impl Warden {
    /// A warden to start over `catalog` with `config`.
    pub fn builder(config: WardenConfig, catalog: Catalog) -> WardenBuilder {
        WardenBuilder {
            config,
            catalog,
            backend: None,
            sensor: None,
            here: false,
            launcher: Launcher::default(),
        }
    }

    /// Starts a warden with everything chosen by the machine: selection
    /// decides the engine; a CUDA machine that fails the pre-flight gets one
    /// clear notice (also in `/warden/status`) and the CPU engine.
    pub fn start(config: WardenConfig, catalog: Catalog) -> Result<Self, StartError> {
        Self::builder(config, catalog).start()
    }
}

impl WardenBuilder {
    /// Runs on `backend` instead of the one selection would choose (an
    /// embedder with its own selection, a test's fake child).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Takes the brake's readings from `view` (an application's own
    /// provider, a test's script) with no sensor clock: the caller sends
    /// the idle samples it wants.
    pub fn sensor(mut self, view: Box<dyn PressureView>) -> Self {
        self.sensor = Some(view);
        self
    }

    /// Starts each child with `launcher`: an OS process, always, outside
    /// tests; with the `testing` feature a test may hand it an in-process
    /// fake (`child::fake`).
    #[doc(hidden)]
    pub fn launcher(mut self, launcher: Launcher) -> Self {
        self.launcher = launcher;
        self
    }

    /// Runs the engine (and its sensor) on the caller's own arbiter, its
    /// thread and tokio runtime, instead of threads of their own: for
    /// tests, so that `tokio::time::pause` controls the engine's timers
    /// (with `child::fake`'s in-process child). A real child spawned so
    /// dies with the caller's thread.
    #[doc(hidden)]
    pub fn on_this_arbiter(mut self) -> Self {
        self.here = true;
        self
    }

    /// Starts it.
    pub fn start(self) -> Result<Warden, StartError> {
        let config = Arc::new(self.config);
        let (backend, note) = match self.backend {
            Some(b) => (b, None),
            None => engines::preflight::choose(&config)?,
        };
        // A long-lived thread of the engine's own: the child's parent-death
        // signal is tied to the thread that spawned it.
        let arbiter = (!self.here).then(|| Arbiter::new().handle());
        let parts = Parts {
            config: config.clone(),
            catalog: self.catalog,
            backend,
            note,
            arbiter: arbiter.clone(),
            launcher: self.launcher,
        };
        let Some(view) = self.sensor else {
            return Ok(sensed(parts));
        };
        Ok(assemble(parts, view, None))
    }
}

/// What every start assembles from.
struct Parts {
    config: Arc<WardenConfig>,
    catalog: Catalog,
    backend: Backend,
    note: Option<String>,
    /// `None`: the caller's.
    arbiter: Option<ArbiterHandle>,
    launcher: Launcher,
}

/// With this platform's `SensorActor`, on the engine's arbiter. On the
/// engine's thread it stops with the engine: a sample is a few small /proc
/// reads (microseconds) between the relay's chunks.
fn sensed(parts: Parts) -> Warden {
    let (sensor, view) = SensorActor::new(
        crate::sensors::pressure::default_provider(),
        parts.config.force_pressure,
        parts.config.sensor_period,
    );
    let latest = Some(sensor.subscribe());
    let (config, arbiter) = (parts.config.clone(), parts.arbiter.clone());
    let w = assemble(parts, Box::new(view), latest);
    let sensor = sensor.brake_samples_to(
        w.inner.engine.clone().recipient(),
        w.inner.status.clone(),
        config.brake_tick,
    );
    match &arbiter {
        Some(a) => SensorActor::start_in_arbiter(a, move |_| sensor),
        None => sensor.start(),
    };
    w
}

/// Starts the engine on the parts' arbiter, or on the current one when
/// `None`; then the MLX prefix cache's owner, the worker watch and the
/// idle timer.
fn assemble(parts: Parts, sensor: Box<dyn PressureView>, latest: Option<watch::Receiver<Latest>>) -> Warden {
    let Parts {
        config,
        catalog,
        backend,
        note,
        arbiter,
        launcher,
    } = parts;
    // The catalog lists what this engine can run.
    let mut catalog = catalog;
    catalog.retain(|e| backend.accepts(e.format));
    let planner = backend.clone();
    let catalog = Arc::new(catalog);
    let (status_tx, status_rx) = watch::channel(EngineStatus::default());
    let (events_tx, _) = broadcast::channel(EVENTS_BUFFER);
    // Recording from before the engine runs: its first event is kept.
    let recent = super::recent::Recent::start(&events_tx);
    let (door_tx, door_rx) = watch::channel(None);
    let (idle_clock_tx, idle_clock_rx) = watch::channel(None);
    let metrics = Arc::new(Metrics::default());
    // The prefix cache has an owner only on the MLX engine. Its address
    // exists before it runs: the engine tells it of a failed reset, and
    // it forwards turns to the engine.
    let prefix_ctx = backend.prefix_cache().then(Context::<PrefixCacheActor>::new);
    let (workers, views_tx) = crate::actors::engine::workers_link(&config, &backend);
    let worker_views = workers.as_ref().map(|w| w.views.clone());
    // The watch reads with the engine's own reader (one client, one key).
    let watch_remote = workers.as_ref().map(|w| w.remote.clone());
    // The link is the CPU engine's own state (its loads split over it).
    let mut backend = backend;
    if let Backend::Cpu(cpu) = &mut backend {
        cpu.workers = workers;
    }
    let core = EngineCore::new(
        config.clone(),
        backend,
        catalog.clone(),
        Wiring {
            status_tx,
            events_tx: events_tx.clone(),
            sensor,
            prefix: prefix_ctx.as_ref().map(|c| c.address().recipient()),
            door_tx,
            idle_clock_tx,
            metrics: metrics.clone(),
            launcher,
        },
    );
    let engine = match &arbiter {
        Some(arbiter) => EngineActor::start_in_arbiter(arbiter, move |_| EngineActor::new(core)),
        None => EngineActor::new(core).start(),
    };
    let prefix = prefix_ctx.map(|ctx| ctx.run(PrefixCacheActor::new(engine.clone())));
    if let (Some(tx), Some(remote)) = (views_tx, watch_remote) {
        let check = engine.clone();
        crate::rpc::remote::start_watch(remote, config.workers.clone(), tx, move || {
            check.do_send(crate::messages::WorkerCheck)
        });
    }
    let timer = IdleTimer::new(
        engine.clone().recipient(),
        status_rx.clone(),
        idle_clock_rx,
        config.idle_tick,
    )
    .start();
    let history = Arc::new(History::new(config.ui_sample));
    history::start(&history, status_rx.clone(), latest);
    tracing::info!(
        engine = status_rx.borrow().engine.tag(),
        models = catalog.entries().len(),
        "warden started"
    );
    Warden {
        inner: Arc::new(Inner {
            engine,
            prefix,
            _timer: timer,
            status: status_rx,
            events: events_tx,
            catalog,
            capabilities: Default::default(),
            config,
            queue: Arc::new(QueueGauge::default()),
            seq: std::sync::Mutex::new(0),
            arbiter,
            engine_note: note,
            door: door_rx,
            metrics,
            history,
            recent,
            worker_views,
            planner,
        }),
    }
}
