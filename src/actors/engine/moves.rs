//! The slots' protocol as one machine with no I/O: every way a
//! conversation's cells leave their slot, or a slot changes hands, in the
//! order the engine keeps. The engine names what must happen (`Move`: an
//! eviction for room, a move the pool's law chose, a slot taken by a turn,
//! the saves before a stop, a save ahead); the machine writes the slot
//! table (`Slots`) and asks, one `Step` at a time, for what only I/O can
//! do (a save written, a save ahead confirmed in the store, cells erased,
//! a save restored, a move or a loss said), and goes on from the `Outcome`
//! it is handed back. The KV controller (`kv::Kv::carry`) carries each
//! step out against the child and the store; the simulator
//! (`warden::arbiter_sim`) hands back the outcomes of its seeded world,
//! failed writes and erases included. Both therefore run this order, and
//! only this one.
//!
//! The rules it keeps, and why:
//! - A conversation leaves its slot only through a save the store kept
//!   (`kv_save::before_leaving`: written now, or saved ahead and still in
//!   the store), or as too short to be worth one (re-read at its return),
//!   or said as `Unsaved` and counted: nothing is lost silently.
//! - A move the pool's law chose (`Compact`) is given up when its save
//!   fails: the conversation stays in its slot, counted. An eviction for
//!   room (`Evict`) is not: the turn needs the cells, and a turn served
//!   beats a cache kept, so the loss is said instead. The same holds for a
//!   slot changing hands and for a stop: the cells go either way.
//! - A slot's erase that fails leaves a compaction's conversation where it
//!   was (its cells are still there); an eviction's is forgotten all the
//!   same (the child may still hold the cells, which the next turn's
//!   count corrects), and the executor says so.
//! - A turn's own conversation is restored into its slot only when saves
//!   are on and the child can use them (`kv_keep`), and only a save that
//!   fits the child's window (`kv_save::fits`); one that does not, or that
//!   the child refuses, is dropped from the store and said (`Dropped`):
//!   the conversation re-reads. A restore left unanswered keeps its save
//!   (the call said nothing about the file) for the next one.

use std::collections::VecDeque;

use super::slots::{SlotHeld, Slots};
use crate::law::compact::Weighed;
use crate::law::broken;
use crate::law::kv_save::{self, BeforeLeaving};

/// Why a conversation leaves its slot, as the log says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Room for another conversation's turn (`law::slots::admit`).
    Room,
    /// The pool kept compact (`law::compact`).
    Compaction,
    /// Its slot changes hands.
    Switch,
    /// Saved ahead while the child was idle.
    Ahead,
    /// The child is about to stop, for this reason.
    Stop(&'static str),
}

impl Why {
    /// The words the log uses ("before the ...").
    pub fn says(self) -> &'static str {
        match self {
            Self::Room => "room for another conversation",
            Self::Compaction => "compaction of the pool",
            Self::Switch => "switch to another conversation",
            Self::Ahead => "next conversation (saved ahead while idle)",
            Self::Stop(why) => why,
        }
    }
}

/// What the engine asks of the slots.
#[derive(Debug, Clone, PartialEq)]
pub enum Move {
    /// Slot `.0`'s conversation goes to disk and its cells are freed, so a
    /// turn beside it fits the pool.
    Evict(usize),
    /// An idle conversation the pool's law chose goes to disk; `taken`:
    /// the admitted turn takes its slot, so its cells are not erased (the
    /// child keeps what both prompts begin with and frees the rest itself).
    Compact { weighed: Weighed, taken: bool },
    /// Slot `slot` changes hands to `conversation` (`None`: a turn of no
    /// conversation, a raw completion) whose prompt is about `tokens`.
    Claim {
        slot: usize,
        conversation: Option<String>,
        tokens: u32,
    },
    /// Slot `slot`'s conversation is saved: its child is about to stop.
    Save { slot: usize, why: &'static str },
    /// Slot `.0`'s conversation is saved while the child is idle and stays
    /// in place, marked as on disk.
    Ahead(usize),
}

/// What the machine asks the I/O to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Whether the store still holds `conversation`'s save ahead (the cap
    /// may have aged it out, or a truncated file removed it).
    Confirm { conversation: String, why: Why },
    /// Write slot `slot`'s conversation to the store.
    Write { slot: usize, held: SlotHeld, why: Why },
    /// Free slot `slot`'s cells.
    Erase { slot: usize },
    /// Look `conversation`'s save up in the store.
    Find { conversation: String },
    /// Read `conversation`'s save into slot `slot`.
    Restore { slot: usize, conversation: String },
    /// Remove `conversation`'s save from the store, for `why` (to say and
    /// count: the conversation re-reads).
    Drop { conversation: String, why: Dropped },
    /// The pool's law moved `held` out of slot `slot` (to say and count).
    Moved { slot: usize, held: SlotHeld, weighed: Weighed },
    /// `held`'s cells left slot `slot` without its save written (the write
    /// failed and the cells had to go): to say and count. What its last
    /// save, if any, did not hold is re-read at its return.
    Unsaved { slot: usize, held: SlotHeld, why: Why },
}

/// What a step came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `Confirm`: the store holds it.
    Confirmed(bool),
    /// `Write`: the store kept it.
    Written(bool),
    /// `Erase`: the cells are free.
    Erased(bool),
    /// `Find`: what the store holds of it.
    Found(Option<Found>),
    /// `Restore`: how it went.
    Restored(Restore),
    /// `Moved`, `Unsaved`: said.
    Said,
}

/// A save as the store holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Its tokens.
    pub tokens: u32,
    /// The answer tokens it ends with.
    pub answer_tokens: u32,
}

/// How a restore went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    /// The child read this many tokens into the slot.
    Done { tokens: u32 },
    /// The child refused the file: it is of no use.
    Refused,
    /// No answer (transport, or the time limit): the file may still serve.
    Unanswered,
}

/// Why a save is removed from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Its `tokens` no longer fit the child's `window` (a brake shrank it).
    DoesNotFit { tokens: u32, window: Option<u32> },
    /// The child refused to restore it.
    Refused,
}

/// How a conversation's leaving went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Left {
    /// Its save is in the store.
    Kept,
    /// No save needed or possible: none held, saves off, too short, or a
    /// model whose saves the next child could not use.
    Nothing,
    /// Its write failed.
    Failed,
}

/// What the machine waits for, and what it goes on with.
#[derive(Debug)]
enum Wait {
    /// A save ahead confirmed, for `then`.
    Confirm { then: Move, slot: usize, held: SlotHeld },
    /// A write, for `then`.
    Write { then: Move, slot: usize, held: SlotHeld },
    /// An erase, for `then` (`held`: what a compaction put back if it fails).
    Erase { then: Move, slot: usize, held: Option<SlotHeld> },
    /// The store's answer for the conversation a turn claims a slot for.
    Find { slot: usize, conversation: String, tokens: u32 },
    /// A restore of `found` into the slot a turn claims.
    Restore {
        slot: usize,
        conversation: String,
        tokens: u32,
        found: Found,
    },
    /// A save ahead's write.
    WriteAhead { slot: usize },
    /// Nothing to go on with.
    Said,
}

/// The slots' protocol for one batch of moves on one child's slots.
#[derive(Debug)]
pub struct Moves {
    /// A store exists (saves are on).
    saves: bool,
    /// The child's saves can be used again (`kv::kept`).
    reusable: bool,
    /// The child's window (what a restored save must fit).
    window: Option<u32>,
    queue: VecDeque<Move>,
    /// Steps decided, not yet asked, each with what follows it.
    ready: VecDeque<(Step, Wait)>,
    /// The step asked and not yet answered.
    asked: Option<Wait>,
}

impl Moves {
    /// No moves yet, on a child whose store is on (`saves`), whose saves
    /// restore (`reusable`), and whose window is `window`.
    pub fn new(saves: bool, reusable: bool, window: Option<u32>) -> Self {
        Self {
            saves,
            reusable,
            window,
            queue: VecDeque::new(),
            ready: VecDeque::new(),
            asked: None,
        }
    }

    /// `m`, after those already named.
    pub fn then(mut self, m: Move) -> Self {
        self.queue.push_back(m);
        self
    }

    /// Every slot of `n` saved: the child is about to stop for `why`.
    pub fn stop_all(self, n: usize, why: &'static str) -> Self {
        (0..n).fold(self, |m, slot| m.then(Move::Save { slot, why }))
    }

    /// The next step to carry out (`None`: every move is done). Each one
    /// asked must be answered with `took` before the next.
    pub fn next(&mut self, slots: &mut Slots) -> Option<Step> {
        debug_assert!(self.asked.is_none(), "a step asked before the last was answered");
        loop {
            if let Some((step, wait)) = self.ready.pop_front() {
                self.asked = Some(wait);
                return Some(step);
            }
            let m = self.queue.pop_front()?;
            self.start(m, slots);
        }
    }

    /// What the step last asked came to.
    pub fn took(&mut self, slots: &mut Slots, outcome: Outcome) {
        let Some(wait) = self.asked.take() else {
            debug_assert!(false, "an outcome with no step asked");
            return;
        };
        // A mismatched outcome is a bug of the executor's; it counts as a
        // failure, which loses nothing.
        let yes = |o: Outcome| matches!(o, Outcome::Confirmed(true) | Outcome::Written(true) | Outcome::Erased(true));
        match wait {
            Wait::Confirm { then, slot, held } => {
                if yes(outcome) {
                    self.left(then, slot, Left::Kept, Some(held), slots);
                } else {
                    let why = why(&then);
                    self.write(then, slot, held, why);
                }
            }
            Wait::Write { then, slot, held } => {
                let left = if yes(outcome) { Left::Kept } else { Left::Failed };
                self.left(then, slot, left, Some(held), slots);
            }
            Wait::Erase { then, slot, held } => self.erased(then, slot, held, yes(outcome), slots),
            Wait::Find { slot, conversation, tokens } => {
                let found = match outcome {
                    Outcome::Found(f) => f,
                    _ => None,
                };
                match found {
                    None => hold(slots, slot, Some(conversation), tokens, None),
                    Some(f) if !kv_save::fits(f.tokens, self.window) && !broken!(RestoreUnfit) => {
                        let why = Dropped::DoesNotFit {
                            tokens: f.tokens,
                            window: self.window,
                        };
                        let step = Step::Drop {
                            conversation: conversation.clone(),
                            why,
                        };
                        self.ask(step, Wait::Said);
                        hold(slots, slot, Some(conversation), tokens, None);
                    }
                    Some(found) => {
                        let step = Step::Restore {
                            slot,
                            conversation: conversation.clone(),
                        };
                        let wait = Wait::Restore {
                            slot,
                            conversation,
                            tokens,
                            found,
                        };
                        self.ask(step, wait);
                    }
                }
            }
            Wait::Restore {
                slot,
                conversation,
                tokens,
                found,
            } => {
                let restored = match outcome {
                    Outcome::Restored(Restore::Done { tokens: n }) => Some((n, found.answer_tokens)),
                    Outcome::Restored(Restore::Refused) => {
                        let step = Step::Drop {
                            conversation: conversation.clone(),
                            why: Dropped::Refused,
                        };
                        self.ask(step, Wait::Said);
                        None
                    }
                    _ => None,
                };
                hold(slots, slot, Some(conversation), tokens, restored);
            }
            Wait::WriteAhead { slot } => {
                if yes(outcome)
                    && let Some(h) = slots.get_mut(slot).held.as_mut()
                {
                    h.on_disk = true;
                }
            }
            Wait::Said => {}
        }
    }

    fn ask(&mut self, step: Step, wait: Wait) {
        self.ready.push_back((step, wait));
    }

    /// Begins `m`: it either finishes on the table or asks a step.
    fn start(&mut self, m: Move, slots: &mut Slots) {
        match m {
            Move::Evict(slot) | Move::Save { slot, .. } => self.leave(m, slot, slots),
            Move::Compact { weighed, .. } => {
                let s = slots.get(weighed.slot);
                // Already gone, or a turn took it since the law weighed it.
                if s.held.is_some() && s.busy.is_none() {
                    self.leave(m, weighed.slot, slots);
                }
            }
            Move::Claim {
                slot,
                ref conversation,
                tokens,
            } => {
                if let Some(held) = slots
                    .get_mut(slot)
                    .held
                    .as_mut()
                    .filter(|h| Some(&h.conversation) == conversation.as_ref())
                {
                    held.tokens = tokens;
                    // Its turn is about to change it: a save ahead is stale.
                    held.on_disk = false;
                } else if slots.get(slot).held.is_some() {
                    if broken!(ClaimUnsaved) {
                        slots.get_mut(slot).held = None;
                        self.restore(m, slots);
                    } else {
                        self.leave(m, slot, slots);
                    }
                } else {
                    self.restore(m, slots);
                }
            }
            Move::Ahead(slot) => {
                let s = slots.get(slot);
                let Some(held) = s.held.clone() else { return };
                // The save its leaving would write, written now (one on
                // disk already writes nothing).
                if s.busy.is_none()
                    && self.saves
                    && kv_save::before_leaving(self.reusable, held.tokens, held.on_disk) == BeforeLeaving::Write
                {
                    self.ask(Step::Write { slot, held, why: Why::Ahead }, Wait::WriteAhead { slot });
                }
            }
        }
    }

    /// The conversation of `slot` leaves it for `m`: the slot forgets it,
    /// and its save is confirmed, written, or not needed.
    fn leave(&mut self, m: Move, slot: usize, slots: &mut Slots) {
        let why = why(&m);
        // Without a store nothing is written, and the slot keeps what it
        // holds until an erase or a new owner replaces it.
        let held = if self.saves { slots.get_mut(slot).held.take() } else { None };
        let Some(held) = held else {
            return self.left(m, slot, Left::Nothing, None, slots);
        };
        match kv_save::before_leaving(self.reusable, held.tokens, held.on_disk) {
            BeforeLeaving::Nothing => self.left(m, slot, Left::Nothing, Some(held), slots),
            BeforeLeaving::SavedAhead => self.ask(
                Step::Confirm {
                    conversation: held.conversation.clone(),
                    why,
                },
                Wait::Confirm { then: m, slot, held },
            ),
            BeforeLeaving::Write => self.write(m, slot, held, why),
        }
    }

    fn write(&mut self, then: Move, slot: usize, held: SlotHeld, why: Why) {
        let step = Step::Write {
            slot,
            held: held.clone(),
            why,
        };
        self.ask(step, Wait::Write { then, slot, held });
    }

    /// The conversation `held` of `slot` left for `m` as `left` says.
    fn left(&mut self, m: Move, slot: usize, left: Left, held: Option<SlotHeld>, slots: &mut Slots) {
        let unsaved = |held: &Option<SlotHeld>| {
            held.clone()
                .filter(|_| left == Left::Failed && !broken!(UnsavedSilent))
                .map(|held| (Step::Unsaved { slot, held, why: why(&m) }, Wait::Said))
        };
        match m {
            Move::Evict(_) => {
                if let Some((step, wait)) = unsaved(&held) {
                    self.ask(step, wait);
                }
                self.ask(Step::Erase { slot }, Wait::Erase { then: m, slot, held: None });
            }
            Move::Compact { weighed, taken } => {
                let Some(held) = held else { return };
                if left != Left::Kept && !broken!(CompactUnsaved) {
                    // Still in the pool: the slot keeps it, and its cells count.
                    slots.get_mut(slot).held = Some(held);
                    return;
                }
                if taken {
                    self.ask(Step::Moved { slot, held, weighed }, Wait::Said);
                } else {
                    let step = Step::Erase { slot };
                    self.ask(step, Wait::Erase { then: m, slot, held: Some(held) });
                }
            }
            Move::Claim { .. } => {
                if let Some((step, wait)) = unsaved(&held) {
                    self.ask(step, wait);
                }
                self.restore(m, slots);
            }
            Move::Save { .. } => {
                if let Some((step, wait)) = unsaved(&held) {
                    self.ask(step, wait);
                }
            }
            Move::Ahead(_) => {}
        }
    }

    /// `slot`'s erase for `m` came to `ok`.
    fn erased(&mut self, m: Move, slot: usize, held: Option<SlotHeld>, ok: bool, slots: &mut Slots) {
        let s = slots.get_mut(slot);
        if ok {
            s.held = None;
            s.anonymous_tokens = 0;
        }
        if let Move::Compact { weighed, .. } = m
            && let Some(held) = held
        {
            if ok {
                self.ask(Step::Moved { slot, held, weighed }, Wait::Said);
            } else {
                // Its cells are still in the slot (and its save on disk).
                s.held = Some(held);
            }
        }
    }

    /// A claim's slot, now free of its previous owner: the new owner's save
    /// restored into it when one can be, then held.
    fn restore(&mut self, m: Move, slots: &mut Slots) {
        let Move::Claim {
            slot,
            conversation,
            tokens,
        } = m
        else {
            return;
        };
        match conversation {
            Some(conversation) if self.saves && self.reusable => self.ask(
                Step::Find {
                    conversation: conversation.clone(),
                },
                Wait::Find { slot, conversation, tokens },
            ),
            conversation => hold(slots, slot, conversation, tokens, None),
        }
    }
}

/// Why `m` moves a conversation.
fn why(m: &Move) -> Why {
    match m {
        Move::Evict(_) => Why::Room,
        Move::Compact { .. } => Why::Compaction,
        Move::Claim { .. } => Why::Switch,
        Move::Save { why, .. } => Why::Stop(why),
        Move::Ahead(_) => Why::Ahead,
    }
}

/// Slot `slot` now holds `conversation` (or, with none, `tokens` of no
/// conversation), about its prompt until its answer is counted, with what
/// a restore put there.
fn hold(slots: &mut Slots, slot: usize, conversation: Option<String>, tokens: u32, restored: Option<(u32, u32)>) {
    let s = slots.get_mut(slot);
    s.anonymous_tokens = if conversation.is_none() { tokens } else { 0 };
    s.held = conversation.map(|conversation| SlotHeld {
        conversation,
        tokens,
        answer_tokens: restored.map_or(0, |(_, a)| a),
        unchecked_restore: restored,
        // Its turn is about to change it.
        on_disk: false,
    });
}

#[cfg(test)]
#[path = "moves_tests.rs"]
mod tests;
