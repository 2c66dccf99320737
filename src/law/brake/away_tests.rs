//! Table tests of the memory brake's law (`law::brake`) while the user is
//! away and across children: lasting critical, a pinned window, a seeded
//! child, growth, a failed respawn. The helpers (`run`, `st`, `facts`) are
//! `tests.rs`'s.

use super::*;

#[test]
fn lasting_critical_while_away_respawns_then_unloads() {
    // why: the spec's sequence: critical turn_end respawns smaller, the first
    // idle tick arms (no second shrink without a turn), the second unloads
    let (s, _) = run(
        "turn_end then idle",
        BrakeState::default(),
        16384,
        false,
        &[
            st(TurnEnd, Critical, "shrink 8192"),
            st(Idle, Critical, "arm"),
            st(Idle, Critical, "unload"),
        ],
    );
    assert!(s.episode.unwrap().unloaded);
    assert_eq!(s.cap, Some(8192), "the reload uses the reduced window");
    // why: an idle respawn is followed by the unload at the very next tick
    run(
        "idle respawn",
        BrakeState::default(),
        16384,
        false,
        &[st(Idle, Critical, "shrink 8192"), st(Idle, Critical, "unload")],
    );
    // why: at the floor (a window whose KV is ours), two idle criticals unload
    let big_kv = |w| WindowFacts {
        kv_per_token: 200_000,
        ..facts(w)
    };
    let mut state = BrakeState::default();
    let mut got = Vec::new();
    for _ in 0..2 {
        let (a, n) = llama_step(
            Idle,
            &Readings {
                level: Critical,
                paging: None,
                footprint_bytes: None,
            },
            &state,
            &big_kv(4096),
        );
        got.push(a);
        state = n;
    }
    assert_eq!(got, [Action::ArmUnload, Action::Unload]);
    // why: a turn in between disarms (the user is back)
    run(
        "turn disarms",
        BrakeState::default(),
        16384,
        false,
        &[
            st(TurnEnd, Critical, "shrink 8192"),
            st(Idle, Critical, "arm"),
            st(TurnStart, Critical, "shrink 4096"),
            st(Idle, Critical, "arm"),
        ],
    );
    // why: a non-critical idle sample disarms too
    run(
        "warning disarms",
        BrakeState::default(),
        16384,
        false,
        &[
            st(TurnEnd, Critical, "shrink 8192"),
            st(Idle, Critical, "arm"),
            st(Idle, Warning, "-"),
            st(Idle, Critical, "arm"),
        ],
    );
}

#[test]
fn a_pinned_window_is_never_resized_but_still_unloads() {
    let (s, w) = run(
        "pinned",
        BrakeState::default(),
        8192,
        true,
        &[
            st(TurnEnd, Critical, "-"),
            paged(TurnEnd, Warning, "-"),
            st(Idle, Critical, "arm"),
            st(Idle, Critical, "unload"),
        ],
    );
    assert_eq!((w, s.notice, s.cap), (8192, None, None), "no acted notice with a pin");
}

#[test]
fn a_seeded_child_takes_no_extra_shrink_and_no_second_unload() {
    // why: what `seed` makes of a live carry (clock_tests.rs checks
    // that it does)
    let seeded = BrakeState {
        episode: Some(Episode {
            level: Critical,
            shrinks: 1,
            unloaded: true,
        }),
        cap: Some(4096),
        hurt: Some(8192),
        seeded: true,
        ..BrakeState::default()
    };
    let (s, w) = run(
        "seeded",
        seeded,
        8192,
        false,
        &[
            st(TurnEnd, Critical, "-"),
            st(Idle, Critical, "-"),
            st(Idle, Critical, "-"),
        ],
    );
    assert_eq!(w, 8192);
    assert!(s.seeded, "still in the carried episode");
    // why: once the carried episode ends, the brake is whole again
    run(
        "after the episode",
        s,
        8192,
        false,
        &[
            st(Idle, Calm, "-"),
            st(Idle, Calm, "-"),
            st(TurnEnd, Critical, "shrink 4096"),
        ],
    );
}

#[test]
fn growth_waits_for_quiet_and_stays_under_ninety_percent_of_the_hurt_window() {
    let (s, w) = run(
        "shrunk",
        BrakeState::default(),
        32768,
        false,
        &[st(TurnEnd, Critical, "shrink 16384")],
    );
    let uncapped = 32768;
    let calm = |want| st(Idle, Calm, want);
    let mut steps: Vec<Step> = (0..GROW_AFTER_CALM_SAMPLES - 1).map(|_| calm("-")).collect();
    // why: 90 % of 32768 is 29491.2: the largest grid window under it is 29440
    steps.push(calm("grow 29440"));
    // why: one grow per quiet period; at the ceiling nothing more
    steps.extend((0..GROW_AFTER_CALM_SAMPLES).map(|_| calm("-")));
    let mut state = s;
    let mut window = w;
    for (i, step) in steps.iter().enumerate() {
        let f = WindowFacts {
            uncapped,
            ..facts(window)
        };
        let (a, n) = llama_step(
            step.point,
            &Readings {
                level: step.level,
                paging: None,
                footprint_bytes: None,
            },
            &state,
            &f,
        );
        let got = match a {
            Action::Grow { cap } => format!("grow {cap}"),
            Action::None => "-".into(),
            other => format!("{other:?}"),
        };
        assert_eq!(got, step.want, "step {i}");
        state = n;
        if let Some(cap) = a.respawn_cap() {
            state = after_respawn(&state, a, cap, true, false);
            window = cap;
        }
    }
    assert_eq!(window, 29440);
    assert_eq!(grow_ceiling(8192), 7168);
    // why: a turn's calm samples never grow (only idle does)
    let (_, w2) = run(
        "no grow at turns",
        s,
        w,
        false,
        &[
            st(TurnEnd, Calm, "-"),
            st(TurnEnd, Calm, "-"),
            st(TurnEnd, Calm, "-"),
            st(TurnEnd, Calm, "-"),
            st(TurnEnd, Calm, "-"),
            st(TurnEnd, Calm, "-"),
        ],
    );
    assert_eq!(w2, 16384);
}

#[test]
fn a_failed_respawn_degrades_into_an_unload_with_the_cap_kept() {
    let r = Readings {
        level: Critical,
        paging: None,
        footprint_bytes: None,
    };
    let (a, n) = llama_step(TurnEnd, &r, &BrakeState::default(), &facts(8192));
    let after = after_respawn(&n, a, 4096, false, false);
    assert!(after.episode.unwrap().unloaded);
    assert_eq!(after.cap, Some(4096));
    assert!(!after.respawned);
}
