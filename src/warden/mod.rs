//! `Warden`: the embedding API. An actix application starts one inside its
//! `System`; it selects the engine, starts one `EngineActor` per catalog
//! model, each on its own arbiter (a long-lived thread: a child's
//! parent-death signal is tied to the thread that spawned it) with its
//! `IdleTimer` (`residency`), and hands out the status watch, the event
//! stream and `submit`, which routes each turn to its model's engine.
//! Cheap to clone; every clone talks to the same engines.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, watch};

use crate::catalog::Catalog;
use crate::config::{Live, WardenConfig};
use crate::engines::Backend;
use crate::error::{EngineError, WardenError};
use crate::law::route::Route;
use crate::messages::prefix::ClaimPrefix;
use crate::messages::{Generate, Shutdown, TurnEvent};
use crate::metrics::Metrics;
use crate::queue::QueueGauge;
use crate::sensors::history::History;
use crate::status::{EngineKind, EngineStatus, WardenEvent};

// The arbiter is internal; its types are public with `testing`, as the
// engine's `Peers` that carries them is.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod arbiter;
#[cfg(not(feature = "testing"))]
pub(crate) mod arbiter;
#[cfg(test)]
mod arbiter_sim;
mod chunks;
mod control;
mod door;
pub(crate) mod plan;
mod recent;
mod reload;
mod residency;
mod start;

/// How long a request asks its model be kept (`TurnRequest::keep_alive`).
pub use crate::law::keep_alive::KeepAlive;
pub use crate::messages::{Resolved, TurnRequest};
pub use chunks::{Chunk, TurnStream};
pub use recent::{Numbered, RECENT_EVENTS};
pub use reload::Applied;
pub use start::WardenBuilder;

/// Events buffered per turn between the engine and its caller. Small: the
/// relay waits for a slow client rather than buffering its stream.
pub const TURN_EVENTS_BUFFER: usize = 64;
/// Lifecycle events kept for slow `/warden/events` readers.
pub(crate) const EVENTS_BUFFER: usize = 1024;

/// Why the warden could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The engine's child program is missing.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A running warden.
#[derive(Clone)]
pub struct Warden {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The engines, one per resident model, and the map that routes to them.
    residency: Arc<residency::Residency>,
    events: broadcast::Sender<WardenEvent>,
    /// The models as the last reload found them.
    catalog: Live<Catalog>,
    /// What each entry's files let a request send it, read once each.
    capabilities: crate::capabilities::CapabilityCache,
    /// The configuration as the last reload left it (`config::live`).
    config: Live<WardenConfig>,
    /// Every turn waiting or running, over all engines (`WARDEN_MAX_QUEUE`).
    queue: Arc<QueueGauge>,
    /// The next arrival number. Numbering and queueing happen under one
    /// short lock, so the numbers are the mailboxes' order even when two
    /// HTTP workers submit at once (the lock guards a counter, never a child).
    seq: std::sync::Mutex<u64>,
    /// The engine family.
    kind: EngineKind,
    engine_note: Option<String>,
    metrics: Arc<Metrics>,
    history: Arc<History>,
    /// The recent events, numbered (`/warden/events` replays them).
    recent: Arc<recent::Recent>,
    /// The worker watch's live views (status overlays them: the engine
    /// publishes only on changes of its own).
    worker_views: Option<watch::Receiver<Vec<crate::rpc::remote::WorkerView>>>,
    /// A copy of the engines' backend, which `plan_for` plans with as a
    /// load does (it holds paths and the GPU source, no child).
    planner: Backend,
    /// What an engine is started with: a reload starts the engine of a
    /// model that appeared.
    shell: start::Shell,
    /// The settings' reload and what it last said.
    reload: reload::Reload,
}

impl Drop for Inner {
    /// The last `Warden` is gone: nothing can reach the engines any more, so
    /// each stops its child (SIGTERM, grace, SIGKILL), and each engine's own
    /// arbiter stops after it, instead of a child running on until the
    /// process exits. After `Warden::shutdown` this finds them stopped.
    fn drop(&mut self) {
        for slot in self.residency.engines().iter() {
            let engine = slot.engine.clone();
            match &slot.arbiter {
                Some(arbiter) => {
                    arbiter.spawn(async move {
                        let _ = engine.send(crate::messages::Shutdown).await;
                        actix::Arbiter::current().stop();
                    });
                }
                None => engine.do_send(crate::messages::Shutdown),
            }
        }
    }
}

/// Whether the engine still holds a turn (its sender is alive).
#[derive(Debug, Clone)]
pub struct TurnWatch {
    sender: mpsc::WeakSender<TurnEvent>,
    /// The turn's arrival number (its `seq` in events and logs).
    pub seq: u64,
}

impl TurnWatch {
    /// The engine finished the turn or let it go (it holds no sender).
    pub fn engine_done(&self) -> bool {
        self.sender.upgrade().is_none()
    }
}

impl Warden {
    /// The latest status snapshot (never waits for a turn), with the
    /// workers as the watch sees them now.
    pub fn status(&self) -> EngineStatus {
        let mut s = self.inner.residency.status();
        if let (Some(w), Some(rx)) = (s.workers.as_mut(), &self.inner.worker_views) {
            w.workers = rx.borrow().clone();
        }
        s
    }

    /// The live child's last `lines` lines of output (redacted as captured),
    /// empty with no child; the most recently used resident's. Never waits
    /// for a turn.
    pub fn child_output_tail(&self, lines: usize) -> Vec<String> {
        self.door().map(|d| d.output_tail(lines)).unwrap_or_default()
    }

    /// The lines the live child's output log keeps apart from its ring
    /// (load lines, cancellations: `child::output`), empty with no child.
    pub fn child_output_kept(&self) -> Vec<String> {
        self.door().map(|d| d.output_kept()).unwrap_or_default()
    }

    /// A receiver of status changes (the warden's: any engine's change).
    pub fn watch_status(&self) -> watch::Receiver<EngineStatus> {
        self.inner.residency.watch()
    }

    /// A receiver of lifecycle events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<WardenEvent> {
        self.inner.events.subscribe()
    }

    /// The recent events after the numbered one `after` (every one kept
    /// when `None`: the last `RECENT_EVENTS`), then the live ones, all
    /// numbered (`/warden/events`).
    pub fn events_since(&self, after: Option<u64>) -> (Vec<Numbered>, broadcast::Receiver<Numbered>) {
        self.inner.recent.since(after)
    }

    /// The catalog now (a reload may replace it: this snapshot stays whole).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog.get()
    }

    /// The model a request for `model` (or the default) runs, resolved
    /// once: its entry and what its files let a request send it. A face
    /// that needs the model before the turn (its capabilities) resolves it
    /// here and hands the value on (`TurnRequest::resolved`); `submit`
    /// resolves it otherwise. Unknown: 404 `model_not_found`; no model at
    /// all: `no_model`.
    pub fn resolve(&self, model: Option<&str>) -> Result<Resolved, WardenError> {
        let catalog = self.inner.catalog.get();
        let entry = match model {
            Some(id) => catalog
                .get(id)
                .ok_or_else(|| WardenError::ModelNotFound(id.to_string()))?,
            None => catalog.default_entry().ok_or(WardenError::NoModel)?,
        };
        let caps = self.caps_of(&entry);
        Ok(Resolved { entry, caps })
    }

    /// `resolve` for a turn on `route`: a route this engine's child does
    /// not serve is refused first (501 `unsupported_route`, whatever the
    /// model), as `submit` orders them, so a face that resolves before it
    /// submits answers the same error.
    pub fn resolve_for(&self, route: Route, model: Option<&str>) -> Result<Resolved, WardenError> {
        self.served(route)?;
        self.resolve(model)
    }

    /// `Ok` when this engine's child serves `route`.
    fn served(&self, route: Route) -> Result<(), WardenError> {
        if route.served_by(self.engine_kind()) {
            Ok(())
        } else {
            Err(WardenError::UnsupportedRoute {
                route,
                engine: self.engine_kind(),
            })
        }
    }

    /// `entry`'s capabilities, its kind as served: a chat model whose GGUF
    /// has no chat template serves completions only unless its settings
    /// name one (`ModelKind::served`).
    pub(crate) fn caps_of(&self, entry: &Arc<crate::catalog::ModelEntry>) -> crate::capabilities::Capabilities {
        let mut caps = self.inner.capabilities.of(entry);
        let named = self.inner.config.get().names_chat_template(&entry.id);
        caps.kind = caps.kind.served(caps.lacks_chat_template && !named);
        caps
    }

    /// The configuration now (a reload may replace it: this snapshot
    /// stays whole).
    pub fn config(&self) -> Arc<WardenConfig> {
        self.inner.config.get()
    }

    /// The engine family.
    pub fn engine_kind(&self) -> EngineKind {
        self.inner.kind
    }

    /// A selection notice (why the engine is not what was asked for).
    pub fn engine_note(&self) -> Option<&str> {
        self.inner.engine_note.as_deref()
    }

    /// Turns waiting or running.
    pub fn queue_depth(&self) -> usize {
        self.inner.queue.depth()
    }

    /// Queues a chat turn. An unknown model is refused here (404) without
    /// touching the engine or its child; a full queue is refused (503).
    pub fn submit(&self, req: TurnRequest) -> Result<mpsc::Receiver<TurnEvent>, WardenError> {
        self.submit_watched(req).map(|(rx, _)| rx)
    }

    /// As `submit`, with a `TurnWatch` that tells when the engine is done
    /// with the turn (the HTTP layer closes a stalled client's connection
    /// only then, so the engine's own stall rule is the one that decides).
    pub fn submit_watched(&self, req: TurnRequest) -> Result<(mpsc::Receiver<TurnEvent>, TurnWatch), WardenError> {
        let route = req.route;
        let refused = |e: WardenError| {
            self.inner.metrics.refused(route, &e.code());
            e
        };
        // The model is resolved once, here or by the face before it; the
        // turn carries the entry. The route is refused first either way.
        let mut req = req;
        let Resolved { entry, caps } = match req.resolved.take() {
            Some(r) => self.served(route).map(|()| r),
            None => self.resolve_for(route, req.model.as_deref()),
        }
        .map_err(refused)?;
        // The model's settings fill what a generating request left out
        // (sampling defaults, a system prompt).
        let config = self.inner.config.get();
        if req.route.generates()
            && let Some(m) = config.models.get(&entry.id)
        {
            req.body.edit(|b| m.fill(b));
        }
        // A chat request to an embedding model, or the reverse, is the
        // client's mistake: said before it waits in the queue or loads;
        // so is a part the model cannot read (an image and no projector).
        if !req.route.serves(caps.kind, caps.reranks) {
            return Err(refused(WardenError::WrongKind {
                model: entry.id.clone(),
                kind: caps.kind,
                route: req.route.path(),
            }));
        }
        if let Some(v) = req.needs.unmet(caps, &entry.id) {
            return Err(refused(WardenError::Unmet(v)));
        }
        // No engine: a model the engine cannot run (the catalog lists only
        // what it can).
        let slot = self
            .inner
            .residency
            .engine(Some(&entry.id))
            .ok_or_else(|| refused(WardenError::ModelNotFound(entry.id.clone())))?;
        let max = config.max_queue;
        let ticket = self
            .inner
            .queue
            .try_enter_for(&slot.queue, max)
            .ok_or_else(|| refused(WardenError::QueueFull(max)))?;
        let (tx, rx) = mpsc::channel(TURN_EVENTS_BUFFER);
        // A poisoned lock still holds a valid counter.
        let mut next = self.inner.seq.lock().unwrap_or_else(|p| p.into_inner());
        let seq = *next;
        *next += 1;
        let watch = TurnWatch {
            sender: tx.downgrade(),
            seq,
        };
        let turn = Generate {
            request: req,
            entry,
            events: tx,
            seq,
            ticket: Some(ticket),
            home: actix_rt::Arbiter::try_current(),
        };
        match &slot.prefix {
            Some(prefix) => prefix.do_send(ClaimPrefix(turn)),
            None => slot.engine.do_send(turn),
        }
        drop(next);
        Ok((rx, watch))
    }

    /// The memory history behind `/warden/ui`'s chart.
    pub(crate) fn history(&self) -> &History {
        &self.inner.history
    }

    /// The counters behind `/metrics`.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Stops the child (SIGTERM, grace, SIGKILL) and the engine's arbiter.
    /// Call it before the application exits; a SIGKILLed application's child
    /// dies by the parent-death signal instead.
    pub async fn shutdown(&self) {
        let slots = self.inner.residency.engines();
        // Every child stops at once: each engine saves nothing at shutdown,
        // so the wait is one grace, not one per resident.
        let stops = slots.iter().map(|s| s.engine.send(Shutdown));
        for r in futures::future::join_all(stops).await {
            if let Err(e) = r {
                tracing::warn!("engine shutdown message failed: {e}");
            }
        }
        for slot in slots.iter() {
            if let Some(arbiter) = &slot.arbiter {
                arbiter.stop();
            }
        }
    }
}
