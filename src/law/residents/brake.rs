//! One brake over all residents: at a memory pressure sample taken for one
//! resident (its turn start or end, or its idle tick), which resident gives
//! memory back and how. Re-exported from `law::residents`; the per-model
//! brake (`law::brake`) stays what decides a shrink, a growth or an unload
//! for one model, with its episodes and carries, unchanged.
//!
//! - **Evict an idle resident before anything shrinks.** At a sample where
//!   the pressure calls for action (`presses`: critical anywhere, a warning
//!   with paging evidence at a turn's end, the samples at which today's law
//!   decides a shrink), with two residents or more, the least recently used
//!   idle resident is evicted (its KV saved first, as an unload does). An
//!   eviction frees a whole footprint (weights, KV, compute), a shrink at
//!   most half a window's KV; and it costs no conversation anything now (the
//!   evicted model reloads with its KV at its next request) where a shrink
//!   cuts the window of a conversation in use. The resident sampled at its
//!   own turn start or end is the one in use: it is never evicted there (at
//!   its idle tick it may be). Evicting is not held back when the pressure
//!   is "not ours" (`brake::not_ours`): an idle resident frees memory
//!   whatever caused the pressure, and keeping it is worth less than the
//!   machine's health. An eviction is not the brake's unload: it carries
//!   no episode to the model's next spawn (its window did not hurt), and
//!   its window memory stays as it was.
//! - **Otherwise the sampled resident's own law**, `brake::llama_step` over
//!   its own state and window: with one resident this *is* today's brake
//!   (the emergency unload of the last one included); with several, a
//!   shrink happens only when no idle resident is left to evict, and a
//!   warning without paging evidence still evicts nobody.
//! - **Never a turn in flight.** A resident generating is never evicted, and
//!   a sample taken for it decides nothing (today the generation lock makes
//!   such a sample wait for the turn's end). Queued turns keep a resident
//!   from eviction too: they would reload it at once.
//! - **One action per sample**, as today. The sensor gives a level, not a
//!   byte count, so the law cannot know whether one eviction is enough: it
//!   takes the step that costs the user least and the next sample takes the
//!   next. Recency, not size, picks the idle resident, as in admission.

use super::Resident;
use crate::law::brake::{Action, BrakeState, Level, Point, Readings, llama_step};
use crate::law::caps;

/// One pressure sample, taken for one resident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// The resident it is taken for.
    pub model: &'a str,
    pub point: Point,
    pub readings: Readings,
}

/// What `brake_over` decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResidentsBrake {
    /// Nothing: the resident sampled is in a turn, or not resident.
    Nothing,
    /// Evict this idle resident (its KV saved first): it frees its whole footprint.
    Evict { model: String, frees_bytes: u64 },
    /// The sampled resident's own brake decided: carry out `action` and keep
    /// `state`, exactly as for a lone model. `frees_bytes` is what the action
    /// frees now: a shrink's KV (`(window − cap) × KV per token`, the
    /// compute buffer's share not counted), an unload's footprint, else 0.
    Own {
        model: String,
        action: Action,
        state: BrakeState,
        frees_bytes: u64,
    },
}

/// Whether a sample calls for memory back: critical anywhere, or a warning
/// with paging evidence (or an unreadable counter) at a turn's end, the
/// samples at which `llama_step` decides a shrink.
pub fn presses(point: Point, r: &Readings) -> bool {
    match r.level {
        Level::Critical => true,
        Level::Warning => point == Point::TurnEnd && r.paging.unwrap_or(true),
        Level::Calm => false,
    }
}

/// The decision over all residents for one sample (see the module docs).
pub fn brake_over(sample: &Sample, residents: &[Resident]) -> ResidentsBrake {
    let Some(me) = residents.iter().find(|r| r.model == sample.model) else {
        return ResidentsBrake::Nothing;
    };
    if me.in_flight {
        return ResidentsBrake::Nothing;
    }
    if residents.len() >= 2 && presses(sample.point, &sample.readings) {
        let in_use = |r: &Resident| sample.point != Point::Idle && r.model == me.model;
        let lru = residents
            .iter()
            .filter(|r| r.idle() && !in_use(r))
            .min_by_key(|r| r.last_used_ms);
        if let Some(r) = lru {
            return ResidentsBrake::Evict {
                model: r.model.clone(),
                frees_bytes: r.footprint_bytes,
            };
        }
    }
    let (action, state) = llama_step(sample.point, &sample.readings, &me.brake, &me.window);
    let frees_bytes = match action {
        Action::Shrink { cap } => {
            caps::pad(me.window.allocated).saturating_sub(caps::pad(cap)) as u64 * me.window.kv_per_token
        }
        Action::Unload => me.footprint_bytes,
        _ => 0,
    };
    ResidentsBrake::Own {
        model: me.model.clone(),
        action,
        state,
        frees_bytes,
    }
}

#[cfg(test)]
#[path = "brake_tests.rs"]
mod tests;
