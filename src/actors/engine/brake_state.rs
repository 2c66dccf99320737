//! The brake controller: everything the memory brake keeps, in one value
//! whose fields nothing else can write, and the brake's protocol in one
//! place. A sample is asked of the law (`law::brake`, `law::mlx`) through
//! `llama_step`/`mlx_step`, which hand back a `Decided`: the action and the
//! state before it, which only `finish_llama`/`finish_mlx` consume, told
//! what carrying it out came to (`Carried`). Those two are the protocol's
//! order: the state after the respawn or the bound (or back to `before`
//! when the action did not complete), an unload's carry, the status's
//! action, the window memory written through. The engine's code carries
//! the action out and says what happened; it never sequences the brake's
//! bookkeeping itself.
//!
//! No I/O and no clock: the engine reads the sensor (`sensors::view::BrakeSensor`)
//! and gives the time as plain milliseconds on its monotonic clock; the
//! controller keeps what the law decided and what was done: the live
//! child's state (carried whole across its respawns, dropped with the
//! child), the last reading and action, and what outlives a child (an
//! unload's carry, the per-model window memory). Table tests:
//! `brake_state_tests`.

use std::collections::HashMap;

use crate::law::brake::{
    self, Action, BrakeDid, BrakeNotice, BrakeReload, BrakeState, Level, Point, Readings, Remembered,
    WindowFacts,
};
use crate::law::mlx::{self as mlx_law, MlxAction, MlxFacts, MlxReadings};
use crate::status::BrakeView;

/// What the law decided on one sample and the state it decided from: the
/// brake's half of a decision the engine carries out. Only the brake's
/// `finish_*` consumes it, so no step is left half-recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a decision is finished with finish_llama or finish_mlx"]
pub struct Decided<A> {
    /// What to carry out.
    pub action: A,
    /// The state before the decision (an action that did not complete
    /// goes back to it).
    before: BrakeState,
}

/// What carrying out a decided action came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried<'a> {
    /// Nothing to carry out beyond its log line (no action, a deferred
    /// shrink, an armed unload), or no child to act on any more.
    Said,
    /// A respawn at `cap` came up.
    Respawned {
        /// The cap the new child runs at.
        cap: u32,
        /// The model's window is pinned by its settings.
        pinned: bool,
    },
    /// A respawn at `cap` failed after `model`'s old child stopped: the
    /// model is gone as an unload's, and reloads at the next message.
    RespawnFailed {
        /// The cap it was to run at.
        cap: u32,
        /// The model's window is pinned by its settings.
        pinned: bool,
        /// The model that is gone.
        model: &'a str,
    },
    /// `model`'s child is about to stop for the emergency unload (said
    /// before its retirement drops the live state the carry is made of).
    Unloading {
        /// The model unloaded.
        model: &'a str,
    },
    /// MLX: the child applied (or refused) the bound.
    Bounded {
        /// Whether the child applied it.
        applied: bool,
    },
    /// MLX: a release did not complete; the next sample decides again.
    Incomplete,
}

/// The memory brake's state.
#[derive(Debug, Default)]
pub struct Brake {
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
    /// The live child's state, as the law and the residents see it.
    pub fn state(&self) -> BrakeState {
        self.state
    }

    /// Whether the brake turned off for good (its sensor cannot be read).
    pub fn is_off(&self) -> bool {
        self.off.is_some()
    }

    /// The sensor cannot be read (`why`): the brake is off for good.
    pub fn turn_off(&mut self, why: String) {
        self.off = Some(why);
    }

    /// Whether a sample at `point` is taken at `now_ms` (an idle one only
    /// past the pacing `skip` since the last sample and the last use,
    /// `last_used_ms`); a taken one is recorded for the next idle one.
    pub fn take_sample(&mut self, point: Point, now_ms: u64, last_used_ms: Option<u64>, skip: std::time::Duration) -> bool {
        let due = point != Point::Idle || brake::idle_sample_due(now_ms, self.last_sample_ms, last_used_ms, skip);
        if due {
            self.last_sample_ms = Some(now_ms);
        }
        due
    }

    /// A sample read `level` (the status shows the last).
    pub fn saw(&mut self, level: Level) {
        self.level = Some(level);
    }

    /// The llama.cpp law on a sample: the next state kept; the decision
    /// to carry out (and to finish with `finish_llama`).
    pub fn llama_step(&mut self, point: Point, r: &Readings, facts: &WindowFacts) -> Decided<Action> {
        let before = self.state;
        let (action, next) = brake::llama_step(point, r, &before, facts);
        self.state = next;
        Decided { action, before }
    }

    /// The MLX law on a sample: as `llama_step` (finished with `finish_mlx`).
    pub fn mlx_step(&mut self, point: Point, r: &MlxReadings, facts: &MlxFacts) -> Decided<MlxAction> {
        let before = self.state;
        let (action, next) = mlx_law::mlx_step(point, r, &before, facts);
        self.state = next;
        Decided { action, before }
    }

    /// A llama.cpp decision carried out as `carried` said, at `now_ms` on
    /// the live child of `model` (`None`: none any more): the state after
    /// a respawn, an unload's carry, the action for the status, then the
    /// window memory written through when the cap, the hurt window or the
    /// deferred cap changed.
    pub fn finish_llama(&mut self, d: Decided<Action>, carried: Carried<'_>, model: Option<&str>, now_ms: u64) {
        match carried {
            Carried::Respawned { cap, pinned } => {
                self.state = brake::after_respawn(&self.state, d.action, cap, true, pinned)
            }
            Carried::RespawnFailed { cap, pinned, model } => {
                self.state = brake::after_respawn(&self.state, d.action, cap, false, pinned);
                self.record_unload(model, now_ms);
            }
            Carried::Unloading { model } => self.record_unload(model, now_ms),
            Carried::Said | Carried::Bounded { .. } | Carried::Incomplete => {}
        }
        if let Some(did) = d.action.did() {
            self.last_action = Some(did);
        }
        self.write_through(model, &d.before, true, now_ms);
    }

    /// An MLX decision carried out as `carried` said (the bound applied or
    /// not, a release incomplete: the state back to before it, an unload's
    /// carry), then as `finish_llama` (the deferred cap is llama.cpp's).
    pub fn finish_mlx(&mut self, d: Decided<MlxAction>, carried: Carried<'_>, model: Option<&str>, now_ms: u64) {
        match carried {
            Carried::Bounded { applied } => {
                self.state = mlx_law::after_bound(&d.before, &self.state, d.action, applied)
            }
            Carried::Incomplete => self.state = d.before,
            Carried::Unloading { model } => self.record_unload(model, now_ms),
            Carried::Said | Carried::Respawned { .. } | Carried::RespawnFailed { .. } => {}
        }
        if let Some(did) = d.action.did() {
            self.last_action = Some(did);
        }
        self.write_through(model, &d.before, false, now_ms);
    }

    /// A step outside the law's two (an idle resident evicted for this
    /// one's pressure): the status's last action.
    pub fn said(&mut self, did: BrakeDid) {
        self.last_action = Some(did);
    }

    /// After a step on `model`'s child that began at `before`: the window
    /// memory is written through when the cap or the hurt window changed
    /// (or, `pending_too`, the deferred cap).
    fn write_through(&mut self, model: Option<&str>, before: &BrakeState, pending_too: bool, now_ms: u64) {
        let changed = (self.state.cap, self.state.hurt) != (before.cap, before.hurt)
            || (pending_too && self.state.pending_cap != before.pending_cap);
        if changed {
            self.remember_window(model, now_ms);
        }
    }

    /// Records the carry of `model`'s unload and clears the live state.
    fn record_unload(&mut self, model: &str, now_ms: u64) {
        self.reload = Some(BrakeReload {
            model: model.to_string(),
            cap: self.state.cap,
            hurt: self.state.hurt,
            episode: self.state.episode,
            at_ms: Some(now_ms),
        });
        self.remember_window(Some(model), now_ms);
        self.state = BrakeState::default();
    }

    /// Writes the live child's cap and hurt window through to the window
    /// memory of `model` (else of the carry's model); an entry with
    /// neither is deleted.
    fn remember_window(&mut self, model: Option<&str>, now_ms: u64) {
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
            self.memory.insert(
                model,
                Remembered {
                    cap,
                    hurt,
                    written_ms: now_ms,
                },
            );
        }
    }

    /// The brake state and cap a new child of `model` starts with at
    /// `now` (the carry first, then the window memory), dropping expired
    /// records.
    pub fn seed(&mut self, model: &str, now: u64) -> BrakeState {
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

    /// Whether the turn for `model` must announce a brake reload at `now`:
    /// its unload carry waits (`live`: the live child's model, none here),
    /// or a brake respawn of it that no turn announced yet.
    pub fn reload_pending(&self, model: &str, live: Option<&str>, now: u64) -> bool {
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

#[cfg(test)]
#[path = "brake_state_tests.rs"]
mod tests;
