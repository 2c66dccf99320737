//! The arbiter's order, row by row (the simulator, `arbiter_sim`, drives
//! it through whole schedules).

use std::time::Duration;

use super::*;
use crate::law::brake::{BrakeState, WindowFacts};
use crate::law::residents::ModelKind;

const GIB: u64 = 1 << 30;

fn ask(model: &str, floor_gib: u64) -> LoadAsk {
    LoadAsk {
        new: Newcomer {
            model: model.into(),
            kind: ModelKind::Chat,
            weights_bytes: floor_gib * GIB / 2,
            floor_bytes: floor_gib * GIB,
            full_bytes: None,
            waited_out: false,
        },
        // 16 GiB: a budget of 11.75 GiB.
        memory: Memory::Ram(16 * GIB),
        max_resident: None,
        load_ms: 1_000,
        weight: 1.0,
        queued: 1,
        waited_ms: 0,
        policy: Policy::Weighed,
        limit: Duration::from_secs(30),
    }
}

fn seat(model: &str, gib: u64, busy: bool, pinned: bool) -> Seat {
    Seat {
        resident: Resident {
            model: model.into(),
            kind: ModelKind::Chat,
            footprint_bytes: gib * GIB,
            last_used_ms: 0,
            in_flight: busy,
            pinned,
            reload_ms: 1_000,
            queued: u32::from(busy),
            window: WindowFacts::default(),
            brake: BrakeState::default(),
        },
        weight: 1.0,
        resident_ms: 600_000,
        idle_ms: 600_000,
    }
}

fn holder(model: &str) -> Holder {
    Holder {
        model: model.into(),
        pinned: false,
        weight: 1.0,
        resident_ms: 600_000,
        reload_ms: 1_000,
        idle: false,
        fresh: false,
        queued: 1,
    }
}

/// A load beside a busy resident it needs the memory of waits in the line,
/// on that resident; beside an idle one it evicts it and reserves.
#[test]
fn a_load_waits_on_the_busy_and_evicts_the_idle() {
    let mut a = Arbiter::default();
    let busy = [seat("big", 8, true, false)];
    let step = a.load_step(&ask("new", 6), &busy, 0);
    assert!(
        matches!(&step, LoadStep::Wait { on, why: Waits::Turns(_), .. } if on == &["big"]),
        "{step:?}"
    );
    assert_eq!(a.line(|_| 1, 0).len(), 1, "it took a place");
    let idle = [seat("big", 8, false, false)];
    let step = a.load_step(&ask("new", 6), &idle, 10);
    let LoadStep::Go { evict, reserve, .. } = step else {
        panic!("{step:?}")
    };
    assert_eq!(evict.iter().map(|h| h.model.as_str()).collect::<Vec<_>>(), ["big"]);
    assert!(reserve >= 6 * GIB);
}

/// The memory a holder yields is the waiter's: the yielder's next load
/// and a third model's wait for it; the waiter itself goes.
#[test]
fn memory_yielded_to_a_model_is_kept_for_it() {
    let mut a = Arbiter::default();
    let busy = [seat("a", 8, true, false)];
    // b waits on a, long enough to be owed the memory.
    let _ = a.load_step(&ask("b", 6), &busy, 0);
    let yielded = a.holder_step(
        &holder("a"),
        || busy.to_vec(),
        |_| 1,
        Policy::Weighed,
        Duration::from_secs(30),
        60_000,
    );
    assert_eq!(yielded.map(|(to, _)| to).as_deref(), Some("b"));
    a.yielded("a", "b");
    // a has left: nothing resident. c, small, would fit, but b is owed.
    let step = a.load_step(&ask("c", 2), &[], 60_001);
    assert!(
        matches!(&step, LoadStep::Wait { why: Waits::Behind(x), .. } if x == "b"),
        "{step:?}"
    );
    let step = a.load_step(&ask("a", 8), &[], 60_002);
    assert!(
        matches!(&step, LoadStep::Wait { why: Waits::Behind(x), .. } if x == "b"),
        "{step:?}"
    );
    let step = a.load_step(&ask("b", 6), &[], 60_003);
    assert!(matches!(step, LoadStep::Go { .. }), "{step:?}");
    assert!(a.leave("b"));
    // b is in: c goes.
    let step = a.load_step(&ask("c", 2), &[seat("b", 6, true, false)], 60_004);
    assert!(matches!(step, LoadStep::Go { .. }), "{step:?}");
}

/// A holder never yields to a waiter that a pinned resident keeps out
/// anyway; it does once that waiter would fit.
#[test]
fn no_yield_to_a_waiter_that_could_not_use_it() {
    let mut a = Arbiter::default();
    let all = [seat("a", 4, true, false), seat("pin", 6, true, true)];
    // new needs 9 GiB: with `a` gone there are 5.75 beside the pinned 6.
    let _ = a.load_step(&ask("new", 9), &all, 0);
    let limit = Duration::from_secs(30);
    assert_eq!(
        a.holder_step(&holder("a"), || all.to_vec(), |_| 1, Policy::Weighed, limit, 600_000),
        None
    );
    let why = &a.line(|_| 1, 600_000)[0].why;
    assert_eq!(
        why,
        "new waits: pin is pinned and never leaves for another model, and new does not fit beside it"
    );
    // Without the pinned one, it would fit once `a` leaves: a yields.
    let all = [seat("a", 4, true, false)];
    let _ = a.load_step(&ask("new", 9), &all, 600_001);
    assert!(
        a.holder_step(&holder("a"), || all.to_vec(), |_| 1, Policy::Weighed, limit, 600_002)
            .is_some()
    );
}

/// A holder just loaded serves its first turn before it yields, even to a
/// starved waiter and under first come, first served.
#[test]
fn a_fresh_holder_serves_its_first_turn() {
    let mut a = Arbiter::default();
    let all = [seat("a", 8, true, false)];
    let _ = a.load_step(&ask("b", 6), &all, 0);
    let fresh = Holder {
        fresh: true,
        ..holder("a")
    };
    for policy in [Policy::Weighed, Policy::Arrival] {
        assert_eq!(
            a.holder_step(&fresh, || all.to_vec(), |_| 1, policy, Duration::from_secs(30), 600_000),
            None,
            "{policy:?}"
        );
        assert!(
            a.holder_step(
                &holder("a"),
                || all.to_vec(),
                |_| 1,
                policy,
                Duration::from_secs(30),
                600_000
            )
            .is_some()
        );
    }
}
