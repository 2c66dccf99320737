//! Carrying out `law::compact`: before a generating turn's prompt
//! reaches the child, the idle conversations whose cells would cost the
//! turns ahead more than a move to disk are saved and erased, so the
//! admitted turn's cells land at the bottom of the pool and its every token
//! attends only what is in use. What the law weighs is measured here, per
//! model (`PoolMeter`, over `law::compact_meter`): each slot action's own
//! timing, each turn's answer, and the decode rate of turns that ran alone
//! against the cells they attended. Part of the KV controller (`Kv`); the
//! core calls it inside the atomic handlers (`turn`, `turn_end`).
//!
//! Nothing held is lost: a conversation is erased only after its save was
//! kept by the store; a save that fails leaves it in its slot, counted
//! (the order is the slots' protocol, `moves::Move::Compact`).

use tokio::time::Instant;

use super::child_holder::LiveChild;
use super::kv::{Kv, PoolMeter};
use super::counts::ChildCounts;
use super::slots::{Busy, SlotHeld};
use crate::law::compact::Weighed;
use crate::law::compact_meter::Meter;
use crate::status::{PoolStatus, WardenEvent};


impl Kv {
    /// `child`'s model's meter (a new one at the priors for its KV shape).
    pub(super) fn meter(&mut self, child: &LiveChild) -> &mut Meter {
        &mut self.pool(child).meter
    }

    pub(super) fn pool(&mut self, child: &LiveChild) -> &mut PoolMeter {
        let kv_per_cell = child.plan.shape.map_or(0, |s| s.kv_per_token);
        self.pools
            .entry(child.model_id().to_string())
            .or_insert_with(|| PoolMeter {
                meter: Meter::new(kv_per_cell),
                moved: 0,
                moved_cells: 0,
                unsaved: 0,
                dropped: 0,
            })
    }

    /// What `child`'s model's meter reads now (its priors for the model's
    /// KV shape until it has measured anything).
    fn reading(&self, child: &LiveChild) -> crate::law::compact_meter::Reading {
        match self.pools.get(child.model_id()) {
            Some(p) => p.meter.reading(),
            None => Meter::new(child.plan.shape.map_or(0, |s| s.kv_per_token)).reading(),
        }
    }

    /// What the pool's law weighs `child`'s idle conversations by (its
    /// model's meter), or `None` when none is moved: saves are off, or the
    /// model's saves do not restore.
    pub(crate) fn moving(&self, child: &LiveChild) -> Option<crate::law::compact_meter::Reading> {
        (self.is_on() && super::kv::kept(child)).then(|| self.reading(child))
    }

    /// The idle conversations a save ahead writes while `child` is idle:
    /// those the law would move before a new conversation's turn now (its
    /// answer as long as this model's typical one), and the conversation
    /// whose slot that turn would take (its change of hands saves it). Only
    /// what is not on disk already.
    pub(crate) fn ahead(&self, child: &LiveChild, now: Instant) -> Vec<usize> {
        self.moving(child).map_or_else(Vec::new, |r| child.slots.ahead(r, now))
    }

    /// The pool's law moved `held` out of `child`'s slot `slot` (`moves`:
    /// saved, then erased, or taken by the admitted turn): said, counted,
    /// and the event that shows it.
    pub(super) fn moved(&mut self, child: &LiveChild, slot: usize, held: SlotHeld, w: Weighed) -> WardenEvent {
        tracing::info!(
            slot,
            conversation = %held.conversation,
            cells = held.tokens,
            keep_ms = w.keep_ms.round(),
            move_ms = w.move_ms.round(),
            "kv: moved an idle conversation's {} cells to disk: keeping them would cost the turns ahead ~{:.0} ms, the move ~{:.0} ms",
            held.tokens,
            w.keep_ms,
            w.move_ms
        );
        let pool = self.pool(child);
        pool.moved += 1;
        pool.moved_cells += u64::from(held.tokens);
        WardenEvent::PoolCompacted {
            model: child.model_id().to_string(),
            slot: slot as u32,
            conversation: held.conversation,
            cells: held.tokens,
            keep_ms: w.keep_ms.round() as u64,
            move_ms: w.move_ms.round() as u64,
        }
    }

    /// A generating turn ended on `child`: its answer's length, and, when it
    /// ran alone, its decode rate against the cells it attended.
    pub(crate) fn turn_counted(&mut self, child: &LiveChild, busy: &Busy, counts: Option<ChildCounts>) {
        let Some(c) = counts else { return };
        let meter = self.meter(child);
        meter.answered(c.predicted_n);
        if let (true, Some(ms)) = (busy.alone, c.predicted_ms) {
            // Its own context: its prompt and, on average, half its answer.
            let own = c
                .cache_n
                .saturating_add(c.prompt_n)
                .saturating_add(c.predicted_n / 2);
            meter.lone_turn(busy.beside, own, c.predicted_n, ms);
        }
    }

    /// The status's view of `child`'s pool.
    pub(crate) fn pool_view(&self, child: &LiveChild) -> PoolStatus {
        let (idle_cells, busy_cells) = child.slots.cells();
        let pool = self.pools.get(child.model_id());
        let reading = self.reading(child);
        PoolStatus {
            window: child.allocated,
            idle_cells,
            busy_cells,
            compacting: self.is_on() && super::kv::kept(child),
            moved: pool.map_or(0, |p| p.moved),
            moved_cells: pool.map_or(0, |p| p.moved_cells),
            unsaved: pool.map_or(0, |p| p.unsaved),
            dropped: pool.map_or(0, |p| p.dropped),
            cell_decode_ns: reading.rates.cell_decode_ns.round() as u64,
            decode_measured: reading.decode_measured,
            save_ns_per_cell: reading.rates.save_ns_per_cell.round() as u64,
            restore_ns_per_cell: reading.rates.restore_ns_per_cell.round() as u64,
            typical_answer_tokens: reading.typical_answer,
        }
    }
}
