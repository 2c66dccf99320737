//! How a child leaves the engine, as an order with no I/O: why it is
//! retired (`Retire`), what that says (the `Unloaded` reason, whether its
//! conversations are saved first, the stop's grace), and the steps every
//! way out keeps (`Retire::leaving`), carried out by `retire` and run by
//! the simulator (`warden::arbiter_sim`) too.
//!
//! The order, and why:
//! 1. `Save`, when the stop is the warden's own choice on a child that
//!    still answers: the conversations' KV goes to disk while the child
//!    can still write it (after the stop there is nothing to save from).
//! 2. `Stop`, with the grace its reason allows.
//! 3. `Forget`: the live brake state goes with the child (the window
//!    memory and an unload's carry, recorded before, outlive it), and so
//!    does a brake action held for its turns; the idle-reload record is
//!    the last unload's, so any unload but a reap clears it.
//! 4. `Publish` a status without the model, then `Said` (the `Unloaded`
//!    event), so an observer of the unload sees a status without it.
//! 5. The idle reap's record, last (`Reaped`): its model's next turn
//!    announces an idle reload, and an unload's carry is forgotten (a
//!    reap forgets the unload's record, never the window memory). Last, so
//!    the status published at the unload is the plain unload's.
//!
//! A brake respawn that fails after its old child stopped ends with the
//! same steps from `Forget` on (`Retire::gone`).

use std::time::Duration;

use crate::status::UnloadReason;

/// Why a child is retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retire {
    /// `/warden/unload` or an embedder's `Unload`.
    Request,
    /// The idle reap, or a turn that asked for `keep_alive: 0`.
    Idle,
    /// Another model's turn or load.
    Switch,
    /// The warden is stopping.
    Shutdown,
    /// The brake's emergency unload (its carry recorded first).
    Brake,
    /// The child missed a watchdog.
    Hung,
    /// An RPC worker the child ran layers on is gone.
    WorkerLost,
    /// A handler of the engine panicked with the child in an unknown state.
    Panicked,
    /// Another resident needed its memory, or the brake over the residents
    /// chose it (`law::residents`).
    Evicted,
}

impl Retire {
    /// The `Unloaded` event's and the log's reason.
    pub fn reason(self) -> UnloadReason {
        match self {
            Self::Request => UnloadReason::Request,
            Self::Idle => UnloadReason::Idle,
            Self::Switch => UnloadReason::Switch,
            Self::Shutdown => UnloadReason::Shutdown,
            Self::Brake => UnloadReason::Brake,
            Self::Hung => UnloadReason::Hung,
            Self::WorkerLost => UnloadReason::WorkerLost,
            Self::Panicked => UnloadReason::Panicked,
            Self::Evicted => UnloadReason::Evicted,
        }
    }

    /// Why the slot's KV is saved first: a stop the warden chose, on a child
    /// that still answers. Shutdown is not saved (the process is leaving,
    /// and a save would hold it up); a hung child or one whose worker is gone
    /// cannot answer a save.
    pub(crate) fn saves_kv(self) -> Option<&'static str> {
        if self == Self::Evicted && crate::law::broken!(EvictUnsaved) {
            return None;
        }
        match self {
            Self::Request => Some("manual unload"),
            Self::Idle => Some("idle unload"),
            Self::Switch => Some("switch to another model"),
            Self::Brake => Some("memory brake"),
            Self::Evicted => Some("eviction"),
            // A panicked handler left the child in an unknown state: its
            // slot is not trusted.
            Self::Shutdown | Self::Hung | Self::WorkerLost | Self::Panicked => None,
        }
    }

    /// How long the child gets after SIGTERM: a child whose worker is gone is
    /// usually blocked in a send or receive to it and ignores SIGTERM
    /// (measured: the whole 5 s grace with the link cut), with nothing of
    /// its state left to save.
    pub(crate) fn grace(self, stop_grace: Duration) -> Duration {
        match self {
            Self::WorkerLost => stop_grace.min(LOST_STOP_GRACE),
            _ => stop_grace,
        }
    }
}

/// The stop grace of a child whose RPC worker is lost.
pub const LOST_STOP_GRACE: Duration = Duration::from_millis(200);

/// One step of a child's way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    /// Its conversations' KV saved, for this reason (said in the log).
    Save(&'static str),
    /// The process stopped, with this grace after SIGTERM.
    Stop(Duration),
    /// Its live brake state and a brake action held for its turns go with
    /// it; `reaped`: the idle-reload record too (any unload but a reap).
    Forget { reaped: bool },
    /// A status without the model.
    Publish,
    /// The `Unloaded` event.
    Said,
    /// The idle reap's record: the model reaped, for its next turn to
    /// announce; an unload's carry forgotten.
    Reaped,
}

impl Retire {
    /// The steps of a child's way out for this reason, the stop's grace
    /// configured as `stop_grace`.
    pub(crate) fn leaving(self, stop_grace: Duration) -> Vec<Leave> {
        let mut steps: Vec<Leave> = self.saves_kv().map(Leave::Save).into_iter().collect();
        let stop = Leave::Stop(self.grace(stop_grace));
        // The simulator's mutant: stopped before saved.
        if crate::law::broken!(SaveAfterStop) {
            steps.insert(0, stop);
        } else {
            steps.push(stop);
        }
        steps.extend(self.gone());
        if self == Self::Idle {
            steps.push(Leave::Reaped);
        }
        steps
    }

    /// What follows a child's stop: the same for a retirement and for a
    /// brake respawn that failed after its old child stopped.
    pub(crate) fn gone(self) -> [Leave; 3] {
        [
            Leave::Forget {
                reaped: self != Self::Idle,
            },
            Leave::Publish,
            Leave::Said,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way out.
    const ALL: [Retire; 9] = [
        Retire::Request,
        Retire::Idle,
        Retire::Switch,
        Retire::Shutdown,
        Retire::Brake,
        Retire::Hung,
        Retire::WorkerLost,
        Retire::Panicked,
        Retire::Evicted,
    ];

    /// Whether `why` is listed in `ALL` (adding a variant fails to compile
    /// here until it is).
    fn listed(why: Retire) -> bool {
        match why {
            Retire::Request
            | Retire::Idle
            | Retire::Switch
            | Retire::Shutdown
            | Retire::Brake
            | Retire::Hung
            | Retire::WorkerLost
            | Retire::Panicked
            | Retire::Evicted => ALL.contains(&why),
        }
    }

    /// Each way out has a reason of its own, so the `Unloaded` event and
    /// the metrics' label tell them apart (the spellings are `law::names`').
    #[test]
    fn every_reason_is_its_own_word() {
        for why in ALL {
            assert!(listed(why));
            let r = why.reason();
            assert_eq!(ALL.iter().filter(|o| o.reason() == r).count(), 1, "{why:?}: {r}");
        }
    }

    /// Every way out saves (when it does) before it stops, forgets, then
    /// says; only the idle reap leaves its record, and last.
    #[test]
    fn every_way_out_keeps_its_order() {
        for why in ALL {
            let steps = why.leaving(Duration::from_secs(5));
            let at = |f: fn(&Leave) -> bool| steps.iter().position(f);
            let stop = at(|s| matches!(s, Leave::Stop(_))).expect("every way out stops");
            if let Some(save) = at(|s| matches!(s, Leave::Save(_))) {
                assert!(save < stop, "{why:?}: {steps:?}");
            }
            assert_eq!(
                &steps[stop + 1..stop + 4],
                &why.gone(),
                "{why:?}: {steps:?}"
            );
            let reaped = at(|s| *s == Leave::Reaped);
            assert_eq!(reaped.is_some(), why == Retire::Idle, "{why:?}: {steps:?}");
            assert!(reaped.is_none_or(|r| r == steps.len() - 1), "{steps:?}");
        }
    }

    /// No retirement waits past the configured grace, and only one that
    /// saves nothing may cut it short: a save needs the child alive through it.
    #[test]
    fn a_save_gets_the_whole_grace_and_no_stop_waits_longer() {
        for grace in [
            Duration::ZERO,
            LOST_STOP_GRACE / 2,
            LOST_STOP_GRACE,
            Duration::from_secs(5),
        ] {
            for why in ALL {
                let g = why.grace(grace);
                assert!(g <= grace, "{why:?} at {grace:?}: {g:?}");
                if why.saves_kv().is_some() {
                    assert_eq!(g, grace, "{why:?} saves, so its child gets the whole grace");
                }
            }
        }
    }
}
