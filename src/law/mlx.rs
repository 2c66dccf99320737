//! The MLX engine's law: the memory ceiling (`MemoryBudget`) behind the
//! memory bound, and the MLX memory brake, `mlx_step`.
//!
//! # The memory ceiling
//! The conversation size at which the child's predicted footprint (its
//! measured base plus the KV of the conversation) reaches the budget, less the
//! output budget's 512-token floor (counted twice with the child's own
//! prompt + max_tokens accounting: the safe side). The budget is what
//! `WorkingSet` says: on Apple Silicon the whole of Metal's recommended
//! working set (`recommendedMaxWorkingSetSize`, Metal's own "how much
//! memory this device can use with good performance", already a share of
//! the unified memory); where Metal does not answer (Linux's `mlx[cpu]`, a
//! Mac without a Metal device) the RAM total (bounded by the cgroup) at
//! the CPU engine's 0.75 share, so the path is exercised on Linux.
//!
//! # The brake (`mlx_step`)
//! The MLX child's memory grows with the conversation, and, unlike
//! llama-server, it can give memory back live: a **release** (a prefix-cache
//! reset and a one-token non-streamed request, after which mlx-vlm clears its
//! buffer cache) and a **shrink** of the memory bound (`max_kv_size`, applied
//! live, no respawn). It keeps the CPU brake's safe points, pacing, episodes,
//! unload, notices and carries (`law::brake`). Decided here where the spec's
//! list is missing:
//! - **A release first**: when the child holds at least `RELEASE_WORTH_BYTES`
//!   (64 MiB) above its base, and at most once between turns (a release
//!   costs the next turn a re-read of its conversation; a second one without
//!   a turn between gives nothing back). A release says nothing.
//! - **A useful shrink**: halving the bound (grid, floor 4096) is useful only
//!   when the last turn's request is above the new bound's compaction
//!   threshold (80 %): a conversation shorter than that holds no KV a
//!   smaller bound would free. The request's size is the one the child
//!   measured (its `timings`: cached, read and generated tokens), else the
//!   estimate sent with it (an abandoned or uncounted turn). The threshold
//!   is the default one always: the warden keeps no conversation of its own
//!   (its clients compact theirs), so none has a threshold to read.
//! - **External**: pressure with less than 256 MiB a release could give back
//!   and no useful shrink left is not the conversation's: the `external`
//!   notice (never over `acted`, never on a seeded child).
//! - Critical at a turn boundary, or warning with paging at a turn's end:
//!   release, else shrink, now (both are live, so nothing waits for idle).
//!   While away: critical releases or shrinks once and arms; the next
//!   critical unloads. Growth as the CPU brake's.

use std::time::Duration;

use serde::Serialize;

use super::brake::{self, BrakeNotice, BrakeState, Episode, Level, Point, WindowFacts};
use super::caps;
use super::names::BrakeDid;

/// The MLX budget's share of the memory total (Linux; the CPU law's).
pub const MLX_BUDGET_FRACTION: f64 = 0.75;
/// The output budget's floor the ceiling reserves.
pub const OUTPUT_RESERVE_TOKENS: u64 = 512;
/// Above-base memory from which a release is worth its cost.
pub const RELEASE_WORTH_BYTES: u64 = 64 * 1024 * 1024;
/// Under this much to give back (and no useful shrink), the pressure is external.
pub const EXTERNAL_RELEASE_BYTES: u64 = 256 * 1024 * 1024;
/// The default compaction threshold (share of the window).
pub const DEFAULT_COMPACTION_THRESHOLD: f64 = 0.8;
/// mlx-vlm 0.7.10's own per-token wait (`DEFAULT_TOKEN_QUEUE_TIMEOUT`).
pub const MLX_VLM_TOKEN_WAIT: Duration = Duration::from_secs(600);
/// The per-token wait of a child spawned without a trained window.
pub const UNTRAINED_TOKEN_WAIT: Duration = Duration::from_secs(3660);
/// How much longer the child waits than the warden's watchdog.
pub const TOKEN_WAIT_MARGIN: Duration = Duration::from_secs(60);

/// What the MLX budget is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WorkingSet {
    /// Metal's recommended working set, bytes: the budget whole.
    Metal(u64),
    /// The RAM total, bytes: `MLX_BUDGET_FRACTION` of it.
    Ram(u64),
}

impl WorkingSet {
    /// The budget, bytes.
    pub fn budget_bytes(self) -> u64 {
        match self {
            Self::Metal(b) => b,
            Self::Ram(b) => (b as f64 * MLX_BUDGET_FRACTION) as u64,
        }
    }
}

/// What the memory ceiling is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryBudget {
    /// The child's measured footprint right after load.
    pub base_bytes: u64,
    /// Where the budget comes from.
    pub working_set: WorkingSet,
    /// KV bytes per token of the model.
    pub kv_per_token: u64,
}

/// The conversation token count at which the footprint reaches the budget.
pub fn tokens_at_ceiling(b: MemoryBudget) -> u32 {
    let budget = b.working_set.budget_bytes();
    let room = budget.saturating_sub(b.base_bytes);
    let tokens = (room / b.kv_per_token.max(1)).saturating_sub(OUTPUT_RESERVE_TOKENS);
    tokens.min(u32::MAX as u64) as u32
}

/// The bound to send: `kv_bound(trained, min(ceiling, cap))`; `None` when
/// memory does not bind (the trained window fits). A model whose
/// `config.json` names no trained window is always bounded: mlx-vlm would
/// let its cache grow without limit, so the ceiling (floored) is its only
/// window.
pub fn memory_bound(trained: Option<u32>, ceiling: u32, cap: Option<u32>) -> Option<u32> {
    let limit = cap.map_or(ceiling, |c| c.min(ceiling));
    match trained {
        Some(t) if limit >= t => None,
        _ => Some(super::window::kv_bound(trained, limit)),
    }
}

/// How long the MLX child waits for each next token before it fails the
/// request itself (mlx-vlm's `MLX_VLM_TOKEN_QUEUE_TIMEOUT`, 600 s by
/// default in 0.7.10). The warden's own watchdog must fire first, so that a
/// stuck read ends as the warden's verdict (a hung child, restarted) rather
/// than as a generic error from the child: never under
/// `first_token_timeout + 60 s`. A child spawned without a trained window
/// waits at least 3660 s (the spec's: the first-token watchdog's absolute
/// maximum plus 60 s), as its window is bounded by memory alone and a
/// prompt at any ceiling the bound can give must be read whole. The value
/// is the child's from its spawn: a live change of the watchdog reaches the
/// next child.
pub fn token_wait(trained: Option<u32>, first_token_timeout: Duration) -> Duration {
    let floor = if trained.is_some() {
        MLX_VLM_TOKEN_WAIT
    } else {
        UNTRAINED_TOKEN_WAIT
    };
    floor.max(first_token_timeout + TOKEN_WAIT_MARGIN)
}

/// One MLX sample's readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlxReadings {
    /// The pressure level.
    pub level: Level,
    /// Paging evidence (turn_end).
    pub paging: Option<bool>,
    /// The child's footprint above its base: what a release gives back.
    pub above_base: Option<u64>,
}

/// What the MLX law knows of the child and its conversation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlxFacts {
    /// The working window (the bound the child enforces, else the trained).
    pub window: u32,
    /// Growth's upper bound: the trained window, else (a model without
    /// one) the memory ceiling: such a child keeps its last bound, as it
    /// cannot be given an unbounded window back.
    pub uncapped: u32,
    /// KV bytes per token.
    pub kv_per_token: u64,
    /// The memory total.
    pub ram_bytes: u64,
    /// The last turn's largest request, in tokens (none measured yet: 0).
    pub last_request_tokens: u32,
    /// Its conversation's compaction threshold (share of the window).
    pub threshold: f64,
    /// `WARDEN_CTX` pins the window.
    pub pinned: bool,
}

/// What the MLX engine must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum MlxAction {
    /// Nothing.
    None,
    /// Reset the prefix cache, send a one-token request, measure.
    Release,
    /// Apply a smaller bound.
    Shrink {
        /// The new cap.
        cap: u32,
    },
    /// Apply a larger bound.
    Grow {
        /// The new cap.
        cap: u32,
    },
    /// Arm the unload.
    ArmUnload,
    /// Stop the child.
    Unload,
}

impl MlxAction {
    /// The log's `action=` word.
    pub fn log_name(self) -> &'static str {
        self.did().map_or("none", BrakeDid::as_str)
    }

    /// What the action is called once done (`None` for no action).
    pub fn did(self) -> Option<BrakeDid> {
        match self {
            Self::None => None,
            Self::Release => Some(BrakeDid::Release),
            Self::Shrink { .. } => Some(BrakeDid::Shrink),
            Self::Grow { .. } => Some(BrakeDid::Grow),
            Self::ArmUnload => Some(BrakeDid::ArmUnload),
            Self::Unload => Some(BrakeDid::Unload),
        }
    }
}

/// The level a sample is decided at: the kernel's, except that a calm turn
/// end whose turn swapped out 64 MiB or more (`law::pressure::
/// PAGING_WARNING_BYTES`, the paging evidence) is a warning (the spec's
/// MLX sensors: "64 MiB of them count as a warning"). Only a turn's end
/// has a paging window; an unreadable counter changes nothing.
pub fn sample_level(point: Point, level: Level, paging: Option<bool>) -> Level {
    match (point, level, paging) {
        (Point::TurnEnd, Level::Calm, Some(true)) => Level::Warning,
        _ => level,
    }
}

/// One MLX brake sample.
pub fn mlx_step(point: Point, r: &MlxReadings, s: &BrakeState, f: &MlxFacts) -> (MlxAction, BrakeState) {
    let r = &MlxReadings {
        level: sample_level(point, r.level, r.paging),
        ..*r
    };
    let mut n = *s;
    if point == Point::TurnStart {
        n.unload_armed = false;
        n.shrunk_since_turn = false;
        n.released_since_turn = false;
    }
    if r.level == Level::Calm {
        return calm_step(point, n, f);
    }
    let mut p = Pressed::open(n, r, f);
    let action = if acts_now(point, r) {
        p.now()
    } else if point == Point::Idle && r.level == Level::Critical {
        p.idle_critical()
    } else {
        if point == Point::Idle {
            p.n.unload_armed = false;
        }
        MlxAction::None
    };
    p.n.episode = Some(p.ep);
    (action, p.n)
}

/// The CPU brake's calm step over the MLX child's window (growth included).
fn calm_step(point: Point, n: BrakeState, f: &MlxFacts) -> (MlxAction, BrakeState) {
    let facts = WindowFacts {
        allocated: f.window,
        kv_per_token: f.kv_per_token,
        ram_bytes: f.ram_bytes,
        uncapped: f.uncapped,
        pinned: f.pinned,
    };
    let (a, next) = brake::calm_step(point, n, &facts);
    let action = match a {
        brake::Action::Grow { cap } => MlxAction::Grow { cap },
        _ => MlxAction::None,
    };
    (action, next)
}

/// Whether the sample acts at once: critical at a turn boundary, or paging
/// (or an unreadable counter) at a turn's end.
fn acts_now(point: Point, r: &MlxReadings) -> bool {
    match point {
        Point::TurnStart | Point::TurnEnd => {
            r.level == Level::Critical || (point == Point::TurnEnd && r.paging.unwrap_or(true))
        }
        Point::Idle => false,
    }
}

/// A non-calm MLX sample being decided: the next state, its episode, and
/// what a release or a shrink could do.
struct Pressed {
    n: BrakeState,
    ep: Episode,
    release: bool,
    shrink: bool,
    target: u32,
    window: u32,
}

impl Pressed {
    /// Resets the calm streak, folds the level into the episode, weighs a
    /// release and a useful shrink, and says `external` when neither helps.
    fn open(mut n: BrakeState, r: &MlxReadings, f: &MlxFacts) -> Self {
        n.calm_streak = 0;
        let mut ep = n.episode.unwrap_or_default();
        ep.level = ep.level.max(r.level);
        let gives = r.above_base.unwrap_or(0);
        let release = gives >= RELEASE_WORTH_BYTES && !n.released_since_turn;
        let target = brake::shrink_target(f.window);
        let shrink = !f.pinned
            && !n.seeded
            && ep.shrinks < brake::MAX_SHRINKS_PER_EPISODE
            && caps::pad(f.window) > caps::pad(target)
            && f.last_request_tokens as f64 > f.threshold * target as f64;
        if !release && gives < EXTERNAL_RELEASE_BYTES && !shrink && n.notice != Some(BrakeNotice::Acted) && !n.seeded {
            n.notice = Some(BrakeNotice::External);
        }
        Self {
            n,
            ep,
            release,
            shrink,
            target,
            window: f.window,
        }
    }

    fn do_shrink(&mut self) -> MlxAction {
        self.ep.shrinks += 1;
        self.n.pending_cap = Some(self.target);
        self.n.hurt = Some(self.n.hurt.map_or(self.window, |h| h.max(self.window)));
        self.n.shrunk_since_turn = true;
        MlxAction::Shrink { cap: self.target }
    }

    fn now(&mut self) -> MlxAction {
        if self.release {
            self.n.released_since_turn = true;
            MlxAction::Release
        } else if self.shrink {
            self.do_shrink()
        } else {
            MlxAction::None
        }
    }

    fn idle_critical(&mut self) -> MlxAction {
        let (seeded, unloaded) = (self.n.seeded, self.ep.unloaded);
        if self.n.unload_armed && !seeded && !unloaded {
            self.n.unload_armed = false;
            self.ep.unloaded = true;
            MlxAction::Unload
        } else if self.release {
            self.n.released_since_turn = true;
            self.n.unload_armed = true;
            MlxAction::Release
        } else if self.shrink && !self.n.shrunk_since_turn {
            self.n.unload_armed = true;
            self.do_shrink()
        } else if !seeded && !unloaded && !self.n.unload_armed {
            self.n.unload_armed = true;
            MlxAction::ArmUnload
        } else {
            MlxAction::None
        }
    }
}

/// The state after the engine applied (or failed to apply) a bound change:
/// applied, the cap is in force and a shrink says `acted`; not applied, the
/// brake forgets the decision (cap, episode count, notice) as if it never
/// happened.
pub fn after_bound(before: &BrakeState, decided: &BrakeState, action: MlxAction, applied: bool) -> BrakeState {
    if !applied {
        let mut n = *before;
        n.calm_streak = decided.calm_streak;
        return n;
    }
    let mut n = *decided;
    if let MlxAction::Shrink { cap } | MlxAction::Grow { cap } = action {
        n.cap = Some(cap);
        n.pending_cap = None;
        if matches!(action, MlxAction::Shrink { .. }) && n.notice != Some(BrakeNotice::Acted) {
            n.notice = Some(BrakeNotice::Acted);
        }
    }
    n
}

#[cfg(test)]
#[path = "mlx_tests.rs"]
mod tests;
