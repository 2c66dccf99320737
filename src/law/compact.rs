//! Keeping the shared KV pool compact: which idle conversations'
//! cells go to the KV store and leave the pool before a turn decodes
//! beside them.
//!
//! ## Why idle cells cost the running turns (llama.cpp b10883)
//!
//! One unified pool holds every slot's cells (`--kv-unified`). Each decoded
//! token attends the cells `[0, n_kv)`, where `n_kv` is the highest used
//! cell plus one, padded to 256 (`llama_kv_cache::get_n_kv`); another
//! sequence's cells in that range are masked, not skipped, so every cell an
//! idle conversation keeps below the top costs each decoded token of every
//! running turn. Measured here (SmolLM2, 4 slots): a lone stream after three
//! held conversations of ~2,000 tokens decoded at 0.75x the speed of one
//! slot; with those cells erased first, at one slot's speed.
//!
//! New cells go to free cells found from a head (`find_slot`, one cell at a
//! time, wrapping); erasing a sequence (`seq_rm`, the slot action `erase`)
//! moves the head down to the lowest cell it freed. So the warden erases
//! *before* the admitted turn's prompt reaches the child: its cells then
//! land at the bottom of the pool, below anything left, and the attended
//! range is its own. An erase after the prompt was placed would free cells
//! below it and shorten nothing.
//!
//! ## The decision
//!
//! The warden cannot see where the child put each cell (`GET /slots` does
//! not say), so the law reasons from the allocator's order (`shortens`):
//! - with no other turn running, a pool compacted before every new prompt
//!   stays packed from the bottom, and erasing an idle conversation shortens
//!   the admitted turn's range by all its cells;
//! - beside running turns, the top of the pool is theirs (their cells grow
//!   at the head), so erasing cells below it shortens nothing at once; what
//!   it buys is a hole the new cells fill instead of growing the top: at
//!   most the cells the turns ahead will place, half of that on average
//!   over their answers.
//!
//! Per idle conversation, in milliseconds of waiting summed over the
//! streams on the child:
//!
//! - **keep**: the cells it keeps in the range × the decode time one
//!   attended cell adds to a token (`Rates::cell_decode_ns`, measured on this
//!   child) × the tokens the turns are expected to decode while it stays
//!   idle × the streams that wait for each batch;
//! - **move to disk**: a save now (each stream on the child pauses while the
//!   child writes it, the admitted turn's first token too) plus, weighed by
//!   how likely it is to come back (`p_return`, from how recently it was
//!   used), a restore when it does; each from its cells and the store's
//!   measured write and read rates, plus a slot action's fixed cost.
//!
//! It goes to disk when keeping costs more. What the law may move is only
//! ever idle, never the slot the admitted turn takes, and only a
//! conversation the store keeps (`Candidate::keeps`: it is saved first,
//! and a save that fails leaves it in place), so nothing held is lost: a
//! return restores it and re-reads only its new message.

/// The fixed cost of one slot action (an HTTP round trip to the child and a
/// file opened), ms: measured 1-3 ms here for an erase, which moves no data.
pub const SLOT_ACTION_MS: f64 = 2.0;

/// How long an idle conversation's chance of coming back takes to halve, ms.
/// A chat's next message comes after its answer is read and the reply typed,
/// a minute or two; a conversation untouched for two minutes is as likely
/// left as coming back.
pub const RETURN_HALF_LIFE_MS: f64 = 120_000.0;

/// The answer length expected of a turn before the child has answered any
/// on this model (tokens): a chat answer of a small local model runs 100 to
/// 400 tokens. Replaced by the child's own counts as turns end.
pub const PRIOR_ANSWER_TOKENS: u32 = 256;

/// The decode time one attended cell adds to a token, before this child has
/// shown its own: the KV bytes of a cell over this rate (bytes per ns).
/// Measured here on SmolLM2 (23,040 B per cell, f16; a lone stream of 256
/// tokens after 0 to 6,100 held cells): 0.5 µs per held cell per decoded
/// token (9.5-10.4 ms per token with none held, 12.6-13.4 ms with 4,100 to
/// 6,100), the CPU kernel skipping a masked cell's data but not its mask
/// and its loop.
pub const PRIOR_ATTENDED_BYTES_PER_NS: f64 = 46.0;

/// The store's write rate before this child has saved anything (bytes per
/// ns, i.e. GB/s): measured here, 2,034 cells (46.9 MB) saved in 54 ms.
pub const PRIOR_SAVE_BYTES_PER_NS: f64 = 0.9;

/// The store's read rate before this child has restored anything: measured
/// here 3.9 GB/s (2,034 cells in 12 ms) from the page cache; a return after
/// the file left the cache reads the disk, so half of that is taken.
pub const PRIOR_RESTORE_BYTES_PER_NS: f64 = 2.0;

/// The rates the decision weighs, each per cell of the pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Decode time one attended cell adds to every decoded token, ns.
    pub cell_decode_ns: f64,
    /// Time to write one cell to the store, ns.
    pub save_ns_per_cell: f64,
    /// Time to read one cell back into a slot, ns.
    pub restore_ns_per_cell: f64,
}

impl Rates {
    /// The priors for a model whose cells are `kv_bytes_per_cell` bytes.
    pub fn prior(kv_bytes_per_cell: u64) -> Self {
        let b = kv_bytes_per_cell.max(1) as f64;
        Self {
            cell_decode_ns: b / PRIOR_ATTENDED_BYTES_PER_NS,
            save_ns_per_cell: b / PRIOR_SAVE_BYTES_PER_NS,
            restore_ns_per_cell: b / PRIOR_RESTORE_BYTES_PER_NS,
        }
    }
}

/// An idle slot the law may move to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The slot.
    pub slot: usize,
    /// The cells it holds, by the child's count.
    pub cells: u32,
    /// How long since its last turn ended, ms.
    pub idle_ms: u64,
    /// A turn runs on it (never moved: listed so the law says so itself).
    pub busy: bool,
    /// It holds a conversation the store keeps (`kv_save::worth_saving`, a
    /// model whose saves restore): saved first, restored on return.
    pub keeps: bool,
}

/// What the turns on the child will do while the idle conversations wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ahead {
    /// Tokens they are expected to decode, all together (the admitted
    /// turn's included).
    pub tokens: u64,
    /// Turns already running beside the admitted one: a slot action pauses
    /// each of them too, and they hold the top of the pool.
    pub running: u32,
    /// Cells the turns ahead will add to the pool: the admitted prompt's
    /// and each decoded token's.
    pub placing: u64,
}

impl Ahead {
    /// The streams on the child once the admitted turn starts.
    pub fn streams(&self) -> u32 {
        self.running.saturating_add(1)
    }

    /// By how many cells erasing `cells` idle ones shortens the range the
    /// turns ahead attend (see the module docs).
    pub fn shortens(&self, cells: u32) -> f64 {
        if self.running == 0 {
            f64::from(cells)
        } else {
            u64::from(cells).min(self.placing) as f64 / 2.0
        }
    }
}

/// One idle conversation weighed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weighed {
    /// The slot.
    pub slot: usize,
    /// What keeping its cells costs the turns ahead, ms.
    pub keep_ms: f64,
    /// What moving it to disk costs, now and at its likely return, ms.
    pub move_ms: f64,
}

impl Weighed {
    /// Whether it goes to disk.
    pub fn moves(&self) -> bool {
        self.keep_ms > self.move_ms
    }
}

/// The chance that a conversation idle `idle_ms` comes back (halving every
/// `RETURN_HALF_LIFE_MS`).
pub fn p_return(idle_ms: u64) -> f64 {
    0.5f64.powf(idle_ms as f64 / RETURN_HALF_LIFE_MS)
}

/// The answer a turn bounded at `bound` tokens is expected to give, when
/// this model's answers run `typical` tokens: the smaller.
pub fn expected_answer(bound: u32, typical: u32) -> u32 {
    bound.min(typical)
}

/// Weighs one candidate (`None`: the law never moves it: busy, or not a
/// conversation the store keeps).
pub fn weigh(rates: Rates, ahead: Ahead, c: Candidate) -> Option<Weighed> {
    if c.busy || !c.keeps || c.cells == 0 {
        return None;
    }
    let cells = f64::from(c.cells);
    let streams = f64::from(ahead.streams());
    let keep_ms = streams * ahead.tokens as f64 * ahead.shortens(c.cells) * rates.cell_decode_ns / 1e6;
    // The save and the erase are two slot actions.
    let save_ms = SLOT_ACTION_MS * 2.0 + cells * rates.save_ns_per_cell / 1e6;
    let restore_ms = SLOT_ACTION_MS + cells * rates.restore_ns_per_cell / 1e6;
    let move_ms = streams * save_ms + p_return(c.idle_ms) * restore_ms;
    Some(Weighed {
        slot: c.slot,
        keep_ms,
        move_ms,
    })
}

/// The idle conversations to save and erase before the admitted turn
/// starts, the costliest to keep first; `taking` is the admitted turn's
/// own slot (its cells are its prompt's prefix: never moved).
pub fn plan(rates: Rates, ahead: Ahead, candidates: &[Candidate], taking: usize) -> Vec<Weighed> {
    let mut out: Vec<Weighed> = candidates
        .iter()
        .filter(|c| c.slot != taking)
        .filter_map(|&c| weigh(rates, ahead, c))
        .filter(Weighed::moves)
        .collect();
    out.sort_by(|a, b| (b.keep_ms - b.move_ms).total_cmp(&(a.keep_ms - a.move_ms)));
    out
}

#[cfg(test)]
#[path = "compact_tests.rs"]
mod tests;
