use super::*;

fn idle(holds: Option<&str>, tokens: u32, used: u64) -> SlotView<'_> {
    SlotView {
        holds,
        tokens,
        busy: false,
        used,
        shared: 0,
    }
}

fn busy(tokens: u32) -> SlotView<'static> {
    SlotView {
        holds: Some("other"),
        tokens,
        busy: true,
        used: 0,
        shared: 0,
    }
}

const POOL4: Pool = Pool { window: 8192, slots: 4 };
const POOL1: Pool = Pool { window: 8192, slots: 1 };

#[test]
fn the_setting_parses_auto_and_counts_in_range() {
    for (raw, want) in [
        ("auto", Some(Parallel::Auto)),
        (" AUTO ", Some(Parallel::Auto)),
        ("1", Some(Parallel::Fixed(1))),
        ("4", Some(Parallel::Fixed(4))),
        ("64", Some(Parallel::Fixed(64))),
        ("0", None),
        ("65", None),
        ("-1", None),
        ("four", None),
        ("", None),
    ] {
        assert_eq!(parse(raw), want, "{raw:?}");
    }
}

/// Only a generating llama-server child runs several slots; `auto` is 4.
#[test]
fn the_count_is_the_settings_for_a_generating_child_only() {
    for (setting, child, want) in [
        (Parallel::Auto, Child::Generating, AUTO_SLOTS),
        (Parallel::Fixed(1), Child::Generating, 1),
        (Parallel::Fixed(8), Child::Generating, 8),
        (Parallel::Auto, Child::Encoder, 1),
        (Parallel::Fixed(8), Child::Encoder, 1),
        (Parallel::Auto, Child::Mlx, 1),
        (Parallel::Auto, Child::Recurrent, 1),
        (Parallel::Fixed(4), Child::Recurrent, 1),
        (Parallel::Fixed(8), Child::Mlx, 1),
    ] {
        assert_eq!(count(setting, child), want, "{setting:?} {child:?}");
    }
}

/// One slot costs nothing extra; each slot beyond it its measured MiB.
#[test]
fn extra_slots_cost_their_measured_bytes() {
    for (slots, want) in [(1, 0), (2, 1 << 20), (4, 3 << 20), (8, 7 << 20), (0, 0)] {
        assert_eq!(extra_bytes(slots), want, "{slots}");
    }
}

/// The conversation's own idle slot first, then an empty one, then the
/// least recently used idle one; none when all are busy.
#[test]
fn a_turn_takes_its_own_slot_then_an_empty_one_then_the_oldest() {
    let s = [idle(Some("a"), 500, 3), idle(Some("b"), 900, 1), idle(None, 0, 0), busy(100)];
    for (slots, conv, want) in [
        (&s[..], Some("a"), Some(0)),
        (&s[..], Some("b"), Some(1)),
        (&s[..], Some("c"), Some(2)),
        (&s[..], None, Some(2)),
        (&s[..2], Some("c"), Some(1)),
        (&s[..2], None, Some(1)),
        (&s[3..], Some("a"), None),
        (&[busy(1), busy(2)][..], None, None),
    ] {
        assert_eq!(pick(slots, conv, 100), want, "{conv:?} over {slots:?}");
    }
    // A conversation whose slot is busy (two turns of it at once) takes
    // another: the running one keeps its cells.
    let mut own_busy = s;
    own_busy[0].busy = true;
    assert_eq!(pick(&own_busy, Some("a"), 100), Some(2));
}

/// A new conversation takes the slot whose cells begin as it does (a
/// shared system prompt is not read again) when that is a tenth of it,
/// unless that costs a conversation worth saving for less than a save's
/// worth of reuse.
#[test]
fn a_new_conversation_takes_the_most_similar_slot_when_it_costs_no_save() {
    let with = |holds, tokens, used, shared| SlotView {
        holds,
        tokens,
        busy: false,
        used,
        shared,
    };
    for (slots, prompt, want, why) in [
        (vec![with(None, 0, 0, 0), with(Some("x"), 100, 1, 30)], 100, Some(1), "30% shared, nothing worth saving there"),
        (vec![with(None, 0, 0, 0), with(Some("x"), 100, 1, 5)], 100, Some(0), "5% shared: the empty slot"),
        (vec![with(None, 0, 0, 0), with(Some("x"), 900, 1, 30)], 100, Some(0), "a conversation worth saving for 30 tokens: no"),
        (vec![with(None, 0, 0, 0), with(Some("x"), 900, 1, 300)], 1000, Some(1), "300 shared tokens are worth its save"),
        (vec![with(None, 40, 0, 20), with(None, 50, 1, 25)], 100, Some(1), "the most shared"),
        (vec![with(Some("y"), 100, 3, 0), with(Some("x"), 100, 1, 0)], 100, Some(1), "nothing similar, nothing empty: the oldest"),
    ] {
        assert_eq!(pick(&slots, Some("new"), prompt), want, "{why}");
    }
}

/// At one slot the bound is today's: the request's, else the window.
#[test]
fn one_slot_keeps_todays_bound() {
    for (requested, want) in [(None, 8192), (Some(128), 128), (Some(100_000), 8192)] {
        let got = admit(POOL1, &[idle(None, 0, 0)], 0, 50, requested);
        let Admit::Run { bound, evict, .. } = got else {
            panic!("{requested:?}: {got:?}")
        };
        assert_eq!((bound, evict), (want, vec![]), "{requested:?}");
    }
}

/// Without `max_tokens` beside others, an answer is what the prompt
/// leaves of a slot's share; a long conversation is given the rest.
#[test]
fn the_unbounded_cap_is_the_share_left_or_the_window_left() {
    for (prompt, want) in [(50, 1998), (0, 2048), (1792, 256), (1793, 8192 - 1793), (6000, 2192), (9000, 0)] {
        assert_eq!(answer_cap(POOL4, prompt, None), want, "{prompt}");
    }
    assert_eq!(answer_cap(POOL4, 50, Some(100)), 100);
    assert_eq!(answer_cap(POOL4, 50, Some(9000)), 8192);
    assert_eq!(answer_cap(POOL1, 50, None), 8192);
}

/// Four short unbounded turns at 8192 tokens over 4 slots all start; a
/// turn whose whole cap does not fit beside running ones waits.
#[test]
fn short_turns_run_together_and_a_turn_that_would_overflow_waits() {
    let mut slots = vec![idle(None, 0, 0); 4];
    for i in 0..4 {
        let got = admit(POOL4, &slots, i, 50, None);
        let Admit::Run { bound, reserve, evict } = got else {
            panic!("turn {i}: {got:?}")
        };
        assert_eq!((bound, reserve, evict), (1998, 2048, vec![]), "turn {i}");
        slots[i] = busy(reserve);
    }
    // A long turn beside two running ones: 8192 - 2 * 2048 = 4096 free.
    let two = [busy(2048), busy(2048), idle(None, 0, 0), idle(None, 0, 0)];
    assert_eq!(admit(POOL4, &two, 2, 3000, Some(2000)), Admit::Wait);
    assert!(matches!(admit(POOL4, &two, 2, 2000, Some(2000)), Admit::Run { bound: 2000, reserve: 4000, .. }));
    // Alone it always starts, with its own bound.
    let none = [idle(None, 0, 0); 4];
    assert!(matches!(admit(POOL4, &none, 0, 3000, Some(6000)), Admit::Run { bound: 6000, .. }));
}

/// Idle conversations go to disk only when the turn would not fit beside
/// them, least recently used first, and no more than needed; never when
/// the turn must wait anyway.
#[test]
fn idle_conversations_are_evicted_least_recently_used_first_and_only_as_needed() {
    let slots = [
        idle(Some("a"), 3000, 5),
        idle(Some("b"), 3000, 2),
        idle(Some("c"), 1500, 9),
        idle(None, 0, 0),
    ];
    // 8192 - 7500 = 692 free: a 100-token prompt with 128 answer fits.
    assert_eq!(
        admit(POOL4, &slots, 3, 100, Some(128)),
        Admit::Run {
            bound: 128,
            reserve: 228,
            evict: vec![]
        }
    );
    // 1000 answer tokens: b (the oldest) goes, and only b.
    assert_eq!(
        admit(POOL4, &slots, 3, 100, Some(1000)),
        Admit::Run {
            bound: 1000,
            reserve: 1100,
            evict: vec![1]
        }
    );
    // Taking a's own slot: a's cells are the prompt's, not evicted.
    let Admit::Run { evict, .. } = admit(POOL4, &slots, 0, 3100, Some(2000)) else {
        panic!()
    };
    assert_eq!(evict, vec![1]);
    // Beside a busy turn holding 6000, nothing can make 3000 fit: wait,
    // and nobody is evicted for nothing.
    let crowded = [busy(6000), idle(Some("b"), 1000, 1), idle(None, 0, 0), idle(None, 0, 0)];
    assert_eq!(admit(POOL4, &crowded, 2, 100, Some(3000)), Admit::Wait);
}

/// Whatever the slots hold, an admitted turn beside running ones never
/// takes the pool past the window.
#[test]
fn an_admission_beside_running_turns_never_overflows_the_pool() {
    for held in [0u32, 500, 2000, 4000, 8000] {
        for prompt in [0u32, 10, 300, 2000, 5000] {
            for requested in [None, Some(1), Some(128), Some(4000)] {
                let slots = [busy(held), idle(Some("x"), 700, 1), idle(Some("y"), 1200, 2), idle(None, 0, 0)];
                if let Admit::Run { reserve, evict, .. } = admit(POOL4, &slots, 3, prompt, requested) {
                    let idle_left: u32 = [(1usize, 700u32), (2, 1200)]
                        .iter()
                        .filter(|(i, _)| !evict.contains(i))
                        .map(|(_, t)| t)
                        .sum();
                    assert!(
                        u64::from(held) + u64::from(idle_left) + u64::from(reserve) <= 8192,
                        "held {held} prompt {prompt} {requested:?}: reserve {reserve}, evict {evict:?}"
                    );
                }
            }
        }
    }
}

/// The estimate: ASCII bytes over 4, every other character one token, so
/// a script that is not Latin is not undercounted.
#[test]
fn the_prompt_estimate_counts_other_scripts_by_character() {
    for (text, want, why) in [
        ("", 0, "nothing"),
        ("abcdefgh", 2, "ASCII: bytes over 4"),
        ("\u{4f60}\u{597d}\u{4e16}\u{754c}", 4, "CJK: one a character (bytes over 4 would say 3)"),
        ("caf\u{e9}", 1, "an accented letter: one, beside 3 ASCII bytes (0)"),
        ("{\"content\":\"\u{3053}\u{3093}\"}", 5, "JSON keys over 4, kana one each"),
    ] {
        assert_eq!(estimate_tokens(text), want, "{why}");
    }
}
