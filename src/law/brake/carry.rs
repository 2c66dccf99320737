//! What the brake keeps and carries from one child of a model to the next:
//! its state (`BrakeState`, `Episode`, the `BrakeNotice` it holds), the
//! state after a respawn (`after_respawn`), an unload's carry
//! (`BrakeReload`), the per-model window memory (`Remembered`), the state a
//! new child starts with (`seed`), and the status view. Re-exported from
//! `law::brake`; the engine's brake (`actors::engine::brake`) keeps the
//! records and calls these.

use std::time::Duration;

use serde::Serialize;

use super::{Action, Level};

/// A notice for the user, consumed by the next stateful turn end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BrakeNotice {
    /// The brake shrank the window.
    Acted,
    /// Pressure the conversation does not cause.
    External,
}

impl BrakeNotice {
    /// The notice's reason on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acted => "acted",
            Self::External => "external",
        }
    }
}

/// One pressure episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Episode {
    /// The worst level seen.
    pub level: Level,
    /// Shrinks decided in it.
    pub shrinks: u32,
    /// Whether it unloaded the model.
    pub unloaded: bool,
}

/// The brake's state for one model, carried across respawns whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct BrakeState {
    /// The open episode.
    pub episode: Option<Episode>,
    /// Calm samples in a row.
    pub calm_streak: u32,
    /// The cap in force (applied to the live child, or seeding its next spawn).
    pub cap: Option<u32>,
    /// A shrink decided but not applied yet (warning: applied at idle).
    pub pending_cap: Option<u32>,
    /// The window that hurt.
    pub hurt: Option<u32>,
    /// The notice waiting for a stateful turn end.
    pub notice: Option<BrakeNotice>,
    /// A brake respawn happened that no turn has announced yet.
    pub respawned: bool,
    /// The child was seeded by an unload's carry (until its episode ends).
    pub seeded: bool,
    /// Lasting critical while away: the next idle critical unloads.
    pub unload_armed: bool,
    /// A shrink happened and no turn came since (no second idle shrink).
    pub shrunk_since_turn: bool,
    /// A release happened and no turn came since (MLX: nothing more to give).
    pub released_since_turn: bool,
}

/// How long an unload's carry seeds the next spawn of its model.
pub const BRAKE_RELOAD_TTL: Duration = Duration::from_secs(30 * 60);
/// How long the window memory keeps a model's cap, from its last write.
pub const WINDOW_MEMORY_TTL: Duration = Duration::from_secs(30 * 60);

/// The state after the engine carried out a respawn at `cap` for `action`.
/// A shrink that took sets `acted`; a failed respawn degrades into an unload
/// (the cap still applies at the reload).
pub fn after_respawn(s: &BrakeState, action: Action, cap: u32, ok: bool, pinned: bool) -> BrakeState {
    let mut n = *s;
    n.cap = Some(cap);
    n.pending_cap = None;
    if ok {
        n.respawned = true;
        if matches!(action, Action::Shrink { .. }) && !pinned {
            n.notice = Some(BrakeNotice::Acted);
        }
    } else {
        let mut ep = n.episode.unwrap_or_default();
        ep.unloaded = true;
        n.episode = Some(ep);
        n.unload_armed = false;
        if matches!(action, Action::Shrink { .. }) && !pinned {
            n.notice = Some(BrakeNotice::Acted);
        }
    }
    n
}

/// An unload's record (the spec's `_brake_reload`): it seeds the next spawn
/// of the same model within `BRAKE_RELOAD_TTL`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrakeReload {
    /// The model id.
    pub model: String,
    /// The cap to reload with.
    pub cap: Option<u32>,
    /// The window that hurt.
    pub hurt: Option<u32>,
    /// The episode, unload included.
    pub episode: Option<Episode>,
    /// When it was recorded, milliseconds on the engine's monotonic clock.
    #[serde(skip)]
    pub at_ms: Option<u64>,
}

/// The per-model window memory: the cap and the window that hurt, kept
/// `WINDOW_MEMORY_TTL` from the last write, read by every spawn of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remembered {
    /// The cap.
    pub cap: Option<u32>,
    /// The window that hurt.
    pub hurt: Option<u32>,
    /// The last write, milliseconds on the engine's monotonic clock.
    pub written_ms: u64,
}

/// Whether a record written at `at_ms` is still alive at `now_ms` for
/// `ttl` (both on the caller's monotonic clock; a `now` before `at`, which
/// a monotonic clock never gives, counts as no time passed).
pub fn alive(at_ms: u64, now_ms: u64, ttl: Duration) -> bool {
    u128::from(now_ms.saturating_sub(at_ms)) < ttl.as_millis()
}

/// The brake state a new child of a model starts with: an unload's carry
/// (within its TTL) seeds it whole; else the window memory's cap and hurt
/// window; else nothing.
pub fn seed(carry: Option<&BrakeReload>, memory: Option<&Remembered>, now_ms: u64) -> BrakeState {
    if let Some(c) = carry.filter(|c| c.at_ms.is_some_and(|at| alive(at, now_ms, BRAKE_RELOAD_TTL))) {
        return BrakeState {
            episode: c.episode,
            cap: c.cap,
            hurt: c.hurt,
            seeded: c.episode.is_some(),
            ..BrakeState::default()
        };
    }
    match memory.filter(|m| alive(m.written_ms, now_ms, WINDOW_MEMORY_TTL)) {
        Some(m) => BrakeState {
            cap: m.cap,
            hurt: m.hurt,
            ..BrakeState::default()
        },
        None => BrakeState::default(),
    }
}
