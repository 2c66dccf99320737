//! Table tests of the brake over all residents (`brake_over`): an idle
//! resident is evicted before the one in use shrinks, the cheapest to
//! rebuild per MiB it frees first; a turn in flight is never touched; with one resident the decision
//! is today's `llama_step`, the unload of the last one included.

use super::super::tests::{Turn, resident, residents};
use super::*;
use crate::law::brake::{Action, BrakeState, Episode, after_respawn};
use crate::law::window::MIB;

use Level::{Calm, Critical, Warning};
use Point::{Idle, TurnEnd, TurnStart};
use Turn::{InFlight, Queued};

const IDLE: Turn = Turn::Idle;

fn readings(level: Level, paging: Option<bool>) -> Readings {
    Readings {
        level,
        paging,
        footprint_bytes: None,
    }
}

/// The decision in a word: `-`, `evict a`, `own shrink 4096`, `own -`, ...
fn said(d: &ResidentsBrake) -> String {
    match d {
        ResidentsBrake::Nothing => "-".into(),
        ResidentsBrake::Evict { model, .. } => format!("evict {model}"),
        ResidentsBrake::Own { action, .. } => match action {
            Action::None => "own -".into(),
            Action::Shrink { cap } => format!("own shrink {cap}"),
            Action::DeferShrink { cap } => format!("own defer {cap}"),
            Action::Grow { cap } => format!("own grow {cap}"),
            Action::ArmUnload => "own arm".into(),
            Action::Unload => "own unload".into(),
        },
    }
}

/// Each choice over several residents (windows of 8192 tokens, whose KV is
/// the brake's "ours"; 300 MiB each).
#[test]
fn an_idle_resident_is_evicted_before_the_one_in_use_shrinks() {
    type Row = (
        &'static [(&'static str, u64, Turn)],
        (&'static str, Point, Level, Option<bool>),
        &'static str,
    );
    #[rustfmt::skip]
    let rows: &[Row] = &[
        // why: the case: pressure at the busy one's turn end evicts the idle one, not shrink the busy one
        (&[("a", 300, IDLE), ("b", 10, IDLE)], ("b", TurnEnd, Critical, None), "evict a"),
        // why: least recently used idle first
        (&[("c", 600, IDLE), ("a", 60, IDLE), ("b", 10, IDLE)], ("b", TurnEnd, Critical, None), "evict c"),
        // why: at its own turn start the resident in use is not evicted: another idle one goes before the turn
        (&[("a", 300, IDLE), ("b", 10, IDLE)], ("b", TurnStart, Critical, None), "evict a"),
        // why: nothing idle (the other generates): the sampled resident's own law shrinks it, as today
        (&[("a", 300, InFlight), ("b", 10, IDLE)], ("b", TurnEnd, Critical, None), "own shrink 4096"),
        // why: the same at its turn start, for that very turn
        (&[("a", 300, InFlight), ("b", 10, IDLE)], ("b", TurnStart, Critical, None), "own shrink 4096"),
        // why: queued turns keep a resident from eviction (they would reload it at once)
        (&[("a", 300, Queued), ("b", 10, IDLE)], ("b", TurnEnd, Critical, None), "own shrink 4096"),
        // why: never a turn in flight: a sample taken for a generating resident decides nothing
        (&[("a", 300, InFlight), ("b", 10, IDLE)], ("a", Idle, Critical, None), "-"),
        // why: at its idle tick the sampled resident may be the one evicted; the older one generating is not
        (&[("a", 600, InFlight), ("b", 300, IDLE), ("c", 10, Queued)], ("b", Idle, Critical, None), "evict b"),
        // why: a warning without paging evidence evicts nobody, as today it shrinks nothing
        (&[("a", 300, IDLE), ("b", 10, IDLE)], ("b", TurnEnd, Warning, Some(false)), "own -"),
        // why: a warning with paging at a turn end evicts rather than defer a shrink of the one in use
        (&[("a", 300, IDLE), ("b", 10, IDLE)], ("b", TurnEnd, Warning, Some(true)), "evict a"),
        // why: an unreadable paging counter leaves the level to decide, as in today's law
        (&[("a", 300, IDLE), ("b", 10, IDLE)], ("b", TurnEnd, Warning, None), "evict a"),
        // why: with nothing idle, today's deferred shrink
        (&[("a", 300, InFlight), ("b", 10, IDLE)], ("b", TurnEnd, Warning, Some(true)), "own defer 4096"),
        // why: a warning at an idle tick evicts nobody (today it only applies a shrink decided earlier)
        (&[("a", 300, IDLE), ("b", 10, IDLE)], ("b", Idle, Warning, None), "own -"),
        // why: calm is each model's own (episode end, growth)
        (&[("a", 300, IDLE), ("b", 10, IDLE)], ("b", Idle, Calm, None), "own -"),
        // why: a sample for a model that is not resident decides nothing
        (&[("a", 300, IDLE), ("b", 10, IDLE)], ("z", Idle, Critical, None), "-"),
    ];
    for (i, &(rs, (model, point, level, paging), want)) in rows.iter().enumerate() {
        let rs: Vec<(&str, u64, u64, Turn)> = rs.iter().map(|&(m, ago, t)| (m, 300, ago, t)).collect();
        let sample = Sample {
            model,
            point,
            readings: readings(level, paging),
            now_ms: super::super::tests::NOW_MS,
        };
        let got = brake_over(&sample, &residents(&rs));
        assert_eq!(said(&got), want, "row {i}: {got:?}");
    }
}

/// What an action frees: an eviction the whole footprint, a shrink the KV
/// of the tokens it gives back, the unload of the last one its footprint.
#[test]
fn each_decision_says_what_it_frees() {
    let critical = |model, point| Sample {
        model,
        point,
        readings: readings(Critical, None),
        now_ms: super::super::tests::NOW_MS,
    };
    let rs = residents(&[("a", 700, 300, IDLE), ("b", 300, 10, IDLE)]);
    let got = brake_over(&critical("b", TurnEnd), &rs);
    assert_eq!(
        got,
        ResidentsBrake::Evict {
            model: "a".into(),
            frees_bytes: 700 * MIB
        }
    );
    // The cheapest to rebuild per MiB it frees goes first: (resident,
    // MiB, seconds idle, reload ms), the one evicted.
    type Row = ([(&'static str, u64, u64, u64); 2], &'static str);
    let rows: [Row; 4] = [
        // why: reloads in proportion to their size (1.5 ms a MiB): the one used longer ago goes, small as it is
        ([("e5", 100, 300, 150), ("c", 900, 60, 1_350)], "e5"),
        // why: used alike, a large one that reloads fast frees more for less
        ([("e5", 100, 60, 300), ("c", 900, 60, 900)], "c"),
        // why: used alike and alike per MiB: the one used longer ago (ties by recency)
        ([("e5", 100, 60, 100), ("c", 900, 120, 900)], "c"),
        // why: ten minutes idle (a quarter as likely back) outweighs a reload three times slower per MiB
        ([("e5", 100, 30, 150), ("c", 900, 600, 4_000)], "c"),
    ];
    for (i, (two, want)) in rows.into_iter().enumerate() {
        let mut rs = residents(&[
            (two[0].0, two[0].1, two[0].2, IDLE),
            (two[1].0, two[1].1, two[1].2, IDLE),
            ("b", 300, 10, IDLE),
        ]);
        rs[0].reload_ms = two[0].3;
        rs[1].reload_ms = two[1].3;
        let got = brake_over(&critical("b", TurnEnd), &rs);
        let ResidentsBrake::Evict { model, .. } = &got else {
            panic!("row {i}: {got:?}")
        };
        assert_eq!(model, want, "row {i}");
    }
    let rs = residents(&[("a", 700, 300, InFlight), ("b", 300, 10, IDLE)]);
    let ResidentsBrake::Own { frees_bytes, .. } = brake_over(&critical("b", TurnEnd), &rs) else {
        panic!("own")
    };
    assert_eq!(frees_bytes, (8192 - 4096) * 23_040, "half the window's KV");
    let mut alone = residents(&[("b", 300, 10, IDLE)]);
    alone[0].brake.unload_armed = true;
    let ResidentsBrake::Own {
        action, frees_bytes, ..
    } = brake_over(&critical("b", Idle), &alone)
    else {
        panic!("own")
    };
    assert_eq!((action, frees_bytes), (Action::Unload, 300 * MIB));
}

/// Lasting critical while away over two idle residents: the older is
/// evicted, then the last one lives today's sequence, shrink, arm, unload.
#[test]
fn lasting_critical_evicts_then_brakes_the_last_one_as_today() {
    let mut rs = residents(&[("a", 300, 300, IDLE), ("b", 300, 10, IDLE)]);
    let mut got = Vec::new();
    while !rs.is_empty() && got.len() < 6 {
        let sample = Sample {
            model: "b",
            point: Idle,
            readings: readings(Critical, None),
            now_ms: super::super::tests::NOW_MS,
        };
        let d = brake_over(&sample, &rs);
        got.push(said(&d));
        match d {
            ResidentsBrake::Evict { model, .. } => rs.retain(|r| r.model != model),
            ResidentsBrake::Own { action, state, .. } => {
                let b = &mut rs[0];
                b.brake = state;
                if let Some(cap) = action.respawn_cap() {
                    b.brake = after_respawn(&state, action, cap, true, false);
                    b.window.allocated = cap;
                }
                if action == Action::Unload {
                    rs.clear();
                }
            }
            ResidentsBrake::Nothing => {}
        }
    }
    assert_eq!(got, ["evict a", "own shrink 4096", "own unload"]);
}

/// With one resident the decision is `llama_step`'s, over every point,
/// level, paging reading and a spread of states and windows.
#[test]
fn a_single_resident_is_braked_exactly_as_today() {
    let states = [
        BrakeState::default(),
        BrakeState {
            pending_cap: Some(4096),
            episode: Some(Episode::default()),
            ..BrakeState::default()
        },
        BrakeState {
            unload_armed: true,
            episode: Some(Episode::default()),
            ..BrakeState::default()
        },
        BrakeState {
            seeded: true,
            episode: Some(Episode {
                level: Critical,
                shrinks: 1,
                unloaded: true,
            }),
            ..BrakeState::default()
        },
        BrakeState {
            cap: Some(4096),
            hurt: Some(8192),
            calm_streak: 4,
            ..BrakeState::default()
        },
    ];
    let mut checked = 0;
    for point in [TurnStart, TurnEnd, Idle] {
        for level in [Calm, Warning, Critical] {
            for paging in [None, Some(false), Some(true)] {
                for state in states {
                    for (allocated, turn) in [(8192, IDLE), (4096, IDLE), (16384, Queued)] {
                        let mut r = resident(super::super::tests::NOW_MS, ("m", 300, 60, turn));
                        r.window.allocated = allocated;
                        r.brake = state;
                        let rd = readings(level, paging);
                        let (action, next) = llama_step(point, &rd, &state, &r.window);
                        let got = brake_over(
                            &Sample {
                                model: "m",
                                point,
                                readings: rd,
                                now_ms: super::super::tests::NOW_MS,
                            },
                            std::slice::from_ref(&r),
                        );
                        let ResidentsBrake::Own {
                            action: a, state: s, ..
                        } = got
                        else {
                            panic!("{point:?} {level:?} {paging:?} {state:?} {allocated}: {got:?}")
                        };
                        assert_eq!(
                            (a, s),
                            (action, next),
                            "{point:?} {level:?} {paging:?} {state:?} {allocated}"
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 405);
}
