//! Several models resident at once: whether a new model loads beside the
//! residents (`admit`), which idle residents make room for it, and which
//! resident answers a memory pressure sample (`brake_over`, in
//! `brake.rs`, re-exported here, like what an eviction or a
//! refusal names, in `held.rs`). The residency actor gathers one
//! `Resident` per loaded model, calls these, and sends each engine the
//! decision that concerns it. Tables in `tests.rs` and
//! `brake_tests.rs`.
//!
//! # Admission
//!
//! - **The window law, with the others subtracted.** On the CPU the newcomer
//!   is budgeted `0.75 × RAM − others − weights − 256 MiB`, `others` being
//!   what the residents that stay hold (weights, allocated KV and compute,
//!   measured). On CUDA the spec's ceiling becomes
//!   `min(0.9 × total − others, free) − 1 GiB`: the free memory read at the
//!   load already excludes what the residents hold on the card, while the
//!   0.9 share is one for all residents together. `shape_beside` and
//!   `vram_beside` turn these into the inputs `window::cpu` and
//!   `window::cuda` take, so the window itself is sized by the one law.
//! - **Evict until the floor fits, not the full window.** Idle residents
//!   are evicted, least recently used first, only while the newcomer's
//!   footprint at the 4096-token floor does not fit; then the window law
//!   gives it what is left. Evicting for the full window would trade a
//!   resident (a load and a KV restore at its next request, what users
//!   leave Ollama and llama-swap over) for context most conversations never
//!   reach; the brake grows a window later, a stopped resident stays
//!   stopped. Recency, not size, picks the order: the model used longest ago
//!   is the one least likely to be asked for next.
//! - **A turn is never stopped for another model.** When the floor fits only
//!   with memory held by residents in a turn (generating, or with turns
//!   queued, which would reload it at once), the load waits for a turn to
//!   end, evicting nobody yet: the turn's end may free the better choice.
//!   Once the load timeout has passed (`Newcomer::waited_out`) it is refused,
//!   `model_does_not_fit`, naming each resident and what it holds.
//! - **The one-model rule.** With nothing else resident (after evicting
//!   every idle resident, if need be) a model whose floor does not fit still
//!   loads at the floor: the catalog is never gated on memory, and that is
//!   what today's switch between models does.
//! - **The count cap** (`WARDEN_MAX_RESIDENT`, `max_resident`) evicts the
//!   least recently used idle residents beyond the count too. Default: none
//!   (`MAX_RESIDENT_DEFAULT`). Memory decides, and counts are what the
//!   trackers of llama.cpp's router, llama-swap and LocalAI report as wrong:
//!   a count evicts a 100 MB embedding model as readily as a 20 GB chat
//!   model. The cap is for people who want one, for example to bound how
//!   many children share few cores.
//!
//! Pure: footprints, recency and memory readings come in as arguments.



use super::brake::{BrakeState, WindowFacts};
use super::caps::WINDOW_FLOOR_TOKENS;
use super::window::{self, ModelShape, Vram};

mod brake;
pub use brake::{ResidentsBrake, Sample, brake_over, presses};
mod held;
pub use held::{DOES_NOT_FIT_CODE, Held, Shortfall};

/// No count cap unless `WARDEN_MAX_RESIDENT` sets one: memory decides (see
/// the module docs).
pub const MAX_RESIDENT_DEFAULT: Option<usize> = None;

pub use super::types::ModelKind;

/// A loaded model as the law sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resident {
    pub model: String,
    pub kind: ModelKind,
    /// What its child holds, bytes: weights, allocated KV and compute (the
    /// measured memory; `window::footprint_bytes` at its window without one).
    /// On CUDA, the device memory.
    pub footprint_bytes: u64,
    /// The end of its last turn (its load, before any), as milliseconds on
    /// the caller's monotonic clock (time comes into the law as a number):
    /// recency orders evictions, so only the order of these matters.
    pub last_used_ms: u64,
    /// A turn is generating (or the child is loading or respawning): it is
    /// never stopped, shrunk or evicted. A resident at its own turn start or
    /// end is not in flight.
    pub in_flight: bool,
    /// Turns waiting in its mailbox: it is not evicted, they would reload it.
    pub queued: u32,
    /// Pinned by its settings: never evicted (still counted).
    pub pinned: bool,
    /// What loading it again costs, ms (its last load; `law::schedule::load_cost_ms`):
    /// what an eviction costs to rebuild.
    pub reload_ms: u64,
    /// Its live window as its own brake sees it (`uncapped`, growth's
    /// bound, sized beside the other residents).
    pub window: WindowFacts,
    /// Its own brake's state (episodes, cap, carries stay per model).
    pub brake: BrakeState,
}

impl Resident {
    /// No turn in flight or queued, and not pinned: it may be evicted.
    pub fn idle(&self) -> bool {
        if crate::law::broken!(BusyIdle) {
            return !self.pinned;
        }
        !self.in_flight && self.queued == 0 && !self.pinned
    }

    fn held(&self) -> Held {
        Held {
            model: self.model.clone(),
            kind: self.kind,
            bytes: self.footprint_bytes,
            in_turn: !self.idle(),
        }
    }
}

/// A model asked for that is not resident.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Newcomer {
    pub model: String,
    pub kind: ModelKind,
    /// One weights copy (every GGUF part and the mmproj).
    pub weights_bytes: u64,
    /// Its footprint at the floor window (the 4096 floor, the trained
    /// window when smaller, or the pin), weights included.
    pub floor_bytes: u64,
    /// Its footprint at its full window (the trained one, or the pin);
    /// `None` when it has none (memory alone sizes it).
    pub full_bytes: Option<u64>,
    /// The load already waited its whole timeout for turns to end.
    pub waited_out: bool,
}

impl Newcomer {
    /// Its needs from the law's view of it, at `slope` compute bytes per
    /// token (`window::FA_COMPUTE_BYTES_PER_TOKEN` on the CPU,
    /// `window::cuda_slope` on CUDA); a pin is both its floor and its full window.
    pub fn new(model: &str, kind: ModelKind, shape: &ModelShape, slope: u64, pin: Option<u32>) -> Self {
        let at = |w: u32| w as u64 * (shape.kv_per_token + slope) + shape.weights_bytes;
        let floor = pin.unwrap_or(
            shape
                .trained
                .map_or(WINDOW_FLOOR_TOKENS, |t| t.min(WINDOW_FLOOR_TOKENS)),
        );
        Self {
            model: model.to_owned(),
            kind,
            weights_bytes: shape.weights_bytes,
            floor_bytes: at(floor),
            full_bytes: pin.or(shape.trained).map(at),
            waited_out: false,
        }
    }
}

/// The memory the engine sizes on (one engine runs all residents).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// CPU: the RAM total (`RamTotal::bytes`).
    Ram(u64),
    /// CUDA: the selected GPU, its free memory read now, with the residents in it.
    Gpu(Vram),
}

/// How the newcomer's window fits beside what stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Its full window fits.
    Full,
    /// Its floor fits, its full window does not: the window law sizes it between.
    Reduced,
    /// Nothing else is resident and its floor does not fit: it loads at the
    /// floor all the same (the spec's one-model rule).
    FloorAlone,
}

/// What `admit` decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Evict `evict` in order (each saves its KV first, as an unload does),
    /// then load beside the residents that stay, which hold `kept_bytes`;
    /// `budget_bytes` is the window law's budget beside them.
    Load {
        evict: Vec<Held>,
        kept_bytes: u64,
        budget_bytes: i64,
        fit: Fit,
    },
    /// Residents in a turn hold what it needs: ask again at a turn's end.
    Wait(Shortfall),
    /// The wait timed out: 503 `model_does_not_fit`, naming the residents.
    Refuse(Shortfall),
}

/// The window law's budget for `weights` beside residents that keep
/// `kept` bytes, `evicted` bytes having gone since `memory` was read.
fn budget(memory: Memory, weights: u64, kept: u64, evicted: u64) -> i64 {
    match memory {
        Memory::Ram(ram) => window::cpu_budget(ram, weights + kept),
        Memory::Gpu(vram) => window::cuda_budget(vram_beside(vram, kept + evicted), weights + kept),
    }
}

/// The shape `window::cpu` and `window::cuda` size a newcomer with: the
/// residents that stay (`kept_bytes`) counted as weights it must leave room for.
pub fn shape_beside(shape: &ModelShape, kept_bytes: u64) -> ModelShape {
    ModelShape {
        weights_bytes: shape.weights_bytes + kept_bytes,
        ..*shape
    }
}

/// The GPU reading `window::cuda` sizes a newcomer on: the free memory the
/// residents still in the card (`resident_bytes`) hold is given back, since
/// `shape_beside` counts them against it, so the budget is
/// `min(0.9 × total − kept, free) − 1 GiB − weights − 768 MiB`.
pub fn vram_beside(vram: Vram, resident_bytes: u64) -> Vram {
    Vram {
        free_bytes: vram.free_bytes + resident_bytes,
        ..vram
    }
}

/// Whether and how `new` loads beside `residents` (the newcomer is not
/// among them); `max_resident` is the count cap, at least 1.
pub fn admit(new: &Newcomer, residents: &[Resident], memory: Memory, max_resident: Option<usize>) -> Admission {
    let cap = max_resident.map(|n| n.max(1));
    let all: u64 = residents.iter().map(|r| r.footprint_bytes).sum();
    let mut idle: Vec<&Resident> = residents.iter().filter(|r| r.idle()).collect();
    idle.sort_by_key(|r| r.last_used_ms);
    let mut idle = idle.into_iter();
    let (mut evict, mut kept, mut count) = (Vec::new(), all, residents.len());
    let kv_floor = new.floor_bytes.saturating_sub(new.weights_bytes) as i64;
    loop {
        let budget_bytes = budget(memory, new.weights_bytes, kept, all - kept);
        let over_count = cap.is_some_and(|c| count >= c);
        let fits = budget_bytes >= kv_floor;
        if (fits || count == 0) && !over_count {
            let full = new.full_bytes.map(|b| b.saturating_sub(new.weights_bytes) as i64);
            let fit = match (fits, full) {
                (false, _) => Fit::FloorAlone,
                (true, Some(full)) if budget_bytes >= full => Fit::Full,
                (true, _) => Fit::Reduced,
            };
            return Admission::Load {
                evict,
                kept_bytes: kept,
                budget_bytes,
                fit,
            };
        }
        let Some(r) = idle.next() else {
            let short = Shortfall {
                model: new.model.clone(),
                needs_bytes: new.floor_bytes,
                room_bytes: budget_bytes + new.weights_bytes as i64,
                max_resident: cap.filter(|_| fits),
                residents: residents.iter().map(Resident::held).collect(),
            };
            return if new.waited_out {
                Admission::Refuse(short)
            } else {
                Admission::Wait(short)
            };
        };
        evict.push(r.held());
        kept -= r.footprint_bytes;
        count -= 1;
    }
}

/// `WARDEN_MAX_RESIDENT`: unset or empty is `MAX_RESIDENT_DEFAULT`, a
/// positive count caps; anything else is refused, with why.
pub fn max_resident(raw: Option<&str>) -> Result<Option<usize>, String> {
    match raw.map(str::trim) {
        None | Some("") => Ok(MAX_RESIDENT_DEFAULT),
        Some(s) => match s.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(format!(
                "WARDEN_MAX_RESIDENT={s:?}: expected a count of 1 or more, or unset"
            )),
        },
    }
}

#[cfg(test)]
mod tests;
