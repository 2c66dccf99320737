//! Table tests of the scheduler across models (`law::schedule`): collate,
//! starve, pin, weight, minimum residency, the line's order, the estimate
//! and the thrash share.

use super::*;

const LIMIT: Duration = STARVATION_LIMIT_DEFAULT;

fn holder(resident_ms: u64, reload_ms: u64) -> Holder {
    Holder {
        model: "smol".into(),
        pinned: false,
        weight: 1.0,
        resident_ms,
        reload_ms,
        idle: false,
        fresh: false,
        queued: 1,
    }
}

fn waiter(waited_ms: u64, load_ms: u64) -> Waiter {
    Waiter {
        model: "gemma".into(),
        weight: 1.0,
        waited_ms,
        load_ms,
        queued: 1,
    }
}

#[test]
fn the_holder_yields_when_the_wait_pays_for_the_switch() {
    // (holder, waiter, want)
    let rows: [(Holder, Waiter, Next); 11] = [
        // why: collation: the waiter waited less than the round trip of loads (300 + 300)
        (
            holder(60_000, 300),
            waiter(200, 300),
            Next::Keep {
                in_ms: Some(400),
                why: Why::Collating { switch_ms: 600 },
            },
        ),
        // why: the wait passed the switch's cost and the holder has been resident long: it yields
        (holder(60_000, 300), waiter(600, 300), Next::Yield(Why::SwitchPays { switch_ms: 600 })),
        // why: just loaded (1 s of the 2.4 s minimum residency): it keeps the memory though the wait paid
        (
            holder(1_000, 300),
            waiter(700, 300),
            Next::Keep {
                in_ms: Some(1_400),
                why: Why::JustLoaded { residency_ms: 2_400 },
            },
        ),
        // why: the minimum residency is over: it yields
        (holder(2_400, 300), waiter(700, 300), Next::Yield(Why::SwitchPays { switch_ms: 600 })),
        // why: the starvation limit beats a minimum residency (slow loads: 20 s each way, so the limit is two 40 s switches)
        (
            holder(30_000, 20_000),
            waiter(80_000, 20_000),
            Next::Yield(Why::Starved { limit_ms: 80_000 }),
        ),
        // why: a 20 s + 20 s switch is collated until its cost is waited
        (
            holder(300_000, 20_000),
            waiter(10_000, 20_000),
            Next::Keep {
                in_ms: Some(30_000),
                why: Why::Collating { switch_ms: 40_000 },
            },
        ),
        // why: an idle holder leaves at once, however recent its load
        (
            Holder {
                idle: true,
                ..holder(10, 60_000)
            },
            waiter(0, 60_000),
            Next::Yield(Why::Idle),
        ),
        // why: a pinned holder never leaves, even past the limit
        (
            Holder {
                pinned: true,
                ..holder(600_000, 300)
            },
            waiter(10_000_000, 300),
            Next::Keep {
                in_ms: None,
                why: Why::Pinned,
            },
        ),
        // why: the starvation limit itself (30 s, more than two small switches)
        (holder(1_000, 300), waiter(30_000, 300), Next::Yield(Why::Starved { limit_ms: 30_000 })),
        // why: just loaded, it serves its first turn first, even to a starved waiter
        (
            Holder {
                fresh: true,
                ..holder(0, 300)
            },
            waiter(10_000_000, 300),
            Next::Keep {
                in_ms: None,
                why: Why::FirstTurn,
            },
        ),
        // why: but an idle one just loaded still leaves at once (nothing of its own waits)
        (
            Holder {
                fresh: true,
                idle: true,
                ..holder(0, 300)
            },
            waiter(0, 300),
            Next::Yield(Why::Idle),
        ),
    ];
    for (i, (h, w, want)) in rows.iter().enumerate() {
        assert_eq!(next(Policy::Weighed, h, w, LIMIT), *want, "row {i}");
    }
}

#[test]
fn weights_scale_the_wait_against_the_switch() {
    let h = holder(60_000, 1_000);
    // A switch costs 2 s; weight 2 pays for it after 1 s of waiting.
    let heavy = Waiter {
        weight: 2.0,
        ..waiter(1_000, 1_000)
    };
    assert_eq!(next(Policy::Weighed, &h, &heavy, LIMIT), Next::Yield(Why::SwitchPays { switch_ms: 2_000 }));
    // The same wait at weight 1 keeps collating.
    assert!(!next(Policy::Weighed, &h, &waiter(1_000, 1_000), LIMIT).yields());
    // A holder of weight 4 makes a waiter of weight 1 wait 8 s...
    let heavy_holder = Holder { weight: 4.0, ..h.clone() };
    assert!(!next(Policy::Weighed, &heavy_holder, &waiter(7_999, 1_000), LIMIT).yields());
    assert!(next(Policy::Weighed, &heavy_holder, &waiter(8_000, 1_000), LIMIT).yields());
    // ...but no weight outlasts the starvation limit.
    let huge = Holder { weight: 1e9, ..h };
    assert_eq!(
        next(Policy::Weighed, &huge, &waiter(30_000, 1_000), LIMIT),
        Next::Yield(Why::Starved { limit_ms: 30_000 })
    );
    // A weight that is not a positive number counts as the default.
    let odd = Waiter {
        weight: f64::NAN,
        ..waiter(2_000, 1_000)
    };
    assert!(next(Policy::Weighed, &holder(60_000, 1_000), &odd, LIMIT).yields());
}

#[test]
fn the_limit_never_forces_a_switch_sooner_than_two_switches() {
    // (setting, switch, effective)
    let rows = [
        (Duration::from_secs(30), 600, 30_000),
        (Duration::from_secs(30), 40_000, 80_000),
        (Duration::from_secs(0), 600, 1_200),
        (Duration::from_secs(120), 1_000, 120_000),
    ];
    for (limit, switch, want) in rows {
        assert_eq!(effective_limit_ms(limit, switch), want, "{limit:?} {switch}");
    }
}

#[test]
fn a_keep_estimate_is_never_past_the_limit() {
    for waited in [0, 1_000, 10_000, 29_999] {
        for resident in [0, 500, 5_000, 600_000] {
            for cost in [100, 1_000, 9_000] {
                let w = waiter(waited, cost);
                let n = next(Policy::Weighed, &holder(resident, cost), &w, LIMIT);
                let limit = effective_limit_ms(LIMIT, 2 * cost);
                if let Next::Keep { in_ms: Some(ms), .. } = n {
                    assert!(ms > 0 && waited + ms <= limit, "{waited} {resident} {cost}: {n:?}");
                }
            }
        }
    }
}

#[test]
fn a_switch_cost_is_measured_else_estimated_from_the_weights() {
    let rows = [
        (Some(350), 100 << 20, 350),
        // why: before a first load: 0.5 s plus its bytes at 1 GB/s
        (None, 4_000_000_000, 4_500),
        (None, 0, 500),
    ];
    for (last, bytes, want) in rows {
        assert_eq!(load_cost_ms(last, bytes), want, "{last:?} {bytes}");
    }
}

#[test]
fn the_longest_weighted_wait_goes_first_ties_by_arrival() {
    let a = waiter(5_000, 1);
    let b = Waiter {
        model: "b".into(),
        ..waiter(9_000, 1)
    };
    let c = Waiter {
        model: "c".into(),
        weight: 2.0,
        ..waiter(5_000, 1)
    };
    // (line, first)
    type Row<'a> = (Vec<(u64, &'a Waiter)>, Option<usize>);
    let rows: [Row; 4] = [
        (vec![(1, &a), (2, &b)], Some(1)),
        // why: weight 2 makes 5 s count as 10 s
        (vec![(1, &a), (2, &b), (3, &c)], Some(2)),
        // why: equal waits: the earlier arrival
        (vec![(7, &a), (3, &a)], Some(1)),
        (vec![], None),
    ];
    for (line, want) in rows {
        assert_eq!(first_in_line(&line), want);
    }
}

#[test]
fn thrashing_is_more_than_a_fifth_of_the_time_loading() {
    assert!(!thrashing(0, 60_000));
    assert!(!thrashing(12_000, 60_000));
    assert!(thrashing(12_001, 60_000));
    assert!(!thrashing(5, 0));
}

#[test]
fn the_status_says_why_a_model_waits() {
    let n = next(Policy::Weighed, &holder(60_000, 900), &waiter(400, 900), LIMIT);
    assert_eq!(
        explain("smol", "gemma", n),
        "gemma waits: switching costs 1.8 s, smol's turns go first, at most 1.4 s more"
    );
    let pinned = Holder {
        pinned: true,
        ..holder(1, 1)
    };
    assert!(explain("smol", "gemma", next(Policy::Weighed, &pinned, &waiter(1, 1), LIMIT)).contains("pinned"));
    assert!(explain("smol", "gemma", Next::Yield(Why::Starved { limit_ms: 30_000 })).contains("30.0 s"));
}

#[test]
fn first_come_first_served_yields_to_any_wait_but_a_pin() {
    let a = Policy::Arrival;
    assert_eq!(next(a, &holder(10, 60_000), &waiter(0, 60_000), LIMIT), Next::Yield(Why::Arrival));
    let pinned = Holder {
        pinned: true,
        ..holder(10, 10)
    };
    assert!(!next(a, &pinned, &waiter(0, 10), LIMIT).yields());
    // why: arrival order still lets a model just loaded serve its first turn
    // (three models livelocked without it: each yielded before serving)
    let fresh = Holder {
        fresh: true,
        ..holder(0, 10)
    };
    assert_eq!(
        next(a, &fresh, &waiter(60_000, 10), LIMIT),
        Next::Keep {
            in_ms: None,
            why: Why::FirstTurn
        }
    );
    // (raw, policy)
    let rows = [
        (None, Ok(Policy::Weighed)),
        (Some(""), Ok(Policy::Weighed)),
        (Some(" weighed "), Ok(Policy::Weighed)),
        (Some("arrival"), Ok(Policy::Arrival)),
    ];
    for (raw, want) in rows {
        assert_eq!(Policy::parse(raw), want, "{raw:?}");
    }
    assert!(Policy::parse(Some("fifo")).unwrap_err().contains("`weighed` or `arrival`"));
}

#[test]
fn a_refused_request_is_told_when_to_ask_again() {
    // (estimate, load, seconds)
    let rows = [
        // why: the estimate left and the load, rounded up
        (Some(12_000), 1_800, 14),
        // why: no estimate yet: two loads
        (None, 1_800, 4),
        // why: never 0 (a client would ask again at once)
        (Some(0), 0, 1),
        (None, 0, 1),
    ];
    for (at_most, load, want) in rows {
        assert_eq!(retry_after_s(at_most, load), want, "{at_most:?} {load}");
    }
}

#[test]
fn the_work_queued_on_each_side_scales_the_wait() {
    // A switch costs 2 s (1 s each way); the holder has been resident long.
    let h = holder(600_000, 1_000);
    // (holder's turns, waiter's turns, waited ms, yields)
    let rows = [
        // why: one each: the wait pays at the switch's cost
        (1, 1, 1_999, false),
        (1, 1, 2_000, true),
        // why: a burst of four waits a quarter as long
        (1, 4, 500, true),
        (1, 4, 499, false),
        // why: three busy clients make a lone turn wait three switches
        (3, 1, 5_999, false),
        (3, 1, 6_000, true),
        // why: no count of work outlasts the starvation limit
        (1_000, 1, 29_999, false),
        (1_000, 1, 30_000, true),
    ];
    for (i, (hq, wq, waited, want)) in rows.into_iter().enumerate() {
        let holder = Holder { queued: hq, ..h.clone() };
        let w = Waiter {
            queued: wq,
            ..waiter(waited, 1_000)
        };
        assert_eq!(next(Policy::Weighed, &holder, &w, LIMIT).yields(), want, "row {i}");
    }
}
