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
//!   takes the step that costs the user least for what it frees, and the
//!   next sample takes the next.
//! - **The cheapest idle resident to rebuild goes first** (`rebuild_cost`):
//!   its reload (its own last load), weighed by how likely it is asked for
//!   again (halving every `MODEL_RETURN_HALF_LIFE_MS` idle), per MiB its
//!   eviction frees. Recency still dominates (a model idle for ten minutes
//!   is a sixteenth as likely back as one idle for two and a half), but of
//!   two idle alike a large one that reloads fast goes before a small one
//!   that reloads slowly.
//!
//! ## The ladder, and why these rungs
//!
//! Cheapest to rebuild first, each rung one action per sample and undone
//! when the pressure is gone: (1) an idle resident evicted (rebuilt by a
//! load and a KV restore at its next request); (2) the busy model's window
//! shrunk (a respawn with its conversations saved and restored; it grows
//! back at the next calm safe point, `brake::llama_step`); (3) the busy
//! model unloaded (a load at its next message). Two rungs the issue named
//! are not on it because they free no memory in llama.cpp b10883: moving
//! idle conversations' cells to the KV store, and giving up slots. The
//! child allocates its whole KV pool at load and clears it, touching every
//! page (`llama_kv_cache`: `ggml_backend_buffer_clear`): measured here,
//! SmolLM2 with 4 slots holds 175 MB right after load at `-c 2048` and
//! 498 MB at `-c 16384`, nothing generated (+322 MB = 14,336 cells x
//! 23,040 B). Erasing cells or slots returns none of it; only a respawn at
//! a smaller window (rung 2) does. (Moving idle cells still speeds the
//! turns beside them: that is `law::compact`, not the brake.)

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
    /// Now, on the clock of the residents' `last_used_ms`.
    pub now_ms: u64,
}

/// How long an idle model's chance of being asked for again takes to
/// halve, ms: the default idle unload (`WARDEN_IDLE_TIMEOUT_S`, 300 s)
/// reaps a model idle that long anyway, so at that age it counts as half
/// likely back.
pub const MODEL_RETURN_HALF_LIFE_MS: f64 = 300_000.0;

/// What evicting `r` costs to rebuild per MiB it frees, ms: its reload,
/// weighed by how likely it is asked for again.
pub fn rebuild_cost(r: &Resident, now_ms: u64) -> f64 {
    let idle = now_ms.saturating_sub(r.last_used_ms) as f64;
    let p_back = 0.5f64.powf(idle / MODEL_RETURN_HALF_LIFE_MS);
    let mib = (r.footprint_bytes as f64 / (1u64 << 20) as f64).max(1.0);
    p_back * r.reload_ms.max(1) as f64 / mib
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
    let broken = crate::law::broken!(BrakeInFlight);
    if me.in_flight && !broken {
        return ResidentsBrake::Nothing;
    }
    if residents.len() >= 2 && presses(sample.point, &sample.readings) {
        let in_use = |r: &Resident| sample.point != Point::Idle && r.model == me.model;
        let cheapest = residents
            .iter()
            .filter(|r| (r.idle() || (broken && !r.pinned)) && !in_use(r))
            .min_by(|a, b| {
                rebuild_cost(a, sample.now_ms)
                    .total_cmp(&rebuild_cost(b, sample.now_ms))
                    .then(a.last_used_ms.cmp(&b.last_used_ms))
            });
        if let Some(r) = cheapest {
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
