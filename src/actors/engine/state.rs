//! What the engine holds beside its child, as plain values: the moment of
//! the last use (on both clocks) and the rest of its use (`Usage`), what
//! the engine is busy with and the published state derived from it. The
//! brake's state is `brake_state`'s, the child's `child_holder`'s.
//!
//! No clock is read here: the time comes in as a value (`Used::read` is
//! the core's, at the event), so a test or the simulator can say when
//! (`tests::the_owners_and_the_law_read_no_clock_and_do_no_io`).

use std::time::SystemTime;

use tokio::time::Instant;

use crate::law::keep_alive::KeepAlive;
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

/// How the engine has been used: the last use (the idle clock), the turns
/// handled, the keep-alive a request set and the model it holds for, and
/// the model an idle reap unloaded until a turn consumes it (the spec's
/// `_idle_unload`). Its fields are written only by these methods.
#[derive(Debug, Default)]
pub struct Usage {
    last: Option<Used>,
    turns: u64,
    keep_alive: Option<(String, KeepAlive)>,
    reaped: Option<String>,
    loads: Loads,
    /// Since when a turn of its has been relaying (none: none is).
    serving_since: Option<Instant>,
}

/// The model's loads and yields, which the scheduler across models weighs
/// (`law::schedule`: a switch's cost is the model's own last load) and the
/// status shows as they are.
pub use crate::status::LoadsView as Loads;

impl Usage {
    /// The last use (the end of the last turn or load).
    pub fn last(&self) -> Option<Used> {
        self.last
    }

    /// Turns handled.
    pub fn turns(&self) -> u64 {
        self.turns
    }

    /// Marks the idle clock at `now` (a load's end).
    pub fn touch(&mut self, now: Used) {
        self.last = Some(now);
    }

    /// A turn ended at `now`: counted, and the idle clock marked.
    pub fn turn_done(&mut self, now: Used) {
        self.turns += 1;
        self.touch(now);
    }

    /// The keep-alive a request set, and the model it holds for.
    pub fn keep_alive(&self) -> Option<(&str, KeepAlive)> {
        self.keep_alive.as_ref().map(|(m, k)| (m.as_str(), *k))
    }

    /// A request asked `model` be kept for `k`.
    pub fn hold(&mut self, model: &str, k: KeepAlive) {
        self.keep_alive = Some((model.to_string(), k));
    }

    /// `model` is about to load: a keep-alive holds for its model until
    /// another model runs.
    pub fn switching_to(&mut self, model: &str) {
        if self.keep_alive.as_ref().is_some_and(|(m, _)| m != model) {
            self.keep_alive = None;
        }
    }

    /// An idle reap unloaded `model` (left for the next turn to announce).
    pub fn reaped(&mut self, model: Option<String>) {
        self.reaped = model;
    }

    /// A load took `ms`.
    pub fn loaded(&mut self, ms: u64) {
        self.loads.count += 1;
        self.loads.last_ms = Some(ms);
        self.loads.total_ms = self.loads.total_ms.saturating_add(ms);
    }

    /// It left the memory to a waiting model.
    pub fn yielded(&mut self) {
        self.loads.yields += 1;
    }

    /// The loads so far, and the time served up to `now`.
    pub fn loads(&self, now: Instant) -> Loads {
        let serving = self.serving_since.map_or(0, |t| millis(now, t));
        Loads {
            serving_ms: self.loads.serving_ms.saturating_add(serving),
            ..self.loads
        }
    }

    /// `running` turns relay at `now` (a turn was handed to its relay, or
    /// its relay ended): serving time runs while any does.
    pub fn running(&mut self, running: usize, now: Instant) {
        match (running > 0, self.serving_since) {
            (true, None) => self.serving_since = Some(now),
            (false, Some(t)) => {
                self.serving_since = None;
                self.loads.serving_ms = self.loads.serving_ms.saturating_add(millis(now, t));
            }
            _ => {}
        }
    }

    /// The model an idle reap unloaded, consumed by the turn that reads it.
    pub fn take_reaped(&mut self) -> Option<String> {
        self.reaped.take()
    }
}

/// Whole milliseconds from `since` to `now` (none when `now` is earlier).
fn millis(now: Instant, since: Instant) -> u64 {
    now.saturating_duration_since(since).as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Serving time runs while any turn relays, and only then: a status read
    /// mid-turn counts up to its moment, an idle stretch counts nothing.
    #[test]
    fn serving_time_counts_only_while_turns_run() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut u = Usage::default();
        assert_eq!(u.loads(at(5)).serving_ms, 0);
        u.running(1, at(10));
        u.running(2, at(11));
        assert_eq!(u.loads(at(12)).serving_ms, 2_000);
        u.running(0, at(14));
        assert_eq!(u.loads(at(100)).serving_ms, 4_000);
        u.running(1, at(200));
        u.running(0, at(201));
        assert_eq!(u.loads(at(300)).serving_ms, 5_000);
        // why: a moment read before the start counts nothing, never wraps
        u.running(1, at(400));
        assert_eq!(u.loads(at(399)).serving_ms, 5_000);
    }

    /// A turn's end counts it and marks the idle clock at its moment.
    #[test]
    fn a_turns_end_marks_the_idle_clock_at_its_moment() {
        let now = Used {
            at: Instant::now(),
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        };
        let mut u = Usage::default();
        u.turn_done(now);
        assert_eq!((u.turns(), u.last()), (1, Some(now)));
    }

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
