use super::*;

/// SmolLM2's cells at the rates measured here: 0.5 µs of decode per held
/// cell per token, 26 µs to save a cell and 12 µs to restore it.
fn smol() -> Rates {
    Rates::prior(23_040)
}

fn idle(slot: usize, cells: u32, idle_ms: u64) -> Candidate {
    Candidate {
        slot,
        cells,
        idle_ms,
        busy: false,
        keeps: true,
    }
}

const LONE_256: Ahead = lone(256);

/// A turn alone on the child, expected to answer `tokens`.
const fn lone(tokens: u64) -> Ahead {
    Ahead {
        tokens,
        running: 0,
        placing: tokens + 50,
    }
}

/// Each row: the idle slots, what is ahead, the slot the turn takes, and
/// the slots moved to disk (costliest to keep first).
#[test]
fn the_pool_is_compacted_when_the_cells_cost_more_than_a_move() {
    let rows: Vec<(Vec<Candidate>, Ahead, usize, Vec<usize>)> = vec![
        // why: the case: three conversations of ~2,000 tokens held,
        // a lone stream of 256 tokens: keeping costs ~0.26 s each, a move
        // ~0.08 s; all three go, the biggest first
        (
            vec![idle(0, 2000, 1_000), idle(1, 2500, 1_000), idle(2, 1800, 1_000)],
            LONE_256,
            3,
            vec![1, 0, 2],
        ),
        // why: a short answer (a title) costs the cells little: all stay
        (
            vec![idle(0, 2000, 1_000), idle(1, 2000, 1_000)],
            lone(16),
            3,
            vec![],
        ),
        // why: the turn's own slot is never moved
        (vec![idle(0, 4000, 1_000)], LONE_256, 0, vec![]),
        // why: a long answer moves even a small conversation
        (vec![idle(0, 300, 1_000)], lone(2048), 1, vec![0]),
        // why: beside three running turns (they hold the top of the pool,
        // a save pauses all four) a conversation that just ended, its
        // return likely, stays
        (
            vec![idle(0, 2000, 50)],
            Ahead {
                tokens: 400,
                running: 3,
                placing: 450,
            },
            1,
            vec![],
        ),
        // why: the same with the turn alone goes
        (vec![idle(0, 2000, 50)], lone(400), 1, vec![0]),
        // why: beside a running turn, a long answer ahead: an old, large
        // conversation leaves a hole its cells fill instead of the top
        // growing
        (
            vec![idle(0, 6000, 600_000)],
            Ahead {
                tokens: 2000,
                running: 1,
                placing: 2100,
            },
            1,
            vec![0],
        ),
        // why: nothing ahead to decode, nothing to gain
        (vec![idle(0, 6000, 1_000)], lone(0), 1, vec![]),
    ];
    for (i, (cands, ahead, taking, want)) in rows.into_iter().enumerate() {
        let got: Vec<usize> = plan(smol(), ahead, &cands, taking).iter().map(|w| w.slot).collect();
        assert_eq!(got, want, "row {i}");
    }
}

/// A conversation with a turn in flight is never moved, nor one the store
/// would not keep (too short to save, or a model whose saves do not
/// restore), nor an empty slot: whatever the cost of keeping them.
#[test]
fn busy_unkept_and_empty_slots_are_never_moved() {
    let huge = lone(100_000);
    let rows = [
        Candidate { busy: true, ..idle(0, 8000, 1_000_000) },
        Candidate { keeps: false, ..idle(0, 8000, 1_000_000) },
        idle(0, 0, 1_000_000),
    ];
    for (i, c) in rows.into_iter().enumerate() {
        assert_eq!(weigh(smol(), huge, c), None, "row {i}");
        assert!(plan(smol(), huge, &[c], 3).is_empty(), "row {i}");
    }
}

/// The longer a conversation has been idle, the less its likely return
/// weighs: at the margin, one just used stays and one idle for ten
/// minutes goes.
#[test]
fn a_recent_conversation_weighs_its_return() {
    // why: keeping 2,000 cells for 70 tokens costs ~70 ms; a move ~55 ms
    // now and ~25 ms more at a likely return
    let ahead = lone(70);
    let recent = weigh(smol(), ahead, idle(0, 2000, 0)).unwrap();
    let old = weigh(smol(), ahead, idle(0, 2000, 600_000)).unwrap();
    assert!(!recent.moves(), "{recent:?}");
    assert!(old.moves(), "{old:?}");
    for (idle_ms, want) in [(0, 1.0), (120_000, 0.5), (240_000, 0.25)] {
        assert!((p_return(idle_ms) - want).abs() < 1e-9, "{idle_ms}");
    }
}

/// A turn is expected to answer what this model's answers run, within its
/// bound.
#[test]
fn the_expected_answer_is_the_typical_one_within_the_bound() {
    for (bound, typical, want) in [(2048, 300, 300), (64, 300, 64), (0, 300, 0), (256, 256, 256)] {
        assert_eq!(expected_answer(bound, typical), want, "{bound} {typical}");
    }
}

/// The costs are in the units the docs say: a cell's decode time times the
/// cells it shortens, the tokens ahead and the streams; two slot actions
/// and the bytes to save per stream, plus the likely restore.
#[test]
fn the_costs_are_the_formulas() {
    let r = Rates {
        cell_decode_ns: 1000.0,
        save_ns_per_cell: 10_000.0,
        restore_ns_per_cell: 20_000.0,
    };
    let ahead = Ahead {
        tokens: 100,
        running: 1,
        placing: 600,
    };
    let w = weigh(r, ahead, idle(0, 1000, 0)).unwrap();
    // why: two streams × 100 tokens × 300 cells (half of the 600 placed) × 1 µs
    assert!((w.keep_ms - 60.0).abs() < 1e-9, "{w:?}");
    let save = 2.0 * SLOT_ACTION_MS + 10.0;
    let restore = SLOT_ACTION_MS + 20.0;
    assert!((w.move_ms - (2.0 * save + restore)).abs() < 1e-9, "{w:?}");
}
