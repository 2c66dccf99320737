//! What the engine holds beside its child, as plain values: the moment of
//! the last use (on both clocks), what the engine is busy with and the
//! published state derived from it, and everything the memory brake keeps.

use std::collections::HashMap;
use std::time::SystemTime;

use tokio::time::Instant;

use crate::law::brake::{BrakeDid, BrakeReload, BrakeState, Level, Remembered};
use crate::status::EngineState;

/// A moment of use, read on both clocks at once: the monotonic one paces
/// the idle timer and the brake, the wall clock is what the status says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    /// Monotonic.
    pub at: Instant,
    /// Wall clock.
    pub wall: SystemTime,
}

/// What the engine is busy with, beside whether a child runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Between messages, or in one that is not a load or a relay.
    Resting,
    /// Starting a child for a load.
    Loading,
    /// Relaying a turn's answer.
    Generating,
}

/// The published state: stopped after shutdown; loading while a load
/// spawns; generating while a turn relays through a live child; else ready
/// with a child and idle without.
pub fn state(shut_down: bool, activity: Activity, child: bool) -> EngineState {
    match (shut_down, activity, child) {
        (true, _, false) => EngineState::Stopped,
        (_, Activity::Loading, false) => EngineState::Loading,
        (_, Activity::Generating, true) => EngineState::Generating,
        (_, _, true) => EngineState::Ready,
        (_, _, false) => EngineState::Idle,
    }
}

/// Everything the memory brake keeps, in one value: the live child's state
/// (carried whole across its respawns, dropped with the child), why the
/// brake is off, the last reading and action, the idle pacing, and what
/// outlives a child (an unload's carry, the per-model window memory).
#[derive(Debug)]
pub struct Brake {
    /// The origin of the milliseconds the brake's law is given (the law
    /// reads no clock: `now`, a carry's and a memory's times are plain
    /// values on this engine's monotonic clock, `Brake::ms`).
    pub epoch: Instant,
    /// The live child's brake state.
    pub state: BrakeState,
    /// Why the brake is off, once it turned off (said once).
    pub off: Option<String>,
    /// The last level read.
    pub level: Option<Level>,
    /// The last action's log word.
    pub last_action: Option<BrakeDid>,
    /// When the last sample was taken (idle pacing), `Brake::ms`.
    pub last_sample_ms: Option<u64>,
    /// An unload's carry (the spec's `_brake_reload`).
    pub reload: Option<BrakeReload>,
    /// The per-model window memory (the spec's `_window_memory`).
    pub memory: HashMap<String, Remembered>,
}

impl Brake {
    /// A brake with nothing recorded, its clock starting at `epoch`.
    pub fn new(epoch: Instant) -> Self {
        Self {
            epoch,
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
    pub fn now_ms(&self) -> u64 {
        self.ms(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every input of `state`: shut down or not, each activity, a child or not.
    fn every_input() -> Vec<(bool, Activity, bool)> {
        // why: adding an activity fails to compile here until it is listed
        let all = |a: Activity| match a {
            Activity::Resting | Activity::Loading | Activity::Generating => a,
        };
        let activities = [Activity::Resting, Activity::Loading, Activity::Generating].map(all);
        let mut out = Vec::new();
        for shut in [false, true] {
            for a in activities {
                for child in [false, true] {
                    out.push((shut, a, child));
                }
            }
        }
        out
    }

    /// The state says there is a child (ready or generating) exactly when
    /// there is one, and generating exactly while a turn relays through it.
    #[test]
    fn the_state_claims_a_child_only_when_there_is_one() {
        for (shut, act, child) in every_input() {
            let s = state(shut, act, child);
            let says_child = matches!(s, EngineState::Ready | EngineState::Generating);
            assert_eq!(says_child, child, "{:?}: {s:?}", (shut, act, child));
            assert_eq!(
                s == EngineState::Generating,
                child && act == Activity::Generating,
                "{:?}: {s:?}",
                (shut, act, child)
            );
            assert!(s != EngineState::Loading || act == Activity::Loading, "{s:?}");
        }
    }

    /// After shutdown nothing runs again: without a child it is stopped
    /// whatever was in progress; a child still stopping keeps its own state.
    #[test]
    fn shutdown_stops_once_the_child_is_gone() {
        for (shut, act, child) in every_input() {
            let s = state(shut, act, child);
            if shut && !child {
                assert_eq!(s, EngineState::Stopped, "{act:?}");
            }
            if child {
                assert_eq!(
                    s,
                    state(!shut, act, child),
                    "{act:?}: shutdown decides nothing while the child lives"
                );
            }
            assert!(s != EngineState::Stopped || shut, "{:?}", (shut, act, child));
        }
    }
}
