//! The one way a live child leaves the engine: an unload on request, an
//! idle reap, a switch to another model, shutdown, the brake's emergency
//! unload, a hung child, a lost RPC worker. `retire` carries out the steps
//! `leaving::Retire::leaving` orders (the conversations saved when the
//! stop is the warden's own choice on a healthy child, the process
//! stopped, the live brake state dropped, a status without the model
//! published, the unload said once). What it returns is what carries over
//! to the caller: the child's last output. A brake respawn is not a
//! retirement (the model stays, its brake state carries whole), but one
//! that fails after the old child stopped ends as one does (`gone`); a
//! child that died by itself is recorded by `take_dead_child`, which
//! shares the rule on the brake state. Part of `EngineCore`.

use super::child_holder::Stopped;
use super::core::EngineCore;
use super::leaving::{Leave, Retire};
use crate::status::WardenEvent;

impl EngineCore {
    /// Retires the live child for `why`: its output tail as it was when it
    /// was told to stop (a hung or lost child's error quotes it); `None`
    /// when there was no child.
    pub(crate) async fn retire(&mut self, why: Retire) -> Option<String> {
        let c = self.child.get()?;
        // An eviction says what it gave back; the others are known by their reason.
        let freed_bytes = c.footprint_bytes().filter(|_| why == Retire::Evicted);
        let mut stopped = None;
        for step in why.leaving(self.cfg().stop_grace) {
            match step {
                Leave::Save(what) => {
                    if let Some(c) = self.child.get_mut() {
                        self.kv.save_all(c, what).await;
                    }
                }
                Leave::Stop(grace) => {
                    let Stopped { child, raw, exit } = self.child.stop(grace).await?;
                    tracing::info!(
                        engine = %self.backend.kind().name(),
                        model = %child.model_id(),
                        pid = child.process.pid(),
                        reason = %why.reason(),
                        "model unloaded ({exit})"
                    );
                    stopped = Some((child.model_id().to_string(), raw));
                }
                gone => {
                    let model = stopped.as_ref().map_or("", |(m, _)| m.as_str());
                    self.leave(gone, model, why, freed_bytes);
                }
            }
        }
        stopped.map(|(_, raw)| raw)
    }

    /// A child of `model` left the engine for `why` (retired, or a brake
    /// respawn that failed after the old child stopped): what follows its
    /// stop (`Retire::gone`).
    pub(crate) fn gone(&mut self, model: &str, why: Retire, freed_bytes: Option<u64>) {
        for step in why.gone() {
            self.leave(step, model, why, freed_bytes);
        }
    }

    /// One step after a child's stop.
    fn leave(&mut self, step: Leave, model: &str, why: Retire, freed_bytes: Option<u64>) {
        match step {
            Leave::Forget { reaped } => {
                self.brake.child_gone();
                // The idle-reload record is the last unload's: any other
                // unload clears it (the spec's `cleanup()`), so a reap, a
                // load, then an unload never announces an idle reload; the
                // reap sets it after.
                if reaped {
                    self.usage.reaped(None);
                }
                self.intake.forget_brake();
            }
            Leave::Publish => self.publish(),
            Leave::Reaped => {
                // Left for the next turn to announce (the spec's `_idle_unload`).
                self.usage.reaped(Some(model.to_string()));
                // A reap forgets the unload's record, never the window memory.
                self.brake.forget_carry();
            }
            Leave::Said => self.emit(WardenEvent::Unloaded {
                model: model.to_string(),
                reason: why.reason(),
                freed_bytes,
            }),
            Leave::Save(_) | Leave::Stop(_) => unreachable!("saved and stopped before the child is gone"),
        }
    }
}
