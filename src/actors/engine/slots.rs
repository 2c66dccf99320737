//! The live child's slots as the warden keeps them: for each slot,
//! the conversation whose cells it holds and how many (`SlotHeld`), the
//! turn running on it and what that turn reserved of the one KV pool, and
//! when it was last used. `law::slots` decides from this table (which slot
//! a turn takes, whether it may start, which idle conversations go to
//! disk); the KV controller (`kv`) writes `held`; the turn's admission and
//! end write `busy`. One table per child: it goes with the child.

use tokio::time::Instant;

use crate::law::compact::{self, Ahead, Candidate, Weighed};
use crate::law::compact_meter::Reading;
use crate::law::kv_save;
use crate::law::slots::SlotView;
use crate::status::SlotStatus;

/// Who the live child's slot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotHeld {
    /// The conversation's key.
    pub conversation: String,
    /// The tokens it holds: the child's count at the last turn's end, else
    /// an estimate from the request's size.
    pub tokens: u32,
    /// Tokens the model generated in the conversation's last turn (the
    /// child's `predicted_n`): a client may send that answer back otherwise.
    pub answer_tokens: u32,
    /// A restore not yet judged: the tokens it put in the slot and the
    /// answer tokens they end with (`kv_check` judges it after the turn).
    pub unchecked_restore: Option<(u32, u32)>,
    /// The store holds the conversation as the slot holds it now (saved
    /// ahead while the child was idle, `ahead`): the save before its erase
    /// or its slot's change of hands writes nothing. A turn on the slot
    /// clears it.
    pub on_disk: bool,
}

/// A turn running on a slot.
#[derive(Debug, Clone)]
pub struct Busy {
    /// The turn's arrival number.
    pub seq: u64,
    /// Its prompt and answer bound, counted against the pool until it ends.
    pub reserved: u32,
    /// Its answer bound (what compaction expects it may still decode).
    pub bound: u32,
    /// No other turn ran on the child at any time beside it: its decode
    /// rate is then its own, a sample of what the attended cells cost.
    pub alone: bool,
    /// The cells the other slots held when it started (the idle ones it
    /// attended beside its own).
    pub beside: u32,
}

/// The prompt of the new conversation a save ahead weighs for: a first
/// question, a few dozen tokens.
const AHEAD_PROMPT_TOKENS: u32 = 64;

/// A turn about to start, as compaction weighs what is ahead of it.
#[derive(Debug, Clone, Copy)]
pub struct Admitted {
    /// The slot it takes.
    pub slot: usize,
    /// Its answer bound.
    pub bound: u32,
    /// Its prompt, estimated.
    pub prompt: u32,
}

/// One slot.
#[derive(Debug, Clone, Default)]
pub struct Slot {
    /// The conversation whose cells it holds (`None`: empty, or a turn of
    /// no conversation used it).
    pub held: Option<SlotHeld>,
    /// The turn running on it.
    pub busy: Option<Busy>,
    /// The tokens it holds with no conversation named (a raw completion's,
    /// or an estimate of them): still cells of the pool.
    pub anonymous_tokens: u32,
    /// When it was last taken, on the table's own clock.
    pub used: u64,
    /// When its last turn ended (how likely its conversation comes back).
    pub ended_at: Option<Instant>,
    /// The text its last request began with (its messages, or its prompt):
    /// how much a new request shares with its cells is read from it.
    pub text: Option<String>,
}

impl Slot {
    /// The tokens its cells hold now (idle), by the child's last count.
    pub fn tokens(&self) -> u32 {
        self.held.as_ref().map_or(self.anonymous_tokens, |h| h.tokens)
    }
}

/// Every slot of one child, and the clock that orders their use.
#[derive(Debug, Clone)]
pub struct Slots {
    slots: Vec<Slot>,
    clock: u64,
}

impl Slots {
    /// `n` empty slots (at least one).
    pub fn new(n: u32) -> Self {
        Self {
            slots: vec![Slot::default(); n.max(1) as usize],
            clock: 0,
        }
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Slot `i`.
    pub fn get(&self, i: usize) -> &Slot {
        &self.slots[i]
    }

    /// Slot `i`, to write.
    pub fn get_mut(&mut self, i: usize) -> &mut Slot {
        &mut self.slots[i]
    }

    /// The table as the law reads it for a request beginning with `text`:
    /// a busy slot counts what its turn reserved, an idle one what it
    /// holds, and what it shares with the request (estimated as a prompt
    /// is, `law::slots::estimate_tokens`).
    pub fn views(&self, text: Option<&str>) -> Vec<SlotView<'_>> {
        self.slots
            .iter()
            .map(|s| SlotView {
                holds: s.held.as_ref().map(|h| h.conversation.as_str()),
                tokens: s.busy.as_ref().map_or_else(|| s.tokens(), |b| b.reserved),
                busy: s.busy.is_some(),
                used: s.used,
                shared: match (text, s.text.as_deref()) {
                    (Some(a), Some(b)) => crate::law::slots::estimate_tokens(common_prefix(a, b)).min(s.tokens()),
                    _ => 0,
                },
            })
            .collect()
    }

    /// A turn of a request beginning with `text` starts on slot `i`,
    /// reserving `reserved` tokens for an answer bounded at `bound`.
    pub fn start(&mut self, i: usize, seq: u64, reserved: u32, bound: u32, text: Option<String>) {
        self.clock += 1;
        let alone = self.slots.iter().all(|s| s.busy.is_none());
        let beside = self
            .slots
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, s)| s.tokens())
            .fold(0u32, u32::saturating_add);
        for b in self.slots.iter_mut().filter_map(|s| s.busy.as_mut()) {
            b.alone = false;
        }
        let s = &mut self.slots[i];
        s.used = self.clock;
        s.busy = Some(Busy {
            seq,
            reserved,
            bound,
            alone,
            beside,
        });
        s.text = text;
    }

    /// The turn `seq` ended at `now`: its slot, freed, and what it was
    /// (`None`: it ran on no slot of this child).
    pub fn end(&mut self, seq: u64, now: Instant) -> Option<(usize, Busy)> {
        let i = self
            .slots
            .iter()
            .position(|s| s.busy.as_ref().is_some_and(|b| b.seq == seq))?;
        let s = &mut self.slots[i];
        s.ended_at = Some(now);
        s.busy.take().map(|b| (i, b))
    }

    /// Every slot, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter()
    }

    /// The pool's cells held by idle slots and reserved by running turns.
    pub fn cells(&self) -> (u32, u32) {
        self.slots.iter().fold((0u32, 0u32), |(idle, busy), s| match &s.busy {
            Some(b) => (idle, busy.saturating_add(b.reserved)),
            None => (idle.saturating_add(s.tokens()), busy),
        })
    }

    /// The idle conversations the pool's law (`law::compact`) moves to
    /// disk before `turn` starts, beside the slots `evicting` already
    /// clears for room, at `now`, by what this model's meter `reading`
    /// says its cells and answers cost. The caller asks only where saves
    /// are on and restore.
    pub fn compaction(&self, reading: Reading, turn: Admitted, evicting: &[usize], now: Instant) -> Vec<Weighed> {
        let typical = reading.typical_answer;
        let mut tokens = u64::from(compact::expected_answer(turn.bound, typical));
        let mut running = 0;
        let mut candidates = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(b) = &s.busy {
                // A running turn is, on average, halfway through its answer.
                tokens += u64::from(compact::expected_answer(b.bound, typical) / 2);
                running += 1;
                continue;
            }
            if i == turn.slot || evicting.contains(&i) {
                continue;
            }
            let cells = s.tokens();
            candidates.push(Candidate {
                slot: i,
                cells,
                idle_ms: s.ended_at.map_or(u64::MAX, |t| now.saturating_duration_since(t).as_millis() as u64),
                busy: false,
                keeps: s.held.is_some() && kv_save::worth_saving(cells),
            });
        }
        // The prompt's part the slot does not hold yet is placed too.
        let own = self.slots[turn.slot].tokens();
        let ahead = Ahead {
            tokens,
            running,
            placing: u64::from(turn.prompt.saturating_sub(own)) + tokens,
        };
        compact::plan(reading.rates, ahead, &candidates, turn.slot)
    }

    /// The idle conversations a save ahead writes while the child is idle
    /// (`ahead`): those the pool's law, weighing by `reading`, would move
    /// at `now` before a new conversation's turn (its answer as long as
    /// this model's typical one), and the conversation whose slot that turn
    /// would take (its change of hands saves it). Only what is not on disk
    /// already.
    pub fn ahead(&self, reading: Reading, now: Instant) -> Vec<usize> {
        let views = self.views(None);
        let Some(slot) = crate::law::slots::pick(&views, None, AHEAD_PROMPT_TOKENS) else {
            return Vec::new();
        };
        let turn = Admitted {
            slot,
            bound: reading.typical_answer,
            prompt: AHEAD_PROMPT_TOKENS,
        };
        let mut slots: Vec<usize> = self.compaction(reading, turn, &[], now).into_iter().map(|w| w.slot).collect();
        // The law never weighs the slot the turn takes: no duplicate.
        slots.push(slot);
        slots.retain(|&i| self.slots[i].held.as_ref().is_some_and(|h| !h.on_disk));
        slots
    }

    /// The status's view of each slot.
    pub fn status(&self) -> Vec<SlotStatus> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, s)| SlotStatus {
                id: i as u32,
                busy: s.busy.is_some(),
                turn: s.busy.as_ref().map(|b| b.seq),
                conversation: s.held.as_ref().map(|h| h.conversation.clone()),
                tokens: s.tokens(),
                reserved_tokens: s.busy.as_ref().map(|b| b.reserved),
            })
            .collect()
    }
}

/// What `a` and `b` begin with in common (whole characters).
fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !a.is_char_boundary(n) {
        n -= 1;
    }
    &a[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A turn's start marks its slot busy and most recently used; its end
    /// frees exactly that slot.
    #[test]
    fn start_and_end_follow_the_turn() {
        let mut t = Slots::new(3);
        t.start(2, 7, 300, 200, None);
        t.start(0, 8, 100, 50, None);
        assert_eq!(t.views(None).iter().filter(|v| v.busy).count(), 2);
        let v = t.views(None);
        assert_eq!((v[2].busy, v[2].tokens, v[0].used > v[2].used), (true, 300, true));
        assert_eq!(t.cells(), (0, 400));
        let now = Instant::now();
        assert_eq!(t.end(7, now).map(|(i, b)| (i, b.bound)), Some((2, 200)));
        assert_eq!(t.get(2).ended_at, Some(now));
        assert_eq!(t.end(7, now).map(|(i, _)| i), None);
        assert_eq!(t.views(None).iter().filter(|v| v.busy).count(), 1);
        assert!(!t.views(None)[2].busy);
    }

    /// An idle slot counts the cells it holds, by its conversation's count
    /// or, without one, its anonymous tokens.
    #[test]
    fn an_idle_slot_counts_what_it_holds() {
        let mut t = Slots::new(2);
        t.get_mut(0).held = Some(SlotHeld {
            conversation: "c".into(),
            tokens: 900,
            answer_tokens: 0,
            unchecked_restore: None,
            on_disk: false,
        });
        t.get_mut(1).anonymous_tokens = 40;
        let v = t.views(None);
        assert_eq!((v[0].tokens, v[0].holds, v[1].tokens, v[1].holds), (900, Some("c"), 40, None));
        assert_eq!(Slots::new(0).len(), 1);
    }

    /// A turn is alone while no other ran beside it at any moment; it
    /// counts the cells the other slots held when it started.
    #[test]
    fn a_turn_is_alone_until_another_runs_beside_it() {
        let mut t = Slots::new(3);
        t.get_mut(1).anonymous_tokens = 700;
        t.start(0, 1, 100, 64, None);
        assert_eq!(t.cells(), (700, 100));
        t.start(2, 2, 100, 64, None);
        let now = Instant::now();
        let (_, first) = t.end(1, now).unwrap();
        let (_, second) = t.end(2, now).unwrap();
        assert_eq!((first.alone, first.beside), (false, 700));
        // why: the first still ran when the second started
        assert_eq!((second.alone, second.beside), (false, 700));
        t.start(0, 3, 100, 64, None);
        let (_, third) = t.end(3, now).unwrap();
        assert_eq!((third.alone, third.beside), (true, 700));
    }

    /// What a slot shares with a request is their common beginning, over
    /// 4, never more than the slot holds.
    #[test]
    fn a_slot_shares_the_beginning_it_has_in_common_with_a_request() {
        let mut t = Slots::new(2);
        t.get_mut(0).text = Some("You are terse. Hello there".into());
        t.get_mut(0).anonymous_tokens = 100;
        t.get_mut(1).text = Some("You are terse.".into());
        t.get_mut(1).anonymous_tokens = 2;
        let v = t.views(Some("You are terse. Goodbye"));
        assert_eq!((v[0].shared, v[1].shared), (15 / 4, 2));
        assert_eq!(t.views(None)[0].shared, 0);
    }
}
