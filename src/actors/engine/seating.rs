//! Where a generating turn sits, decided on the slot table alone: the slot
//! the law picks (`law::slots::pick`), its admission there
//! (`law::slots::admit`: its answer bound, what it reserves of the one
//! pool, the idle slots cleared for room), the idle conversations the
//! pool's law moves to disk first (`Slots::compaction`), and one exchange
//! of slots (below); then the moves that carry it out, in the slots'
//! protocol (`moves`). No I/O and no clock (the time is an argument): the
//! engine (`turn`) and the simulator (`warden::arbiter_sim`) call the same
//! function.
//!
//! The exchange: a conversation new to the pool, bound for an empty slot
//! while the law moves another's out that is on disk already (saved
//! ahead), takes that slot instead. The child then reuses the cells both
//! prompts begin with (the chat template's opening: 24 to 33 of SmolLM2's
//! 44 for a short question, measured here: 40-60 ms of its first token)
//! where an empty slot re-reads them. Only a saved one: a move whose save
//! failed must leave its conversation in place, and a slot that changes
//! hands cannot.

use tokio::time::Instant;

use super::moves::{Move, Moves};
use super::slots::{Admitted, Slots};
use crate::law::compact::Weighed;
use crate::law::compact_meter::Reading;
use crate::law::slots::{self, Admit, Pool};

/// A generating turn as its seat is chosen.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The conversation it keeps its slot for (`None`: a raw completion or
    /// an infill, which hold none).
    pub owner: Option<&'a str>,
    /// Its text (its messages, or its prompt): what a slot shares with it
    /// is read from it.
    pub text: Option<&'a str>,
    /// Its prompt, estimated tokens.
    pub prompt: u32,
    /// The answer bound it asked for.
    pub requested: Option<u32>,
}

/// A slot and the law's admission to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seat {
    pub slot: usize,
    /// What the slot already shares with the turn's text (tokens, estimated).
    pub shared: u32,
    pub bound: u32,
    pub reserve: u32,
    /// Idle slots cleared for room (`law::slots::admit`).
    pub evict: Vec<usize>,
    /// Idle conversations moved to disk to keep the pool compact
    /// (`law::compact`), the costliest to keep first.
    pub compact: Vec<Weighed>,
}

/// The seat of `ask` on `slots`, a pool of `window` cells, at `now`; the
/// pool's law weighs idle conversations by `moving` (`None`: none is
/// moved, saves are off or do not restore). `None`: it must wait.
pub fn seat(slots: &Slots, window: u32, ask: Ask, moving: Option<Reading>, now: Instant) -> Option<Seat> {
    let views = slots.views(ask.text);
    // Similarity is the shared text over the request's own text (its
    // messages), as llama-server weighs shared tokens over the prompt's.
    let own = ask.text.map_or(ask.prompt, slots::estimate_tokens);
    let slot = slots::pick(&views, ask.owner, own)?;
    let pool = Pool {
        window,
        slots: slots.len() as u32,
    };
    let plan = |slot: usize| match slots::admit(pool, &views, slot, ask.prompt, ask.requested) {
        Admit::Run { bound, reserve, evict } => {
            let turn = Admitted {
                slot,
                bound,
                prompt: ask.prompt,
            };
            let compact = moving.map_or_else(Vec::new, |r| slots.compaction(r, turn, &evict, now));
            Some(Seat {
                slot,
                shared: views[slot].shared,
                bound,
                reserve,
                evict,
                compact,
            })
        }
        Admit::Wait => None,
    };
    let seat = plan(slot)?;
    let fresh = views[slot].holds.is_none() && !views.iter().any(|v| v.holds.is_some() && v.holds == ask.owner);
    let saved = |i: usize| slots.get(i).held.as_ref().is_some_and(|h| h.on_disk);
    if fresh
        && let Some(first) = seat.compact.first().copied().filter(|w| saved(w.slot))
        && let Some(mut there) = plan(first.slot)
    {
        there.compact.retain(|w| w.slot != first.slot);
        there.compact.insert(0, first);
        return Some(there);
    }
    Some(seat)
}

impl Seat {
    /// The moves that carry the seat out, after `base`'s: the slots
    /// cleared for room, the pool's law's moves (the one of the slot the
    /// turn takes erases nothing), then the slot changing hands to `owner`,
    /// about `prompt` tokens until the child's count arrives.
    pub fn moves(&self, base: Moves, owner: Option<String>, prompt: u32) -> Moves {
        let evict = self.evict.iter().map(|&i| Move::Evict(i));
        let compact = self.compact.iter().map(|&weighed| Move::Compact {
            weighed,
            taken: weighed.slot == self.slot,
        });
        let claim = Move::Claim {
            slot: self.slot,
            conversation: owner,
            tokens: prompt,
        };
        evict.chain(compact).chain([claim]).fold(base, Moves::then)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::engine::slots::SlotHeld;
    use crate::law::compact_meter::Meter;

    fn held(c: &str, tokens: u32, on_disk: bool) -> Option<SlotHeld> {
        Some(SlotHeld {
            conversation: c.into(),
            tokens,
            answer_tokens: 0,
            unchecked_restore: None,
            on_disk,
        })
    }

    fn ask(owner: Option<&str>) -> Ask<'_> {
        Ask {
            owner,
            text: None,
            prompt: 40,
            requested: Some(64),
        }
    }

    /// A returning conversation sits in its own slot; a full pool makes a
    /// turn wait; an idle slot in the way of room is cleared.
    #[test]
    fn a_turn_sits_where_the_law_says() {
        let now = Instant::now();
        let mut t = Slots::new(4);
        t.get_mut(2).held = held("a", 500, false);
        let s = seat(&t, 4096, ask(Some("a")), None, now).unwrap();
        assert_eq!((s.slot, s.bound, s.evict.len(), s.compact.len()), (2, 64, 0, 0));
        // Every other slot busy with the whole window reserved: it waits.
        for i in [0, 1, 3] {
            t.start(i, i as u64, 1365, 64, None);
        }
        assert_eq!(seat(&t, 4096, ask(Some("b")), None, now), None);
        // Room only once the idle conversation is cleared.
        let mut t = Slots::new(2);
        t.get_mut(1).held = held("a", 4050, false);
        let s = seat(&t, 4096, ask(Some("b")), None, now).unwrap();
        assert_eq!((s.slot, s.evict.clone()), (0, vec![1]));
    }

    /// With the pool's law on, a large idle conversation goes to disk
    /// before a new turn; a new conversation then takes the slot of one
    /// saved ahead instead of an empty one, and its move erases nothing.
    #[test]
    fn a_new_conversation_takes_the_slot_of_one_saved_ahead() {
        let now = Instant::now();
        let reading = Some(Meter::new(23_000).reading());
        let mut t = Slots::new(3);
        t.get_mut(1).held = held("old", 2000, false);
        let s = seat(&t, 8192, ask(Some("new")), reading, now).unwrap();
        assert_eq!((s.slot, s.compact.iter().map(|w| w.slot).collect::<Vec<_>>()), (0, vec![1]));
        // Saved ahead: the new conversation takes slot 1 itself.
        t.get_mut(1).held = held("old", 2000, true);
        let s = seat(&t, 8192, ask(Some("new")), reading, now).unwrap();
        assert_eq!((s.slot, s.compact.iter().map(|w| w.slot).collect::<Vec<_>>()), (1, vec![1]));
        let mut moves = s.moves(Moves::new(true, true, Some(8192)), Some("new".into()), 40);
        let mut steps = Vec::new();
        while let Some(step) = moves.next(&mut t) {
            steps.push(format!("{step:?}").split_whitespace().next().unwrap_or_default().to_string());
            moves.took(&mut t, crate::actors::engine::moves::Outcome::Confirmed(true));
        }
        // Confirmed in the store, said moved, then "new" looked up (the
        // answer given is no save: nothing to restore).
        assert_eq!(steps, ["Confirm", "Moved", "Find"]);
        assert_eq!(t.get(1).held.as_ref().map(|h| h.conversation.as_str()), Some("new"));
        // A returning conversation never trades its own slot away.
        let s = seat(&t, 8192, ask(Some("new")), reading, now).unwrap();
        assert_eq!(s.slot, 1);
        // Without the pool's law nothing moves, and nothing is exchanged.
        t.get_mut(1).held = held("old", 2000, true);
        let s = seat(&t, 8192, ask(Some("other")), None, now).unwrap();
        assert_eq!((s.slot, s.compact.len()), (0, 0));
    }
}
