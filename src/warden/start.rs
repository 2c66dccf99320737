//! Starting a warden: the engine and its sensor on an arbiter of their own
//! (or the caller's, for tests on paused time), the MLX prefix cache's
//! owner, the worker watch, the idle timer and the memory history.

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::{broadcast, watch};

use super::{EVENTS_BUFFER, Inner, StartError, Warden};
use crate::actors::engine::Wiring;
use crate::actors::{EngineActor, EngineCore, IdleTimer, PrefixCacheActor, SensorActor};
use crate::catalog::Catalog;
use crate::config::WardenConfig;
use crate::engines::{self, Backend};
use crate::metrics::Metrics;
use crate::queue::QueueGauge;
use crate::sensors::history::{self, History};
use crate::sensors::view::{Latest, PressureView};
use crate::status::EngineStatus;

impl Warden {
    /// Starts the warden. Must run inside an actix `System`. Selection
    /// decides the engine; a CUDA machine that fails the pre-flight gets one
    /// clear notice (also in `/warden/status`) and the CPU engine.
    pub fn start(config: WardenConfig, catalog: Catalog) -> Result<Self, StartError> {
        let config = Arc::new(config);
        let (backend, note) = engines::preflight::choose(&config)?;
        Ok(Self::start_with(config, catalog, backend, note))
    }

    /// Starts the warden over an already built backend (tests, embedders
    /// with their own selection), with this platform's memory sensors.
    pub fn start_with(config: Arc<WardenConfig>, catalog: Catalog, backend: Backend, note: Option<String>) -> Self {
        Self::start_sensed(config, catalog, backend, note, Some(Arbiter::new().handle()))
    }

    /// As `start_with`, with the engine and its sensor on the caller's own
    /// arbiter (its thread and tokio runtime) instead of threads of their
    /// own: for tests, so that the engine's timers and the sensor's clock
    /// are the test's and `tokio::time::pause` controls them (with
    /// `child::fake`'s in-process child). A real child spawned so dies with
    /// the caller's thread.
    #[doc(hidden)]
    pub fn start_here(config: Arc<WardenConfig>, catalog: Catalog, backend: Backend) -> Self {
        Self::start_sensed(config, catalog, backend, None, None)
    }

    /// With this platform's `SensorActor`, on the engine's arbiter (`None`:
    /// the caller's). On the engine's thread it stops with the engine: a
    /// sample is a few small /proc reads (microseconds) between the relay's
    /// chunks.
    fn start_sensed(
        config: Arc<WardenConfig>,
        catalog: Catalog,
        backend: Backend,
        note: Option<String>,
        arbiter: Option<ArbiterHandle>,
    ) -> Self {
        let (sensor, view) = SensorActor::new(
            crate::sensors::pressure::default_provider(),
            config.force_pressure,
            config.sensor_period,
        );
        let latest = Some(sensor.subscribe());
        let w = Self::start_inner(
            config.clone(),
            catalog,
            backend,
            note,
            arbiter.clone(),
            Box::new(view),
            latest,
        );
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

    /// As `start_here`, with the brake's readings from `sensor` (a test's
    /// script) and no sensor clock, like `start_with_sensor`.
    #[doc(hidden)]
    pub fn start_here_with_sensor(
        config: Arc<WardenConfig>,
        catalog: Catalog,
        backend: Backend,
        sensor: Box<dyn PressureView>,
    ) -> Self {
        Self::start_inner(config, catalog, backend, None, None, sensor, None)
    }

    /// As `start_with`, with the brake's readings from `sensor` (a test's
    /// script, or an application's own provider) and no sensor clock: the
    /// caller sends `BrakeSample` when it wants an idle sample.
    pub fn start_with_sensor(
        config: Arc<WardenConfig>,
        catalog: Catalog,
        backend: Backend,
        note: Option<String>,
        sensor: Box<dyn PressureView>,
    ) -> Self {
        Self::start_inner(
            config,
            catalog,
            backend,
            note,
            Some(Arbiter::new().handle()),
            sensor,
            None,
        )
    }

    /// Starts the engine on `arbiter` (a long-lived thread of its own: the
    /// child's parent-death signal is tied to the thread that spawned it),
    /// or on the current one when `None`; then the MLX prefix cache's
    /// owner, the worker watch and the idle timer.
    fn start_inner(
        config: Arc<WardenConfig>,
        catalog: Catalog,
        backend: Backend,
        note: Option<String>,
        arbiter: Option<ArbiterHandle>,
        sensor: Box<dyn PressureView>,
        latest: Option<watch::Receiver<Latest>>,
    ) -> Self {
        // The catalog lists what this engine can run.
        let mut catalog = catalog;
        catalog.retain(|e| backend.accepts(e.format));
        let planner = backend.clone();
        let catalog = Arc::new(catalog);
        let (status_tx, status_rx) = watch::channel(EngineStatus::default());
        let (events_tx, _) = broadcast::channel(EVENTS_BUFFER);
        let (door_tx, door_rx) = watch::channel(None);
        let metrics = Arc::new(Metrics::default());
        // The prefix cache has an owner only on the MLX engine. Its address
        // exists before it runs: the engine tells it of a failed reset, and
        // it forwards turns to the engine.
        let prefix_ctx = backend.prefix_cache().then(Context::<PrefixCacheActor>::new);
        let (workers, views_tx) = crate::actors::engine::workers_link(&config, &backend);
        let worker_views = workers.as_ref().map(|w| w.views.clone());
        // The watch reads with the engine's own reader (one client, one key).
        let watch_remote = workers.as_ref().map(|w| w.remote.clone());
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
                metrics: metrics.clone(),
                workers,
            },
        );
        let engine = match &arbiter {
            Some(arbiter) => EngineActor::start_in_arbiter(arbiter, move |_| EngineActor::new(core)),
            None => EngineActor::new(core).start(),
        };
        let prefix = prefix_ctx.map(|ctx| ctx.run(PrefixCacheActor::new(engine.clone())));
        if let (Some(tx), Some(remote)) = (views_tx, watch_remote) {
            crate::rpc::remote::start_watch(remote, config.workers.clone(), tx, engine.clone().recipient());
        }
        let timer = IdleTimer::new(engine.clone().recipient(), status_rx.clone(), config.idle_tick).start();
        let history = Arc::new(History::new(config.ui_sample));
        history::start(&history, status_rx.clone(), latest);
        tracing::info!(
            engine = status_rx.borrow().engine.tag(),
            models = catalog.entries().len(),
            "warden started"
        );
        Self {
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
                worker_views,
                planner,
            }),
        }
    }
}
