//! The brake controller: everything the memory brake keeps, in one value
//! whose fields nothing else can write. It alone reads the pressure view
//! (and turns the brake off when that cannot be read), paces the idle
//! samples, asks the law (`law::brake`, `law::mlx`) and records what the law
//! decided and what was done: the live child's state (carried whole across
//! its respawns, dropped with the child), the last reading and action, and
//! what outlives a child (an unload's carry, the per-model window memory).
//! The engine's code (`brake`, `brake_act`, `turn`, `retire`, `load`,
//! `reap`, `room`) calls these methods and never assigns a field: before
//! this split the brake's state was written at 29 places in 8 files.
//!
//! Time: the law reads no clock. `now` and a record's time are plain
//! milliseconds on this controller's monotonic clock (`ms`), whose origin
//! is the controller's creation.

use std::collections::HashMap;

use tokio::time::Instant;

use crate::law::brake::{
    self, Action, BrakeDid, BrakeNotice, BrakeReload, BrakeState, Level, Point, Readings, Remembered,
    WindowFacts,
};
use crate::law::mlx::{self as mlx_law, MlxAction, MlxFacts, MlxReadings};
use crate::sensors::view::{BrakeOff, Given, PressureView};
use crate::status::BrakeView;

/// The memory brake's state and its reading of the machine.
#[derive(Debug)]
pub struct Brake {
    /// Where samples read the sensor's latest reading (a test's script
    /// instead).
    sensor: Box<dyn PressureView>,
    /// The origin of the milliseconds the law is given.
    epoch: Instant,
    /// The live child's brake state.
    state: BrakeState,
    /// Why the brake is off, once it turned off (said once).
    off: Option<String>,
    /// The last level read.
    level: Option<Level>,
    /// The last action's log word.
    last_action: Option<BrakeDid>,
    /// When the last sample was taken (idle pacing), `ms`.
    last_sample_ms: Option<u64>,
    /// An unload's carry (the spec's `_brake_reload`).
    reload: Option<BrakeReload>,
    /// The per-model window memory (the spec's `_window_memory`).
    memory: HashMap<String, Remembered>,
}

impl Brake {
    /// A brake with nothing recorded, reading `sensor`, its clock starting now.
    pub fn new(sensor: Box<dyn PressureView>) -> Self {
        Self {
            sensor,
            epoch: Instant::now(),
            state: BrakeState::default(),
            off: None,
            level: None,
            last_action: None,
            last_sample_ms: None,
            reload: None,
            memory: HashMap::new(),
        }
    }

    /// `t` as milliseconds on the brake's clock (a moment before the
    /// epoch, which this engine never records, reads as 0).
    pub fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// Now on the brake's clock.
    fn now_ms(&self) -> u64 {
        self.ms(Instant::now())
    }

    /// The live child's state, as the law and the residents see it.
    pub fn state(&self) -> BrakeState {
        self.state
    }

    /// Whether the brake turned off for good (its sensor cannot be read).
    pub fn is_off(&self) -> bool {
        self.off.is_some()
    }

    /// The reading at `point` (`given`, else the sensor's latest); `None`
    /// once the brake turned off because it cannot be read (said once, with
    /// the engine's `tag`).
    pub fn read(&mut self, point: Point, given: Option<Given>, tag: &str) -> Option<Readings> {
        match given.unwrap_or_else(|| self.sensor.read(point)) {
            Ok(r) => Some(r),
            Err(BrakeOff(why)) => {
                tracing::warn!("{tag}: the memory brake is off: {why}");
                self.off = Some(why);
                None
            }
        }
    }

    /// Whether a sample at `point` is taken (an idle one only past the
    /// pacing `skip` since the last sample and the last use); a taken one is
    /// recorded for the next idle one.
    pub fn take_sample(&mut self, point: Point, last_used: Option<Instant>, skip: std::time::Duration) -> bool {
        let now_ms = self.now_ms();
        let due = point != Point::Idle
            || brake::idle_sample_due(now_ms, self.last_sample_ms, last_used.map(|t| self.ms(t)), skip);
        if due {
            self.last_sample_ms = Some(now_ms);
        }
        due
    }

    /// A sample read `level` (the status shows the last).
    pub fn saw(&mut self, level: Level) {
        self.level = Some(level);
    }

    /// The llama.cpp law on a sample: the next state kept; the action to
    /// carry out and the state before it.
    pub fn llama_step(&mut self, point: Point, r: &Readings, facts: &WindowFacts) -> (Action, BrakeState) {
        let before = self.state;
        let (action, next) = brake::llama_step(point, r, &before, facts);
        self.state = next;
        (action, before)
    }

    /// The MLX law on a sample: as `llama_step`.
    pub fn mlx_step(&mut self, point: Point, r: &MlxReadings, facts: &MlxFacts) -> (MlxAction, BrakeState) {
        let before = self.state;
        let (action, next) = mlx_law::mlx_step(point, r, &before, facts);
        self.state = next;
        (action, before)
    }

    /// A respawn at `cap` for `action` was carried out (`ok`) or failed.
    pub fn respawned(&mut self, action: Action, cap: u32, ok: bool, pinned: bool) {
        self.state = brake::after_respawn(&self.state, action, cap, ok, pinned);
    }

    /// The MLX child applied (or did not apply) the bound `action` decided.
    pub fn bounded(&mut self, before: &BrakeState, action: MlxAction, applied: bool) {
        self.state = mlx_law::after_bound(before, &self.state, action, applied);
    }

    /// An action that did not complete: the state goes back to `before`
    /// (the next sample decides again).
    pub fn undo(&mut self, before: BrakeState) {
        self.state = before;
    }

    /// The log word of the action just taken, for the status.
    pub fn acted(&mut self, did: BrakeDid) {
        self.last_action = Some(did);
    }

    /// After a step on `model`'s child that began at `before`: the window
    /// memory is written through when the cap or the hurt window changed
    /// (or, `pending_too`, the deferred cap).
    pub fn settle(&mut self, model: Option<&str>, before: &BrakeState, pending_too: bool) {
        let changed = (self.state.cap, self.state.hurt) != (before.cap, before.hurt)
            || (pending_too && self.state.pending_cap != before.pending_cap);
        if changed {
            self.remember_window(model);
        }
    }

    /// Records the carry of `model`'s unload and clears the live state.
    pub fn record_unload(&mut self, model: &str) {
        self.reload = Some(BrakeReload {
            model: model.to_string(),
            cap: self.state.cap,
            hurt: self.state.hurt,
            episode: self.state.episode,
            at_ms: Some(self.now_ms()),
        });
        self.remember_window(Some(model));
        self.state = BrakeState::default();
    }

    /// Writes the live child's cap and hurt window through to the window
    /// memory of `model` (else of the carry's model); an entry with
    /// neither is deleted.
    fn remember_window(&mut self, model: Option<&str>) {
        let Some(model) = model
            .map(str::to_string)
            .or_else(|| self.reload.as_ref().map(|r| r.model.clone()))
        else {
            return;
        };
        let carried = self.reload.as_ref();
        let cap = self.state.cap.or(carried.and_then(|r| r.cap));
        let hurt = self.state.hurt.or(carried.and_then(|r| r.hurt));
        if cap.is_none() && hurt.is_none() {
            self.memory.remove(&model);
        } else {
            let written_ms = self.now_ms();
            self.memory.insert(model, Remembered { cap, hurt, written_ms });
        }
    }

    /// The brake state and cap a new child of `model` starts with (the
    /// carry first, then the window memory), dropping expired records.
    pub fn seed(&mut self, model: &str) -> BrakeState {
        let now = self.now_ms();
        self.memory
            .retain(|_, m| brake::alive(m.written_ms, now, brake::WINDOW_MEMORY_TTL));
        let carry = self.reload.as_ref().filter(|c| c.model == model);
        brake::seed(carry, self.memory.get(model), now)
    }

    /// A child started from `seed`: its state is live, and any successful
    /// spawn forgets the unload's record.
    pub fn started(&mut self, seed: BrakeState) {
        self.state = seed;
        self.reload = None;
    }

    /// The live child is gone: its state goes with it (the window memory
    /// and an unload's carry, recorded before, outlive it).
    pub fn child_gone(&mut self) {
        self.state = BrakeState::default();
    }

    /// Forgets an unload's carry (an idle reap, shutdown); the window
    /// memory stays.
    pub fn forget_carry(&mut self) {
        self.reload = None;
    }

    /// Whether the turn for `model` must announce a brake reload: its
    /// unload carry waits (`live`: the live child's model, none here), or a
    /// brake respawn of it that no turn announced yet.
    pub fn reload_pending(&self, model: &str, live: Option<&str>) -> bool {
        let now = self.now_ms();
        let carried = live.is_none()
            && self.reload.as_ref().is_some_and(|c| {
                c.model == model && c.at_ms.is_some_and(|at| brake::alive(at, now, brake::BRAKE_RELOAD_TTL))
            });
        let respawned = live == Some(model) && self.state.respawned;
        carried || respawned
    }

    /// Takes the respawn mark (a turn announces it at most once).
    pub fn take_respawned(&mut self) -> bool {
        std::mem::take(&mut self.state.respawned)
    }

    /// Takes the notice waiting for a stateful turn's end.
    pub fn take_notice(&mut self) -> Option<BrakeNotice> {
        self.state.notice.take()
    }

    /// A notice the client did not take: the next turn says it.
    pub fn keep_notice(&mut self, notice: BrakeNotice) {
        self.state.notice = Some(notice);
    }

    /// The brake as the status shows it; `child_off`: why it never samples
    /// the live child (CUDA: a partial or unsized placement).
    pub fn view(&self, child_off: Option<&str>) -> BrakeView {
        BrakeView {
            enabled: self.off.is_none() && child_off.is_none(),
            off_reason: self.off.clone().or_else(|| child_off.map(str::to_string)),
            level: self.level,
            state: self.state,
            last_action: self.last_action,
            reload_pending: self.reload.as_ref().map(|r| r.model.clone()),
        }
    }
}
