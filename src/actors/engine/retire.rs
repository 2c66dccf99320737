//! The one way a live child leaves the engine: an unload on request, an
//! idle reap, a switch to another model, shutdown, the brake's emergency
//! unload, a hung child, a lost RPC worker. `retire` saves the
//! conversation's KV when the stop is the warden's own choice on a healthy
//! child, stops the process, drops the live brake state (it belongs to the
//! child; the window memory and an unload's carry, recorded before, outlive
//! it), publishes a status without the model, and says so once. What it
//! returns is what carries over to the caller: the child's last output.
//! (Every way out used to be written out by hand, five times, and they
//! disagreed on the brake state and on publishing before the event.)
//! A brake respawn is not a retirement (the model stays, its brake state
//! carries whole), but one that fails after the old child stopped ends as
//! one does (`gone`); a child that died by itself is recorded by
//! `take_dead_child`, which shares the rule on the brake state.
//! Part of `EngineCore`.

use std::time::Duration;

use super::child_holder::Stopped;
use super::core::EngineCore;
use crate::status::{UnloadReason, WardenEvent};

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
        #[cfg(test)]
        if self == Self::Evicted && crate::law::mutant::is(crate::law::mutant::Mutant::EvictUnsaved) {
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
    fn grace(self, stop_grace: Duration) -> Duration {
        match self {
            Self::WorkerLost => stop_grace.min(LOST_STOP_GRACE),
            _ => stop_grace,
        }
    }
}

/// The stop grace of a child whose RPC worker is lost.
pub const LOST_STOP_GRACE: Duration = Duration::from_millis(200);

impl EngineCore {
    /// Retires the live child for `why`: its output tail as it was when it
    /// was told to stop (a hung or lost child's error quotes it); `None`
    /// when there was no child.
    pub(crate) async fn retire(&mut self, why: Retire) -> Option<String> {
        let c = self.child.get_mut()?;
        if let Some(what) = why.saves_kv() {
            self.kv.save_all(c, what).await;
        }
        // An eviction says what it gave back; the others are known by their reason.
        let freed_bytes = c.footprint_bytes().filter(|_| why == Retire::Evicted);
        let Stopped { child, raw, exit } = self.child.stop(why.grace(self.cfg().stop_grace)).await?;
        tracing::info!(
            engine = %self.backend.kind().name(),
            model = %child.model_id(),
            pid = child.process.pid(),
            reason = %why.reason(),
            "model unloaded ({exit})"
        );
        self.gone(child.model_id(), why, freed_bytes);
        Some(raw)
    }

    /// A child of `model` left the engine for `why` (retired, or a brake
    /// respawn that failed after the old child stopped): its live brake
    /// state goes with it, a status without the model is published, and
    /// then the `Unloaded` event, so an observer of the unload sees a
    /// status without the model.
    pub(crate) fn gone(&mut self, model: &str, why: Retire, freed_bytes: Option<u64>) {
        self.brake.child_gone();
        // The idle-reload record is the last unload's: any other unload
        // clears it (the spec's `cleanup()`), so a reap, a load, then an
        // unload never announces an idle reload; the reap sets it after.
        if why != Retire::Idle {
            self.usage.reaped(None);
        }
        // A brake action held for the running turns goes with the child.
        self.intake.forget_brake();
        self.publish();
        self.emit(WardenEvent::Unloaded {
            model: model.to_string(),
            reason: why.reason(),
            freed_bytes,
        });
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
