//! The slots' protocol, row by row: each move's steps in order against the
//! outcomes handed back, and what the slot table holds after; then every
//! combination of failed writes, erases and confirmations, for the rule
//! that nothing leaves a slot silently.

use super::*;
use crate::law::compact::Weighed;

const LONG: u32 = 1_000;
const SHORT: u32 = 10;
/// The child's window in these rows.
const WINDOW: Option<u32> = Some(8192);

fn held(c: &str, tokens: u32, on_disk: bool) -> SlotHeld {
    SlotHeld {
        conversation: c.into(),
        tokens,
        answer_tokens: 7,
        unchecked_restore: None,
        on_disk,
    }
}

/// Three slots: 0 holds "a" (long), 1 holds "b" (long, saved ahead), 2
/// holds "s" (too short to save).
fn table() -> Slots {
    let mut t = Slots::new(3);
    t.get_mut(0).held = Some(held("a", LONG, false));
    t.get_mut(1).held = Some(held("b", LONG, true));
    t.get_mut(2).held = Some(held("s", SHORT, false));
    t
}

fn weighed(slot: usize) -> Weighed {
    Weighed {
        slot,
        keep_ms: 9.0,
        move_ms: 1.0,
    }
}

/// The steps a run of `m` asks, each answered by `answer`, in order.
fn run(mut m: Moves, t: &mut Slots, mut answer: impl FnMut(&Step) -> Outcome) -> Vec<Step> {
    let mut asked = Vec::new();
    while let Some(step) = m.next(t) {
        let o = answer(&step);
        asked.push(step);
        m.took(t, o);
    }
    asked
}

/// Every write kept, every erase done, every save ahead still there, a
/// restore of 40 tokens ending in 5 answer tokens.
fn all_well(s: &Step) -> Outcome {
    match s {
        Step::Confirm { .. } => Outcome::Confirmed(true),
        Step::Write { .. } => Outcome::Written(true),
        Step::Erase { .. } => Outcome::Erased(true),
        Step::Find { .. } => Outcome::Found(Some(Found {
            tokens: 40,
            answer_tokens: 5,
        })),
        Step::Restore { .. } => Outcome::Restored(Restore::Done { tokens: 40 }),
        Step::Drop { .. } => Outcome::Said,
        Step::Moved { .. } | Step::Unsaved { .. } => Outcome::Said,
    }
}

/// `all_well`, but writes fail.
fn writes_fail(s: &Step) -> Outcome {
    match s {
        Step::Write { .. } => Outcome::Written(false),
        s => all_well(s),
    }
}

/// A step's kind and slot, for the rows.
fn kind(s: &Step) -> String {
    match s {
        Step::Confirm { conversation, why } => format!("confirm {conversation} ({why:?})"),
        Step::Write { slot, why, .. } => format!("write {slot} ({why:?})"),
        Step::Erase { slot } => format!("erase {slot}"),
        Step::Find { conversation } => format!("find {conversation}"),
        Step::Restore { slot, conversation } => format!("restore {conversation} into {slot}"),
        Step::Drop { conversation, why } => format!("drop {conversation} ({why:?})"),
        Step::Moved { slot, .. } => format!("moved {slot}"),
        Step::Unsaved { slot, why, .. } => format!("unsaved {slot} ({why:?})"),
    }
}

fn held_at(t: &Slots, slot: usize) -> Option<&str> {
    t.get(slot).held.as_ref().map(|h| h.conversation.as_str())
}

/// Each move with all going well, and with writes failing: the steps in
/// order and what each slot holds after.
#[test]
fn each_move_asks_its_steps_in_order() {
    type Answer = fn(&Step) -> Outcome;
    /// What the row says, the move, how its steps go, the steps asked, and
    /// what each slot holds after.
    type Row<'a> = (&'a str, Move, Answer, Vec<&'a str>, [Option<&'a str>; 3]);
    let claim = |slot: usize, c: Option<&str>| Move::Claim {
        slot,
        conversation: c.map(str::to_string),
        tokens: 30,
    };
    let compact = |slot: usize, taken: bool| Move::Compact {
        weighed: weighed(slot),
        taken,
    };
    let rows: Vec<Row> = vec![
        (
            "an eviction saves, then erases",
            Move::Evict(0),
            all_well,
            vec!["write 0 (Room)", "erase 0"],
            [None, Some("b"), Some("s")],
        ),
        (
            "an eviction whose save fails says so and erases all the same",
            Move::Evict(0),
            writes_fail,
            vec!["write 0 (Room)", "unsaved 0 (Room)", "erase 0"],
            [None, Some("b"), Some("s")],
        ),
        (
            "an eviction of a conversation saved ahead confirms it, writes nothing",
            Move::Evict(1),
            all_well,
            vec!["confirm b (Room)", "erase 1"],
            [Some("a"), None, Some("s")],
        ),
        (
            "an eviction of one too short to save only erases",
            Move::Evict(2),
            writes_fail,
            vec!["erase 2"],
            [Some("a"), Some("b"), None],
        ),
        (
            "a compaction saves, erases, then says the move",
            compact(0, false),
            all_well,
            vec!["write 0 (Compaction)", "erase 0", "moved 0"],
            [None, Some("b"), Some("s")],
        ),
        (
            "a compaction whose save fails leaves the conversation in place",
            compact(0, false),
            writes_fail,
            vec!["write 0 (Compaction)"],
            [Some("a"), Some("b"), Some("s")],
        ),
        (
            "a compaction of the slot the turn takes erases nothing",
            compact(0, true),
            all_well,
            vec!["write 0 (Compaction)", "moved 0"],
            [None, Some("b"), Some("s")],
        ),
        (
            "a compaction of one too short to save moves nothing",
            compact(2, false),
            all_well,
            vec![],
            [Some("a"), Some("b"), Some("s")],
        ),
        (
            "a claim by the slot's own conversation asks nothing",
            claim(0, Some("a")),
            all_well,
            vec![],
            [Some("a"), Some("b"), Some("s")],
        ),
        (
            "a claim by another saves the owner, then restores the new one",
            claim(0, Some("n")),
            all_well,
            vec!["write 0 (Switch)", "find n", "restore n into 0"],
            [Some("n"), Some("b"), Some("s")],
        ),
        (
            "a claim whose save fails says so; the slot changes hands all the same",
            claim(0, Some("n")),
            writes_fail,
            vec!["write 0 (Switch)", "unsaved 0 (Switch)", "find n", "restore n into 0"],
            [Some("n"), Some("b"), Some("s")],
        ),
        (
            "a claim by a turn of no conversation saves the owner, restores nothing",
            claim(0, None),
            all_well,
            vec!["write 0 (Switch)"],
            [None, Some("b"), Some("s")],
        ),
        (
            "the saves before a stop write each conversation worth it",
            Move::Save { slot: 0, why: "idle reap" },
            all_well,
            vec!["write 0 (Stop(\"idle reap\"))"],
            [None, Some("b"), Some("s")],
        ),
        (
            "a save ahead writes and keeps the conversation in place",
            Move::Ahead(0),
            all_well,
            vec!["write 0 (Ahead)"],
            [Some("a"), Some("b"), Some("s")],
        ),
        (
            "a save ahead of one already on disk writes nothing",
            Move::Ahead(1),
            all_well,
            vec![],
            [Some("a"), Some("b"), Some("s")],
        ),
    ];
    for (what, m, answer, steps, after) in rows {
        let mut t = table();
        let asked = run(Moves::new(true, true, WINDOW).then(m), &mut t, answer);
        assert_eq!(asked.iter().map(kind).collect::<Vec<_>>(), steps, "{what}");
        assert_eq!([held_at(&t, 0), held_at(&t, 1), held_at(&t, 2)], after, "{what}");
    }
}

/// A save ahead the store no longer holds is written after all; one whose
/// write fails leaves the slot unmarked (the leaving writes it).
#[test]
fn a_save_ahead_is_confirmed_or_written() {
    let mut t = table();
    let asked = run(Moves::new(true, true, WINDOW).then(Move::Evict(1)), &mut t, |s| match s {
        Step::Confirm { .. } => Outcome::Confirmed(false),
        s => all_well(s),
    });
    assert_eq!(asked.iter().map(kind).collect::<Vec<_>>(), ["confirm b (Room)", "write 1 (Room)", "erase 1"]);
    let mut t = table();
    run(Moves::new(true, true, WINDOW).then(Move::Ahead(0)), &mut t, all_well);
    assert!(t.get(0).held.as_ref().is_some_and(|h| h.on_disk));
    let mut t = table();
    run(Moves::new(true, true, WINDOW).then(Move::Ahead(0)), &mut t, writes_fail);
    assert!(t.get(0).held.as_ref().is_some_and(|h| !h.on_disk));
    // A slot a turn runs on is not saved ahead: its cells are changing.
    let mut t = table();
    t.start(0, 1, 100, 50, None);
    assert!(run(Moves::new(true, true, WINDOW).then(Move::Ahead(0)), &mut t, all_well).is_empty());
}

/// A claim: the restored tokens and answer go to the new owner; the same
/// owner's save ahead turns stale; a turn of no conversation holds its
/// tokens anonymously.
#[test]
fn a_claim_holds_what_was_restored() {
    let mut t = table();
    let claim = |slot, c: Option<&str>| {
        Moves::new(true, true, WINDOW).then(Move::Claim {
            slot,
            conversation: c.map(str::to_string),
            tokens: 30,
        })
    };
    run(claim(0, Some("n")), &mut t, all_well);
    let h = t.get(0).held.clone().unwrap();
    assert_eq!((h.tokens, h.answer_tokens, h.unchecked_restore, h.on_disk), (30, 5, Some((40, 5)), false));
    run(claim(1, Some("b")), &mut t, all_well);
    let h = t.get(1).held.clone().unwrap();
    assert_eq!((h.tokens, h.answer_tokens, h.on_disk), (30, 7, false));
    run(claim(1, None), &mut t, all_well);
    assert_eq!((held_at(&t, 1), t.get(1).anonymous_tokens), (None, 30));
    run(claim(1, Some("m")), &mut t, |s| match s {
        Step::Find { .. } => Outcome::Found(None),
        s => all_well(s),
    });
    let h = t.get(1).held.clone().unwrap();
    assert_eq!((h.conversation.as_str(), h.answer_tokens, h.unchecked_restore, t.get(1).anonymous_tokens), ("m", 0, None, 0));
}

/// With saves off nothing is written or restored, and a stop leaves the
/// table as it was (the slots go with their child); a model whose saves do
/// not restore writes nothing either.
#[test]
fn without_saves_nothing_is_written_or_restored() {
    for (saves, reusable) in [(false, true), (true, false)] {
        let mut t = table();
        let m = Moves::new(saves, reusable, WINDOW)
            .then(Move::Claim {
                slot: 0,
                conversation: Some("n".into()),
                tokens: 30,
            })
            .then(Move::Evict(1))
            .then(Move::Ahead(2));
        let asked = run(m, &mut t, all_well);
        assert_eq!(asked.iter().map(kind).collect::<Vec<_>>(), ["erase 1"], "saves {saves}, reusable {reusable}");
        assert_eq!([held_at(&t, 0), held_at(&t, 1), held_at(&t, 2)], [Some("n"), None, Some("s")]);
        let mut t = table();
        assert!(run(Moves::new(saves, reusable, WINDOW).stop_all(3, "unload"), &mut t, all_well).is_empty());
    }
}

/// Every combination of failed confirmations, writes and erases, over a
/// batch of every move: a conversation that left the table was written
/// and kept, confirmed in the store, too short to save, or said unsaved;
/// and one the law moved for compaction stays unless it was kept.
#[test]
fn nothing_leaves_a_slot_silently() {
    for fails in 0u32..(1 << 6) {
        let mut t = table();
        let mut t3 = Slots::new(4);
        for i in 0..3 {
            t3.get_mut(i).held = t.get(i).held.clone();
        }
        t3.get_mut(3).held = Some(held("d", LONG, false));
        t = t3;
        let before: Vec<SlotHeld> = t.iter().filter_map(|s| s.held.clone()).collect();
        let m = Moves::new(true, true, WINDOW)
            .then(Move::Compact {
                weighed: weighed(0),
                taken: false,
            })
            .then(Move::Evict(1))
            .then(Move::Claim {
                slot: 3,
                conversation: Some("n".into()),
                tokens: 30,
            })
            .stop_all(4, "unload");
        let (mut n, mut kept, mut unsaved) = (0, Vec::new(), Vec::new());
        let asked = run(m, &mut t, |s| {
            n += 1;
            let fail = fails & (1 << (n % 6)) != 0;
            match s {
                Step::Confirm { conversation, .. } => {
                    if !fail {
                        kept.push(conversation.clone());
                    }
                    Outcome::Confirmed(!fail)
                }
                Step::Write { held, .. } => {
                    if !fail {
                        kept.push(held.conversation.clone());
                    }
                    Outcome::Written(!fail)
                }
                Step::Erase { .. } => Outcome::Erased(!fail),
                Step::Unsaved { held, .. } => {
                    unsaved.push(held.conversation.clone());
                    Outcome::Said
                }
                s => all_well(s),
            }
        });
        for h in &before {
            let c = &h.conversation;
            let still = t.iter().any(|s| s.held.as_ref().is_some_and(|x| &x.conversation == c));
            assert!(
                still || kept.contains(c) || unsaved.contains(c) || !kv_save::worth_saving(h.tokens),
                "failures {fails:06b}: {c} left silently; steps {:?}",
                asked.iter().map(kind).collect::<Vec<_>>()
            );
        }
        // The compaction's conversation left only through a kept save.
        let moved = asked.iter().any(|s| matches!(s, Step::Moved { .. }));
        assert!(!moved || kept.contains(&"a".to_string()), "failures {fails:06b}");
    }
}

/// A claim's restore: a save that no longer fits the window is dropped
/// and said, never restored; one the child refuses is dropped after; an
/// unanswered one stays in the store (no drop); none found restores
/// nothing. The slot goes to its new owner every time.
#[test]
fn a_restore_fits_the_window_or_is_dropped() {
    type Answer = fn(&Step) -> Outcome;
    let big: Answer = |s| match s {
        Step::Find { .. } => Outcome::Found(Some(Found {
            tokens: 9000,
            answer_tokens: 5,
        })),
        s => all_well(s),
    };
    let refused: Answer = |s| match s {
        Step::Restore { .. } => Outcome::Restored(Restore::Refused),
        s => all_well(s),
    };
    let unanswered: Answer = |s| match s {
        Step::Restore { .. } => Outcome::Restored(Restore::Unanswered),
        s => all_well(s),
    };
    /// What the row says, how its steps go, the steps asked, and what the
    /// slot's new owner holds restored.
    type Row<'a> = (&'a str, Answer, Vec<&'a str>, Option<(u32, u32)>);
    let rows: [Row; 4] = [
        (
            "too big",
            big,
            vec!["find n", "drop n (DoesNotFit { tokens: 9000, window: Some(8192) })"],
            None,
        ),
        ("refused", refused, vec!["find n", "restore n into 2", "drop n (Refused)"], None),
        ("unanswered", unanswered, vec!["find n", "restore n into 2"], None),
        ("restored", all_well, vec!["find n", "restore n into 2"], Some((40, 5))),
    ];
    for (what, answer, steps, restored) in rows {
        let mut t = Slots::new(3);
        let m = Moves::new(true, true, WINDOW).then(Move::Claim {
            slot: 2,
            conversation: Some("n".into()),
            tokens: 30,
        });
        let asked = run(m, &mut t, answer);
        assert_eq!(asked.iter().map(kind).collect::<Vec<_>>(), steps, "{what}");
        let h = t.get(2).held.clone().unwrap();
        assert_eq!((h.conversation.as_str(), h.unchecked_restore), ("n", restored), "{what}");
    }
    // A child whose window is unknown restores nothing (a save fits no
    // unknown window).
    let mut t = Slots::new(1);
    let m = Moves::new(true, true, None).then(Move::Claim {
        slot: 0,
        conversation: Some("n".into()),
        tokens: 30,
    });
    assert_eq!(run(m, &mut t, all_well).iter().map(kind).collect::<Vec<_>>()[1], "drop n (DoesNotFit { tokens: 40, window: None })");
}
