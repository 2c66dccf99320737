//! Starting a warden: `WardenBuilder` (the config, the catalog, and what an
//! embedder or a test may choose: the backend, the brake's readings, the
//! arbiter, where a reload reads the settings), then the assembly: the
//! engine and its sensor on an arbiter of their own (or the caller's, for
//! tests on paused time), the MLX prefix cache's owner, the worker watch,
//! the idle timer, the memory history and the settings' watch.

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use tokio::sync::{broadcast, watch};

use super::reload::Sources;
use super::residency::{EngineHandle, Residency};
use super::{EVENTS_BUFFER, Inner, StartError, Warden};
use crate::actors::engine::{Outlets, SharedStoreView, Wiring};
use crate::actors::{EngineActor, EngineCore, IdleTimer, PrefixCacheActor, SensorActor};
use crate::catalog::Catalog;
use crate::child::launch::Launcher;
use crate::config::{Live, WardenConfig};
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
    /// Where a reload reads the settings and the catalog (`None`: never).
    sources: Option<Sources>,
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
            sources: None,
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
    /// Runs on `backend` instead of the one selection would choose (a
    /// test's fake child; the engines are not part of the public face).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Takes the brake's readings from `view` (a test's script) with no
    /// sensor clock: the caller sends the idle samples it wants.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn sensor(mut self, view: Box<dyn PressureView>) -> Self {
        self.sensor = Some(view);
        self
    }

    /// Starts each child with `launcher`: an OS process, always, outside
    /// tests; with the `testing` feature a test may hand it an in-process
    /// fake (`child::fake`).
    #[cfg(feature = "testing")]
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
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn on_this_arbiter(mut self) -> Self {
        self.here = true;
        self
    }

    /// Reads the settings and the catalog again with `sources` whenever
    /// `Warden::reload` is called, and every `WARDEN_WATCH_S` (2 s) when
    /// that is not zero: `sources` should build them the way this
    /// builder's were built (the binary's re-reads the environment, the
    /// settings file and the model stores). A change applies live
    /// (`warden::reload`); a refusal keeps the last good settings.
    pub fn reload_from(
        mut self,
        sources: impl Fn() -> Result<(WardenConfig, Catalog), crate::status::SettingsProblem> + Send + Sync + 'static,
    ) -> Self {
        self.sources = Some(Arc::new(sources));
        self
    }

    /// Starts it.
    pub fn start(self) -> Result<Warden, StartError> {
        let config = Arc::new(self.config);
        let (backend, note) = match self.backend {
            Some(b) => (b, None),
            None => engines::preflight::choose(&config)?,
        };
        let parts = Parts {
            config: config.clone(),
            catalog: self.catalog,
            backend,
            note,
            here: self.here,
            launcher: self.launcher,
            sources: self.sources,
        };
        Ok(match self.sensor {
            None => sensed(parts),
            Some(view) => assemble(parts, Views::Given(Arc::new(Mutex::new(view))), None),
        })
    }
}

/// What every start assembles from.
struct Parts {
    config: Arc<WardenConfig>,
    catalog: Catalog,
    backend: Backend,
    note: Option<String>,
    /// The engines on the caller's arbiter.
    here: bool,
    launcher: Launcher,
    sources: Option<Sources>,
}

/// Where each engine's brake reads its readings: the sensor's latest (a
/// view of its own per engine: it keeps its turn's swap-out count), or an
/// embedder's or a test's one view, shared.
enum Views {
    Sensor(watch::Receiver<Latest>),
    Given(Arc<Mutex<Box<dyn PressureView>>>),
}

impl Views {
    fn one(&self) -> Box<dyn PressureView> {
        match self {
            Self::Sensor(latest) => Box::new(crate::sensors::view::SensorView::new(latest.clone())),
            Self::Given(shared) => Box::new(Shared(shared.clone())),
        }
    }
}

/// A given view, shared by every engine (one reading at a time).
#[derive(Debug)]
struct Shared(Arc<Mutex<Box<dyn PressureView>>>);

impl PressureView for Shared {
    fn read(
        &mut self,
        point: crate::law::brake::Point,
    ) -> Result<crate::law::brake::Readings, crate::sensors::view::BrakeOff> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).read(point)
    }
}

/// With this platform's `SensorActor`, on the first engine's arbiter (a
/// sample is a few small /proc reads, microseconds, between the relay's
/// chunks). Its idle samples go to every engine with a model loaded.
fn sensed(parts: Parts) -> Warden {
    let (sensor, _) = SensorActor::new(
        crate::sensors::pressure::default_provider(),
        parts.config.force_pressure,
        parts.config.sensor_period,
    );
    let latest = sensor.subscribe();
    let brake_tick = parts.config.brake_tick;
    let w = assemble(parts, Views::Sensor(latest.clone()), Some(latest));
    let residency = Arc::downgrade(&w.inner.residency);
    let sensor = sensor.brake_samples_to(
        Box::new(move || residency.upgrade().map(|r| r.loaded_engines()).unwrap_or_default()),
        brake_tick,
    );
    match w.inner.residency.engines().first().and_then(|s| s.arbiter.clone()) {
        Some(a) => SensorActor::start_in_arbiter(&a, move |_| sensor),
        None => sensor.start(),
    };
    w
}

/// What each engine is started with beside its model: kept by the warden,
/// which starts the engine of a model a reload found.
pub(super) struct Shell {
    config: Live<WardenConfig>,
    backend: Backend,
    catalog: Live<Catalog>,
    events_tx: broadcast::Sender<crate::status::WardenEvent>,
    metrics: Arc<Metrics>,
    launcher: Launcher,
    views: Views,
    here: bool,
    /// `None`: one engine for every model (no peers).
    pub(super) residency: Option<Arc<Residency>>,
    /// The KV store's view, one cell for every engine.
    kv_view: SharedStoreView,
}

impl Shell {
    /// One engine, on an arbiter of its own (a long-lived thread: its
    /// child's parent-death signal is tied to the thread that spawned it),
    /// with its idle timer and, on MLX, its prefix cache's owner.
    pub(super) fn engine(&self, model: Option<String>) -> EngineHandle {
        let (status_tx, status_rx) = watch::channel(EngineStatus::default());
        let (door_tx, door_rx) = watch::channel(None);
        let (idle_clock_tx, idle_clock_rx) = watch::channel(None);
        let queue = Arc::new(QueueGauge::default());
        // The prefix cache has an owner only on the MLX engine. Its address
        // exists before it runs: the engine tells it of a failed reset, and
        // it forwards turns to the engine.
        let prefix_ctx = self.backend.prefix_cache().then(Context::<PrefixCacheActor>::new);
        let core = EngineCore::new(
            self.config.clone(),
            self.backend.clone(),
            self.catalog.clone(),
            Wiring {
                sensor: self.views.one(),
                kv_view: self.kv_view.clone(),
                outlets: Outlets {
                    status_tx,
                    events_tx: self.events_tx.clone(),
                    prefix: prefix_ctx.as_ref().map(|c| c.address().recipient()),
                    door_tx,
                    idle_clock_tx,
                    metrics: self.metrics.clone(),
                    launcher: self.launcher.clone(),
                    peers: self.residency.as_ref().map(|r| r.peers()),
                    queue: queue.clone(),
                },
            },
        );
        let arbiter = (!self.here).then(|| Arbiter::new().handle());
        let engine = match &arbiter {
            Some(arbiter) => EngineActor::start_in_arbiter(arbiter, move |_| EngineActor::new(core)),
            None => EngineActor::new(core).start(),
        };
        let prefix = prefix_ctx.map(|ctx| ctx.run(PrefixCacheActor::new(engine.clone())));
        let cfg = self.config.get();
        let mut timer = IdleTimer::new(
            engine.clone().recipient(),
            status_rx.clone(),
            idle_clock_rx,
            cfg.idle_tick,
        );
        if cfg.kv_save {
            timer = timer.save_ahead(engine.clone().recipient(), cfg.kv_save_ahead);
        }
        let timer = timer.start();
        EngineHandle::new(model, engine, prefix, status_rx, door_rx, queue, arbiter, timer)
    }
}

/// Starts the engines (one per catalog model, or one for every model on
/// MLX and over RPC workers: `residency`), then the worker watch and the
/// memory history.
fn assemble(parts: Parts, views: Views, latest: Option<watch::Receiver<Latest>>) -> Warden {
    let Parts {
        config,
        catalog,
        backend,
        note,
        here,
        launcher,
        sources,
    } = parts;
    let catalog = super::reload::servable(&backend, &config, catalog);
    for note in catalog.notes() {
        tracing::warn!("{note}");
    }
    let config = Arc::new(super::reload::layered((*config).clone(), &catalog));
    let planner = backend.clone();
    let kind = backend.kind();
    let (events_tx, _) = broadcast::channel(EVENTS_BUFFER);
    // Recording from before the engines run: their first event is kept.
    let recent = super::recent::Recent::start(&events_tx);
    let metrics = Arc::new(Metrics::default());
    let (workers, views_tx) = crate::actors::engine::workers_link(&config, &backend);
    let worker_views = workers.as_ref().map(|w| w.views.clone());
    // The watch reads with the engine's own reader (one client, one key).
    let watch_remote = workers.as_ref().map(|w| w.remote.clone());
    // An empty catalog gets no engine yet: a reload starts one per model
    // that appears (a warden started before its first download).
    let one_engine = backend.prefix_cache() || workers.is_some();
    // The link is the CPU engine's own state (its loads split over it).
    let mut backend = backend;
    if let Backend::Cpu(cpu) = &mut backend {
        cpu.workers = workers;
    }
    let kv_view = SharedStoreView::default();
    let residency = Residency::new(
        catalog.default_entry().map(|e| e.id.clone()),
        config.max_resident,
        kv_view.clone(),
    );
    let live_config = Live::new((*config).clone());
    let live_catalog = Live::new(catalog.clone());
    let shell = Shell {
        config: live_config.clone(),
        backend,
        catalog: live_catalog.clone(),
        events_tx: events_tx.clone(),
        metrics: metrics.clone(),
        launcher,
        views,
        here,
        residency: (!one_engine).then(|| residency.clone()),
        kv_view,
    };
    let slots: Vec<Arc<EngineHandle>> = if one_engine {
        vec![Arc::new(shell.engine(None))]
    } else {
        catalog
            .entries()
            .iter()
            .map(|e| Arc::new(shell.engine(Some(e.id.clone()))))
            .collect()
    };
    for slot in &slots {
        follow(slot, &residency);
    }
    residency.set_engines(slots);
    if let (Some(tx), Some(remote), Some(slot)) = (views_tx, watch_remote, residency.engines().first()) {
        let check = slot.engine.clone();
        crate::rpc::remote::start_watch(remote, config.workers.clone(), tx, move || {
            check.do_send(crate::messages::WorkerCheck)
        });
    }
    let status_rx = residency.watch();
    let history = Arc::new(History::new(config.ui_sample));
    history::start(&history, status_rx.clone(), latest);
    tracing::info!(
        engine = %kind.name(),
        models = catalog.entries().len(),
        default_model = %catalog.default_id().unwrap_or_else(|| "none".into()),
        engines = residency.engines().len(),
        "warden started"
    );
    let warden = Warden {
        inner: Arc::new(Inner {
            residency,
            events: events_tx,
            catalog: live_catalog,
            capabilities: Default::default(),
            config: live_config,
            queue: Arc::new(QueueGauge::default()),
            seq: std::sync::Mutex::new(0),
            kind,
            engine_note: note,
            metrics,
            history,
            recent,
            worker_views,
            planner,
            shell,
            reload: super::reload::Reload::new(sources, config.settings_file.as_deref()),
        }),
    };
    super::reload::watch(&warden, config.watch_period);
    warden
}

/// The warden's status follows `slot`'s: republished at each change, until
/// the residency or the engine is gone.
pub(super) fn follow(slot: &EngineHandle, residency: &Arc<Residency>) {
    let mut rx = slot.status.clone();
    let residency = Arc::downgrade(residency);
    actix::spawn(async move {
        while rx.changed().await.is_ok() {
            match residency.upgrade() {
                Some(r) => r.republish(),
                None => break,
            }
        }
    });
}
