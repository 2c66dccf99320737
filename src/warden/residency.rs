//! The residency: one `EngineActor` per model (`EngineHandle`), each exactly the
//! design card's shape (its own child, port, per-spawn key, window, brake
//! state, idle clock and keep-alive, its mailbox serializing that child's
//! work), and the map from model to engine that routes a turn. Turns for
//! different models run at once, each engine on its own arbiter.
//!
//! Every decision between residents is the arbiter's (`warden::arbiter`, a
//! machine with no I/O), asked by the engine that loads
//! (`actors::engine::room`) or admits a turn (`schedule`) through `Peers`,
//! which this answers from each engine's published status and queue (as
//! `arbiter::Seat`s): no mailbox is asked, and the one lock (the
//! arbiter's) is held for its arithmetic only, so that each admission sees
//! the reservation of the one before it. A waiting load is woken when what
//! the arbiter reads changes (`touch_room`, over `Arbiter::wake_key`), not
//! at every status an engine publishes. (ARCHITECTURE.md
//! drew a residency actor; its every decision is a pure function over
//! published state that awaits nothing, so an actor would only add a hop
//! to every turn's route and an await to every load.)
//!
//! Every catalog model has its engine from the start (a thread and a few
//! watches each; no child until a request), so routing never creates an
//! actor on a caller's thread. A reload (`warden::reload`) adds the engine
//! of a model that appeared and takes away one whose model left, once it
//! is idle: the list is replaced whole, so a reader holds one version. Two engines keep today's one engine for
//! every model, switching: MLX (mlx_vlm.server's footprint is known only
//! after its load, so no law can admit it beside another, and its prefix
//! cache's owner serves one child) and RPC workers (the split spreads one
//! model over the workers' memory, which the residents' law does not see).
//!
//! The status is the most recently used resident's snapshot with every
//! resident listed (`residents`), republished whenever an engine publishes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use actix::prelude::*;
use tokio::sync::watch;

use super::arbiter::{Arbiter, LoadAsk, LoadStep, Seat, WakeKey};
use crate::actors::engine::{Door, Peers, SharedStoreView};
use crate::actors::{EngineActor, IdleTimer, PrefixCacheActor};
use crate::law::brake::{BrakeState, WindowFacts};
use crate::law::residents::Resident;
use crate::law::schedule::{self, Holder, Next};
use crate::messages::{BrakeSample, Evict};
use crate::queue::QueueGauge;
use crate::status::{EngineState, EngineStatus, ResidentView};

/// One engine and what the warden reads of it without its mailbox.
#[derive(Debug)]
pub(crate) struct EngineHandle {
    /// The model it serves; `None`: every model, one at a time.
    pub model: Option<String>,
    pub engine: Addr<EngineActor>,
    /// The MLX prefix cache's owner, which turns reach the engine through.
    pub prefix: Option<Addr<PrefixCacheActor>>,
    pub status: watch::Receiver<EngineStatus>,
    pub door: watch::Receiver<Option<Door>>,
    /// Turns routed to it, waiting or running.
    pub queue: Arc<QueueGauge>,
    /// Bytes an admitted load reserved until its child is published (0: none).
    reserved: AtomicU64,
    /// Its own arbiter; `None` on the caller's (`on_this_arbiter`).
    pub arbiter: Option<ArbiterHandle>,
    pub _timer: Addr<IdleTimer>,
}

impl EngineHandle {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model: Option<String>,
        engine: Addr<EngineActor>,
        prefix: Option<Addr<PrefixCacheActor>>,
        status: watch::Receiver<EngineStatus>,
        door: watch::Receiver<Option<Door>>,
        queue: Arc<QueueGauge>,
        arbiter: Option<ArbiterHandle>,
        timer: Addr<IdleTimer>,
    ) -> Self {
        Self {
            model,
            engine,
            prefix,
            status,
            door,
            queue,
            reserved: AtomicU64::new(0),
            arbiter,
            _timer: timer,
        }
    }

    /// Its child holds memory, or its load was admitted.
    fn resident(&self, s: &EngineStatus) -> bool {
        s.child_pid.is_some() || s.state == EngineState::Loading || self.reserved.load(Ordering::Acquire) > 0
    }

    /// As the law sees it (the window and brake state are the engine's own
    /// business: only the sampled resident's matter, and it gives its own).
    fn as_resident(&self, s: &EngineStatus) -> Option<Resident> {
        let model = s.model.clone().or_else(|| self.model.clone())?;
        let reserved = self.reserved.load(Ordering::Acquire);
        Some(Resident {
            model,
            kind: s.kind.unwrap_or_default(),
            footprint_bytes: s.held_bytes.unwrap_or(0).max(reserved),
            last_used_ms: s.last_used.unwrap_or(0),
            in_flight: matches!(s.state, EngineState::Generating | EngineState::Loading) || reserved > 0,
            pinned: s.pinned,
            reload_ms: reload_ms(s),
            queued: self.queue.depth() as u32,
            window: WindowFacts {
                allocated: s.context_tokens.unwrap_or(0),
                ..WindowFacts::default()
            },
            brake: BrakeState::default(),
        })
    }

    fn view(&self, s: &EngineStatus) -> Option<ResidentView> {
        let model = s.model.clone().or_else(|| self.model.clone())?;
        let reserved = self.reserved.load(Ordering::Acquire);
        Some(ResidentView {
            model,
            kind: s.kind,
            state: s.state,
            child_pid: s.child_pid,
            port: s.port,
            context_tokens: s.context_tokens,
            footprint_bytes: s.held_bytes.or((reserved > 0).then_some(reserved)),
            idle_deadline_ms: s.idle_deadline_ms,
            last_used: s.last_used,
            queue_depth: self.queue.depth(),
            turns: s.turns,
            slots: s.slots.len(),
            busy_slots: s.slots.iter().filter(|x| x.busy).count(),
            pool: s.pool.clone(),
            loads: s.loads,
        })
    }
}

/// The map from model to engine, and the residents' law over it.
#[derive(Debug)]
pub(crate) struct Residency {
    /// Set at start, after the engines (which hold a weak link back), and
    /// replaced whole by a reload.
    slots: RwLock<Arc<Vec<Arc<EngineHandle>>>>,
    /// The catalog's default model (a reload may change it).
    default_model: RwLock<Option<String>>,
    /// `WARDEN_MAX_RESIDENT`.
    max_resident: Option<usize>,
    /// The warden's status: the most recently used resident's, with all.
    combined: watch::Sender<EngineStatus>,
    /// The KV store's view, which every engine refreshes.
    kv_view: SharedStoreView,
    /// The settings as the last reload left them (`None`: no reloads).
    settings: RwLock<Option<crate::status::SettingsStatus>>,
    /// Every decision between residents (`arbiter`): one at a time, so
    /// each admission sees the reservation of the one before it; held for
    /// the machine's arithmetic only, never across an await.
    arbiter: Mutex<Arbiter>,
    /// The arbiter's clock: ms since this.
    epoch: std::time::Instant,
    /// What the residents' law last read (`RoomKey`), and a count bumped
    /// whenever it changes: what a waiting load is woken by. The warden's
    /// status changes at every handler's end, a waiting engine's own
    /// included, so waking on it would wake a waiting load by its own wait.
    room_key: Mutex<Option<RoomKey>>,
    room: watch::Sender<u64>,
}

/// What the admission, the eviction and the line read of the residents:
/// the residents as the law sees them, each waiting load and the residents
/// it waits on, and who lets whom go first.
type RoomKey = WakeKey;

impl Residency {
    pub fn new(default_model: Option<String>, max_resident: Option<usize>, kv_view: SharedStoreView) -> Arc<Self> {
        Arc::new(Self {
            slots: Default::default(),
            default_model: RwLock::new(default_model),
            max_resident,
            combined: watch::Sender::new(EngineStatus::default()),
            kv_view,
            settings: RwLock::new(None),
            arbiter: Mutex::default(),
            epoch: std::time::Instant::now(),
            room_key: Mutex::new(None),
            room: watch::Sender::new(0),
        })
    }

    /// The settings' status from now on (published at once).
    pub fn set_settings(&self, s: crate::status::SettingsStatus) {
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = Some(s);
        self.republish();
        // A reload may change the budget, the pins or the weights: every
        // waiting load decides again.
        self.room.send_modify(|n| *n += 1);
    }

    /// The settings' status now.
    pub fn settings(&self) -> Option<crate::status::SettingsStatus> {
        self.settings.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What an engine holds of its peers: a weak link (the residency owns
    /// the engines' addresses; an engine must not keep it alive).
    pub fn peers(self: &Arc<Self>) -> Arc<dyn Peers> {
        Arc::new(Peerage(Arc::downgrade(self)))
    }

    /// Installs the engines (at start, and at each reload that adds or
    /// takes one away) and publishes the status.
    pub fn set_engines(&self, slots: Vec<Arc<EngineHandle>>) {
        *self.slots.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(slots);
        self.republish();
    }

    /// The engines now (one version: a reload replaces the list whole).
    pub fn engines(&self) -> Arc<Vec<Arc<EngineHandle>>> {
        self.slots.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The default model from now on.
    pub fn set_default(&self, model: Option<String>) {
        *self.default_model.write().unwrap_or_else(|p| p.into_inner()) = model;
    }

    /// The engine that serves `model` (`None`: the default); `None` for a
    /// model no engine serves (not in the catalog).
    pub fn engine(&self, model: Option<&str>) -> Option<Arc<EngineHandle>> {
        let slots = self.engines();
        if let [one] = slots.as_slice()
            && one.model.is_none()
        {
            return Some(one.clone());
        }
        let default = self.default_model.read().unwrap_or_else(|p| p.into_inner()).clone();
        let want = model.or(default.as_deref())?;
        slots.iter().find(|s| s.model.as_deref() == Some(want)).cloned()
    }

    /// The slot the top-level status shows: the resident used last (a
    /// loading one counts as in use now), else the one used last, else
    /// the default model's.
    pub fn current(&self) -> Option<Arc<EngineHandle>> {
        let slots = self.engines();
        let key = |s: &Arc<EngineHandle>| {
            let st = s.status.borrow();
            let now = st.state == EngineState::Loading || st.state == EngineState::Generating;
            (s.resident(&st), now, st.last_used)
        };
        slots
            .iter()
            .max_by_key(|s| key(s))
            .filter(|s| {
                let (resident, now, used) = key(s);
                resident || now || used.is_some()
            })
            .cloned()
            .or_else(|| self.engine(None))
            .or_else(|| slots.first().cloned())
    }

    /// Every resident's view, most recently used first.
    pub fn views(&self) -> Vec<ResidentView> {
        let mut v: Vec<ResidentView> = self
            .engines()
            .iter()
            .filter_map(|s| {
                let st = s.status.borrow();
                s.resident(&st).then(|| s.view(&st)).flatten()
            })
            .collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.last_used));
        v
    }

    /// The warden's status now.
    pub fn status(&self) -> EngineStatus {
        let mut s = self.current().map(|c| c.status.borrow().clone()).unwrap_or_default();
        s.residents = self.views();
        // The store as it is now, whichever engine changed it last.
        s.kv_saves = self.kv_view.read().unwrap_or_else(|p| p.into_inner()).clone();
        s.settings = self.settings();
        s.waiting_models = self.waiting();
        s.switching = self.switching();
        s
    }

    /// The arbiter, locked (a poisoned lock guards nothing but its order).
    fn arbiter(&self) -> std::sync::MutexGuard<'_, Arbiter> {
        self.arbiter.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Now on the arbiter's clock, ms.
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The loads over the thrash window, as the status shows them.
    fn switching(&self) -> Option<crate::status::SwitchingView> {
        let (loads, loading_ms) = self.arbiter().loading(self.now_ms())?;
        let window_ms = schedule::THRASH_WINDOW_MS;
        Some(crate::status::SwitchingView {
            loads,
            loads_per_min: loads as f64 * 60_000.0 / window_ms as f64,
            loading_ms,
            loading_share: loading_ms as f64 / window_ms as f64,
            thrashing: schedule::thrashing(loading_ms, window_ms),
            window_ms,
        })
    }

    /// The line as the status shows it, longest weighted wait first.
    fn waiting(&self) -> Vec<crate::status::WaitingModel> {
        let now = self.now_ms();
        let line = self.arbiter().line(|m| self.queued(m), now);
        line.into_iter()
            .map(|p| crate::status::WaitingModel {
                model: p.model,
                waited_ms: p.waited_ms,
                behind: p.on,
                queue_depth: p.queued as usize,
                at_most_ms: p.at_most_ms,
                why: p.why,
            })
            .collect()
    }

    /// Republishes the warden's status (an engine published).
    pub fn republish(&self) {
        self.combined.send_replace(self.status());
        self.touch_room();
    }

    /// Wakes the waiting loads when what the residents' law reads changed.
    fn touch_room(&self) {
        let residents = self.each_resident(|_, r| Some(r));
        let key = self.arbiter().wake_key(residents);
        let mut last = self.room_key.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_ref() != Some(&key) {
            *last = Some(key);
            drop(last);
            self.room.send_modify(|n| *n += 1);
        }
    }

    /// A receiver of the warden's status.
    pub fn watch(&self) -> watch::Receiver<EngineStatus> {
        self.combined.subscribe()
    }

    /// The engines with a model loaded, for an idle brake sample.
    pub fn loaded_engines(&self) -> Vec<Recipient<BrakeSample>> {
        self.engines()
            .iter()
            .filter(|s| s.status.borrow().model.is_some())
            .map(|s| s.engine.clone().recipient())
            .collect()
    }

    /// `f` over every engine holding memory, with its status and the
    /// resident the law sees (reservations included).
    fn each_resident<T>(&self, f: impl Fn(&EngineStatus, Resident) -> Option<T>) -> Vec<T> {
        self.engines()
            .iter()
            .filter_map(|s| {
                let st = s.status.borrow();
                if !s.resident(&st) {
                    return None;
                }
                f(&st, s.as_resident(&st)?)
            })
            .collect()
    }

    /// Every resident but `me`, as the law sees them.
    fn others(&self, me: &str) -> Vec<Resident> {
        self.each_resident(|_, r| (r.model != me).then_some(r))
    }

    /// Every resident but `me`, as the arbiter weighs them.
    fn seats(&self, me: &str) -> Vec<Seat> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.each_resident(|st, resident| {
            (resident.model != me).then(|| Seat {
                resident,
                weight: st.weight,
                resident_ms: now.saturating_sub(st.loaded_since.unwrap_or(now)),
                idle_ms: now.saturating_sub(st.last_used.or(st.loaded_since).unwrap_or(0)),
            })
        })
    }

    /// The turns routed to `model`'s engine, waiting or running.
    fn queued(&self, model: &str) -> u32 {
        self.handle_of(model).map_or(0, |s| s.queue.depth() as u32)
    }

    fn handle_of(&self, model: &str) -> Option<Arc<EngineHandle>> {
        self.engines()
            .iter()
            .find(|s| s.model.as_deref() == Some(model))
            .cloned()
    }
}

/// What loading a resident again costs, ms, from its published status: its
/// last load (a resident has always loaded once; before that, what it holds
/// stands in for its weights).
fn reload_ms(s: &EngineStatus) -> u64 {
    schedule::load_cost_ms(s.loads.last_ms, s.held_bytes.unwrap_or(0))
}

/// `Peers` over a weak link to the residency.
#[derive(Debug)]
struct Peerage(Weak<Residency>);

impl Peers for Peerage {
    fn load_step(&self, ask: &LoadAsk) -> LoadStep {
        let Some(r) = self.0.upgrade() else {
            return LoadStep::Go {
                evict: Vec::new(),
                kept_bytes: 0,
                reserve: 0,
            };
        };
        // The count cap is the residency's.
        let ask = LoadAsk {
            max_resident: r.max_resident,
            ..ask.clone()
        };
        let now = r.now_ms();
        let mut arbiter = r.arbiter();
        let line = arbiter.key();
        let step = arbiter.load_step(&ask, &r.seats(&ask.new.model), now);
        if let (LoadStep::Go { reserve, .. }, Some(me)) = (&step, r.handle_of(&ask.new.model)) {
            me.reserved.store(*reserve, Ordering::Release);
        }
        let moved = arbiter.key() != line;
        drop(arbiter);
        if moved {
            // A new place in the line is seen at once in the status (and
            // wakes the loads it concerns).
            r.republish();
        }
        step
    }

    fn engine_of(&self, model: &str) -> Option<Recipient<Evict>> {
        let r = self.0.upgrade()?;
        r.handle_of(model).map(|s| s.engine.clone().recipient())
    }

    fn others(&self, me: &str) -> Vec<Resident> {
        self.0.upgrade().map(|r| r.others(me)).unwrap_or_default()
    }

    fn settled(&self, me: &str) {
        if let Some(r) = self.0.upgrade()
            && let Some(s) = r.handle_of(me)
        {
            s.reserved.store(0, Ordering::Release);
            r.republish();
        }
    }

    fn leave_line(&self, me: &str) {
        let Some(r) = self.0.upgrade() else { return };
        let changed = r.arbiter().leave(me);
        if changed {
            // Wakes the loads waiting behind it.
            r.republish();
        }
    }

    fn yields_to(
        &self,
        holder: &Holder,
        policy: schedule::Policy,
        limit: std::time::Duration,
    ) -> Option<(String, Next)> {
        let r = self.0.upgrade()?;
        let now = r.now_ms();
        let mut arbiter = r.arbiter();
        arbiter.holder_step(holder, || r.seats(""), |m| r.queued(m), policy, limit, now)
    }

    fn yielded(&self, me: &str, to: &str) {
        if let Some(r) = self.0.upgrade() {
            r.arbiter().yielded(me, to);
            r.touch_room();
        }
    }

    fn loaded(&self, ms: u64) -> u64 {
        let Some(r) = self.0.upgrade() else { return ms };
        let now = r.now_ms();
        r.arbiter().loaded(ms, now)
    }

    fn estimate(&self, me: &str) -> Option<u64> {
        self.0.upgrade()?.arbiter().estimate(me)
    }

    fn changes(&self) -> watch::Receiver<u64> {
        match self.0.upgrade() {
            Some(r) => r.room.subscribe(),
            // No residency: nothing will change; a receiver whose sender is
            // gone answers at once, and the deadline bounds the wait.
            None => watch::channel(0).1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::arbiter::reservation;
    use crate::law::residents::{Fit, Newcomer};
    use crate::law::window::MIB;

    fn new(full: Option<u64>) -> Newcomer {
        Newcomer {
            model: "m".into(),
            kind: crate::law::types::ModelKind::Chat,
            weights_bytes: 100 * MIB,
            floor_bytes: 200 * MIB,
            full_bytes: full,
            waited_out: false,
        }
    }

    /// A load reserves what it will take: its full window when it fits,
    /// the whole budget beside the residents when a smaller window must do
    /// (the window law takes all of it), its floor when alone past it.
    #[test]
    fn a_load_reserves_what_its_window_will_take() {
        let rows = [
            // why: the full window fits: the full footprint
            (new(Some(300 * MIB)), Fit::Full, 900 * MIB as i64, 300 * MIB),
            // why: a reduced window takes the whole budget, weights beside it
            (new(Some(2000 * MIB)), Fit::Reduced, 400 * MIB as i64, 500 * MIB),
            // why: alone past the floor: the floor
            (new(None), Fit::FloorAlone, -(50 * MIB as i64), 200 * MIB),
            // why: without a full window (memory alone sizes it) a reduced fit is still the budget
            (new(None), Fit::Reduced, 10 * MIB as i64, 110 * MIB),
        ];
        for (n, fit, budget, want) in rows {
            assert_eq!(reservation(&n, fit, budget), want, "{fit:?} {budget}");
        }
    }
}
