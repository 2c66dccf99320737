//! The memory brake's law: `llama_step`, a pure function from (point,
//! readings, state, window facts) to an action and the next state, and the
//! small helpers the engine calls around it (the idle pacing, growth; what a
//! respawn or an unload carries to the next child is in `carry.rs`,
//! re-exported here). The engine gathers readings and carries out the action;
//! every rule lives here and is table-tested in `tests.rs` (turn
//! boundaries) and `away_tests.rs` (away, pins, seeds, growth).
//!
//! llama-server cannot give memory back while it runs: nothing frees without
//! a restart with a smaller `-c`, and a smaller `-c` always frees. So the
//! brake acts by respawning the child in place with a cap, at safe points
//! only (a turn's start or end, or an idle sample), never mid-generation.
//!
//! # The rules (the spec's, and the three it left open)
//!
//! - **Episodes.** An episode opens at the first non-calm sample and ends
//!   after `EPISODE_END_CALM_SAMPLES` (2) calm samples in a row. Every action
//!   is bounded per episode. At its end a cap it decided but never applied is
//!   dropped with nothing said; the window that hurt is kept.
//! - **Not ours.** When the allocated window's KV is under 10 % of RAM the
//!   pressure is not the model's: the notice is `external` (never over
//!   `acted`, never on a child a brake reload seeded before its episode
//!   ends), and nothing shrinks.
//! - **Critical at a turn boundary** shrinks and respawns now. **Warning with
//!   paging evidence at a turn's end** decides the shrink and applies it by a
//!   respawn at the next idle sample, once the user is away; without paging
//!   evidence it is held back and says nothing. (A paging counter that cannot
//!   be read leaves the level to decide alone.)
//! - **Lasting critical while away.** A critical turn end respawns smaller;
//!   the first idle critical arms the unload (no second shrink without a turn
//!   in between), the second unloads. An idle respawn is followed by the
//!   unload at the very next critical tick. Where no shrink is possible (the
//!   4096 floor, a `WARDEN_CTX` pin, pressure not ours, the episode's shrinks
//!   spent), two idle criticals unload. A turn, or a non-critical sample,
//!   disarms.
//! - **A seeded child** (reloaded from an unload's carry) takes no extra
//!   shrink and no second unload in the carried episode.
//! - **Pinned** (`WARDEN_CTX`): nothing is resized and no `acted` notice is
//!   drawn; the unload still applies.
//! - **Caps** are on the 256-token grid, never under 4096, and compared
//!   padded with the allocated window (`law::caps`).
//!
//! Decided here, where the spec is silent:
//! - **How far a shrink goes: to half the allocated window** (on the grid,
//!   floor 4096). The KV is linear in the window, so half the window gives
//!   back half its KV in one respawn; a smaller step would take several
//!   respawns (1-2 s and a prompt re-read each) to matter, a larger one would
//!   cut more context than one step of pressure justifies.
//! - **At most `MAX_SHRINKS_PER_EPISODE` (2) shrinks per episode**: a quarter
//!   of the window, three quarters of its KV given back. Past that the
//!   pressure is not one the window can fix, and the emergency unload is the
//!   remaining answer.
//! - **Growth**: only at an idle sample, after `GROW_AFTER_CALM_SAMPLES` (5)
//!   calm samples in a row with no episode open (five quiet minutes at the
//!   60 s pace), in one step to the largest grid window strictly under 90 %
//!   of the window that hurt (and never above the window memory alone would
//!   give). Growing costs a respawn, so it waits until the user is away and
//!   the machine has been quiet; never reaching 90 % keeps it from walking
//!   straight back into the window that caused the pressure.

use std::time::Duration;

use serde::Serialize;

pub use super::names::BrakeDid;

use super::caps::{self, WINDOW_FLOOR_TOKENS};

mod carry;
pub use carry::{
    BRAKE_RELOAD_TTL, BrakeNotice, BrakeReload, BrakeState, Episode, Remembered, WINDOW_MEMORY_TTL,
    after_respawn, alive, seed,
};

/// Calm samples in a row that end an episode.
pub const EPISODE_END_CALM_SAMPLES: u32 = 2;
/// Below this share of RAM, the window's KV is not what presses the machine.
pub const NOT_OURS_KV_FRACTION: f64 = 0.10;
/// Shrinks allowed per episode (see the module docs).
pub const MAX_SHRINKS_PER_EPISODE: u32 = 2;
/// Calm samples in a row (no episode open) before the cap may grow.
pub const GROW_AFTER_CALM_SAMPLES: u32 = 5;
/// Growth stays strictly under this share of the window that hurt.
pub const GROW_CEILING_PERCENT: u64 = 90;
/// The brake's idle sampling period (the spec's BRAKE_IDLE_INTERVAL_S;
/// `WARDEN_BRAKE_TICK_S` defaults to it).
pub const BRAKE_IDLE_INTERVAL: Duration = Duration::from_secs(60);

/// An idle sample within this of the previous sample or of a turn's end is
/// skipped: the period less a margin for an early tick (55 s of 60 s).
pub fn idle_sample_skip(interval: Duration) -> Duration {
    interval * 55 / 60
}

/// Where a sample is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// Before a turn resolves its model (only when its model is loaded).
    TurnStart,
    /// Right after a turn's last token.
    TurnEnd,
    /// The 60 s sample while the user is away.
    Idle,
}

impl Point {
    /// The spec's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TurnStart => "turn_start",
            Self::TurnEnd => "turn_end",
            Self::Idle => "idle",
        }
    }
}

/// The memory pressure level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// No pressure.
    #[default]
    Calm,
    /// The machine is short of memory.
    Warning,
    /// The machine is about to page heavily or kill.
    Critical,
}

impl Level {
    /// The spec's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Calm => "calm",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }
}

/// One sample's readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readings {
    /// The pressure level.
    pub level: Level,
    /// Paging evidence during the turn (turn_end): `Some(true)` when the
    /// swap-outs reached the threshold, `None` when the counter is unreadable.
    pub paging: Option<bool>,
    /// The child's anonymous memory, for the log line.
    pub footprint_bytes: Option<u64>,
}

/// What the law knows of the live child's window (`Default`: nothing,
/// as the residents' law sees a resident other than the one sampled).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowFacts {
    /// The allocated window.
    pub allocated: u32,
    /// KV bytes per token.
    pub kv_per_token: u64,
    /// The RAM total.
    pub ram_bytes: u64,
    /// The window the law would give without any cap (growth's upper bound).
    pub uncapped: u32,
    /// `WARDEN_CTX` pins the window.
    pub pinned: bool,
}

/// What the engine must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Nothing.
    None,
    /// Respawn now at `cap` (a shrink).
    Shrink {
        /// The new cap.
        cap: u32,
    },
    /// Warning with paging at a turn's end: shrink decided, applied at idle.
    DeferShrink {
        /// The decided cap.
        cap: u32,
    },
    /// Respawn now at a raised `cap` (idle, calm).
    Grow {
        /// The new cap.
        cap: u32,
    },
    /// The first idle critical with nothing to shrink: the next one unloads.
    ArmUnload,
    /// Stop the child; the next message reloads it with the cap.
    Unload,
}

impl Action {
    /// The log's `action=` word.
    /// What the action is called once done (`None` for no action).
    pub fn did(self) -> Option<BrakeDid> {
        match self {
            Self::None => None,
            Self::Shrink { .. } => Some(BrakeDid::ShrinkRespawn),
            Self::DeferShrink { .. } => Some(BrakeDid::ShrinkDeferred),
            Self::Grow { .. } => Some(BrakeDid::GrowRespawn),
            Self::ArmUnload => Some(BrakeDid::ArmUnload),
            Self::Unload => Some(BrakeDid::Unload),
        }
    }

    /// Whether carrying it out stops the live child (a respawn, an unload).
    pub fn stops_the_child(self) -> bool {
        matches!(self, Self::Shrink { .. } | Self::Grow { .. } | Self::Unload)
    }

    /// Whether it waits for the `running` turns to end before it is
    /// carried out: one that stops the child never cuts a running turn
    /// (new turns wait meanwhile, the running ones end, bounded by their
    /// watchdogs); the rest act at once.
    pub fn waits_for(self, running: usize) -> bool {
        if crate::law::broken!(BrakeCutsTurn) {
            return false;
        }
        self.stops_the_child() && running > 0
    }

    /// The cap a respawn must use, when the action respawns.
    #[cfg(test)]
    pub fn respawn_cap(self) -> Option<u32> {
        match self {
            Self::Shrink { cap } | Self::Grow { cap } => Some(cap),
            _ => None,
        }
    }
}

/// Whether the window's KV is too small a share of RAM to be the cause.
pub fn not_ours(w: &WindowFacts) -> bool {
    ((w.allocated as u64).saturating_mul(w.kv_per_token) as f64) < NOT_OURS_KV_FRACTION * w.ram_bytes as f64
}

/// The shrink target: half the allocated window, on the grid, floor 4096.
pub fn shrink_target(allocated: u32) -> u32 {
    caps::cap(allocated / 2)
}

/// The largest grid window strictly under 90 % of `hurt`.
pub fn grow_ceiling(hurt: u32) -> u32 {
    let under = (hurt as u64 * GROW_CEILING_PERCENT / 100).saturating_sub(1);
    caps::cap(under.min(u32::MAX as u64) as u32)
}

/// One brake sample.
pub fn llama_step(point: Point, r: &Readings, s: &BrakeState, w: &WindowFacts) -> (Action, BrakeState) {
    let mut n = *s;
    if point == Point::TurnStart {
        // The user is here: no lasting-away pressure, and a new shrink may come.
        n.unload_armed = false;
        n.shrunk_since_turn = false;
    }
    if r.level == Level::Calm {
        return calm_step(point, n, w);
    }
    let mut p = Pressed::open(n, r.level, w);
    let action = match (point, r.level) {
        (Point::TurnStart | Point::TurnEnd, Level::Critical) => p.critical_at_turn(),
        (Point::TurnEnd, Level::Warning) => p.warning_at_turn_end(r.paging),
        (Point::TurnStart, _) => Action::None,
        (Point::Idle, level) => p.idle(level),
        (Point::TurnEnd, Level::Calm) => unreachable!("calm is handled by calm_step"),
    };
    p.n.episode = Some(p.ep);
    (action, p.n)
}

/// A non-calm sample being decided: the next state, its episode, and the
/// shrink it could take.
struct Pressed {
    n: BrakeState,
    ep: Episode,
    target: u32,
    can_shrink: bool,
    w: WindowFacts,
}

impl Pressed {
    /// Resets the calm streak, folds the level into the episode, and says
    /// `external` when the pressure is not ours.
    fn open(mut n: BrakeState, level: Level, w: &WindowFacts) -> Self {
        n.calm_streak = 0;
        let mut ep = n.episode.unwrap_or_default();
        ep.level = ep.level.max(level);
        let ours = !not_ours(w);
        if !ours && n.notice != Some(BrakeNotice::Acted) && !n.seeded {
            n.notice = Some(BrakeNotice::External);
        }
        let target = shrink_target(w.allocated);
        let can_shrink = !w.pinned
            && ours
            && !n.seeded
            && ep.shrinks < MAX_SHRINKS_PER_EPISODE
            && caps::pad(w.allocated) > caps::pad(target);
        Self {
            n,
            ep,
            target,
            can_shrink,
            w: *w,
        }
    }

    /// Records a shrink to `target`; returns the cap.
    fn shrink(&mut self) -> u32 {
        self.ep.shrinks += 1;
        self.n.pending_cap = Some(self.target);
        self.n.hurt = Some(self.n.hurt.map_or(self.w.allocated, |h| h.max(self.w.allocated)));
        self.n.shrunk_since_turn = true;
        self.target
    }

    fn critical_at_turn(&mut self) -> Action {
        match self.n.pending_cap {
            // A deferred shrink is applied now rather than waiting for idle.
            Some(cap) if !self.w.pinned => {
                self.n.shrunk_since_turn = true;
                Action::Shrink { cap }
            }
            _ if self.can_shrink => Action::Shrink { cap: self.shrink() },
            _ => Action::None,
        }
    }

    fn warning_at_turn_end(&mut self, paging: Option<bool>) -> Action {
        if paging.unwrap_or(true) && self.can_shrink && self.n.pending_cap.is_none() {
            Action::DeferShrink { cap: self.shrink() }
        } else {
            Action::None
        }
    }

    fn idle(&mut self, level: Level) -> Action {
        match self.n.pending_cap {
            Some(cap) => {
                // The deferred shrink, applied now that the user is away;
                // the unload follows at the next critical tick.
                self.n.unload_armed = true;
                Action::Shrink { cap }
            }
            None if level == Level::Critical => self.idle_critical(),
            None => {
                self.n.unload_armed = false;
                Action::None
            }
        }
    }

    fn idle_critical(&mut self) -> Action {
        let (seeded, unloaded) = (self.n.seeded, self.ep.unloaded);
        if self.n.unload_armed && !seeded && !unloaded {
            self.n.unload_armed = false;
            self.ep.unloaded = true;
            Action::Unload
        } else if self.can_shrink && !self.n.shrunk_since_turn {
            let cap = self.shrink();
            self.n.unload_armed = true;
            Action::Shrink { cap }
        } else if !seeded && !unloaded && !self.n.unload_armed {
            self.n.unload_armed = true;
            Action::ArmUnload
        } else {
            Action::None
        }
    }
}

/// A calm sample: episode end, disarming, growth (shared with `law::mlx`).
pub(crate) fn calm_step(point: Point, mut n: BrakeState, w: &WindowFacts) -> (Action, BrakeState) {
    n.calm_streak += 1;
    n.unload_armed = false;
    if n.episode.is_some() && n.calm_streak >= EPISODE_END_CALM_SAMPLES {
        n.episode = None;
        n.pending_cap = None;
        n.seeded = false;
    }
    if point == Point::Idle
        && n.episode.is_none()
        && n.calm_streak >= GROW_AFTER_CALM_SAMPLES
        && !w.pinned
        && let (Some(cap), Some(hurt)) = (n.cap, n.hurt)
    {
        let target = grow_ceiling(hurt).min(w.uncapped.max(WINDOW_FLOOR_TOKENS));
        if caps::pad(target) > caps::pad(cap) {
            n.calm_streak = 0;
            return (Action::Grow { cap: target }, n);
        }
    }
    (Action::None, n)
}

/// Whether an idle sample is due: not within `skip` (see
/// `idle_sample_skip`) of the previous sample or of the end of the last turn.
/// Times are milliseconds on the caller's monotonic clock (any origin).
pub fn idle_sample_due(
    now_ms: u64,
    last_sample_ms: Option<u64>,
    last_turn_end_ms: Option<u64>,
    skip: Duration,
) -> bool {
    let skip_ms = skip.as_millis() as u64;
    let recent = |t: Option<u64>| t.is_some_and(|t| now_ms.saturating_sub(t) < skip_ms);
    !recent(last_sample_ms) && !recent(last_turn_end_ms)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod clock_tests;
