//! Table tests of the memory brake's law (`law::brake`). Most rows are whole
//! sequences: each step is a sample, the state threads through, and a
//! respawn action is carried out (successfully, unless the row says not) the
//! way the engine does, so the rows read like what a user would live.

use super::*;

const GIB: u64 = 1 << 30;

/// SmolLM2-like: 23,040 B/token; at 8192 tokens the KV is 180 MiB.
fn facts(allocated: u32) -> WindowFacts {
    WindowFacts {
        allocated,
        kv_per_token: 23_040,
        ram_bytes: GIB, // 10 % = 102 MiB: a 8192-token window (180 MiB) is "ours"
        uncapped: 8192,
        pinned: false,
    }
}

#[derive(Clone, Copy)]
struct Step {
    point: Point,
    level: Level,
    paging: Option<bool>,
    want: &'static str,
}

const fn st(point: Point, level: Level, want: &'static str) -> Step {
    Step {
        point,
        level,
        paging: Some(false),
        want,
    }
}

const fn paged(point: Point, level: Level, want: &'static str) -> Step {
    Step {
        point,
        level,
        paging: Some(true),
        want,
    }
}

use Level::{Calm, Critical, Warning};
use Point::{Idle, TurnEnd, TurnStart};

/// Runs `steps` from `state` over a child whose window follows the caps
/// (respawns succeed; `pinned` as given). Returns the final state and the
/// window, and checks each step's action.
fn run(name: &str, mut state: BrakeState, mut window: u32, pinned: bool, steps: &[Step]) -> (BrakeState, u32) {
    for (i, s) in steps.iter().enumerate() {
        let mut f = facts(window);
        f.pinned = pinned;
        let r = Readings {
            level: s.level,
            paging: s.paging,
            footprint_bytes: None,
        };
        let (action, next) = llama_step(s.point, &r, &state, &f);
        let got = match action {
            Action::Shrink { cap } => format!("shrink {cap}"),
            Action::DeferShrink { cap } => format!("defer {cap}"),
            Action::Grow { cap } => format!("grow {cap}"),
            Action::ArmUnload => "arm".into(),
            Action::Unload => "unload".into(),
            Action::None => "-".into(),
        };
        assert_eq!(got, s.want, "{name}: step {i} ({:?} {:?})", s.point, s.level);
        state = next;
        if let Some(cap) = action.respawn_cap() {
            state = after_respawn(&state, action, cap, true, pinned);
            window = cap;
        }
    }
    (state, window)
}

#[test]
fn episodes_open_on_pressure_and_end_after_two_calm_samples() {
    // why: the first non-calm sample opens an episode; one calm keeps it; two end it
    let (s, _) = run(
        "episode",
        BrakeState::default(),
        8192,
        false,
        &[st(TurnStart, Warning, "-"), st(Idle, Calm, "-"), st(Idle, Calm, "-")],
    );
    assert_eq!(s.episode, None);
    let (s, _) = run(
        "one calm",
        BrakeState::default(),
        8192,
        false,
        &[st(Idle, Warning, "-"), st(Idle, Calm, "-")],
    );
    assert!(s.episode.is_some(), "one calm sample does not end the episode");
}

#[test]
fn critical_at_a_turn_boundary_shrinks_now_and_says_acted() {
    // why: critical at turn_end halves the window and the respawn sets acted
    let (s, w) = run(
        "turn_end",
        BrakeState::default(),
        8192,
        false,
        &[st(TurnEnd, Critical, "shrink 4096")],
    );
    assert_eq!((w, s.cap, s.hurt), (4096, Some(4096), Some(8192)));
    assert_eq!(s.notice, Some(BrakeNotice::Acted));
    assert!(s.respawned, "the reload mark for the next turn");
    // why: at turn_start too, applying to that very turn
    let (_, w) = run(
        "turn_start",
        BrakeState::default(),
        16384,
        false,
        &[st(TurnStart, Critical, "shrink 8192")],
    );
    assert_eq!(w, 8192);
}

#[test]
fn a_shrink_goes_to_half_the_window_on_the_grid_never_under_the_floor() {
    let rows = [
        // why: half of 8192
        (8192, 4096),
        // why: half of 6400 is 3200: lifted to the floor
        (6400, 4096),
        // why: half of 20000 is 10000, rounded down to 9984
        (20000, 9984),
    ];
    for (i, (allocated, want)) in rows.into_iter().enumerate() {
        assert_eq!(shrink_target(allocated), want, "row {i}");
    }
    // why: at the floor no shrink is possible at a turn boundary
    run(
        "floor",
        BrakeState::default(),
        4096,
        false,
        &[st(TurnEnd, Critical, "-")],
    );
}

#[test]
fn shrinks_are_bounded_per_episode() {
    // why: two shrinks (a quarter of the window), then no more in this episode
    let (s, w) = run(
        "bounded",
        BrakeState::default(),
        32768,
        false,
        &[
            st(TurnEnd, Critical, "shrink 16384"),
            st(TurnStart, Critical, "shrink 8192"),
            st(TurnEnd, Critical, "-"),
        ],
    );
    assert_eq!((w, s.episode.unwrap().shrinks), (8192, 2));
    // why: a new episode may shrink again
    run(
        "new episode",
        s,
        w,
        false,
        &[
            st(Idle, Calm, "-"),
            st(Idle, Calm, "-"),
            st(TurnEnd, Critical, "shrink 4096"),
        ],
    );
}

#[test]
fn warning_with_paging_defers_the_shrink_to_idle() {
    // why: decided at turn_end, applied by a respawn once the user is away
    let (s, w) = run(
        "deferred",
        BrakeState::default(),
        8192,
        false,
        &[paged(TurnEnd, Warning, "defer 4096"), st(Idle, Warning, "shrink 4096")],
    );
    assert_eq!(w, 4096);
    assert_eq!(s.notice, Some(BrakeNotice::Acted), "said only once applied");
    // why: a deferred shrink says nothing before it applies
    let (s, _) = run(
        "pending",
        BrakeState::default(),
        8192,
        false,
        &[paged(TurnEnd, Warning, "defer 4096")],
    );
    assert_eq!((s.notice, s.pending_cap, s.cap), (None, Some(4096), None));
    // why: a critical turn boundary applies the pending cap at once
    run(
        "pending then critical",
        BrakeState::default(),
        8192,
        false,
        &[
            paged(TurnEnd, Warning, "defer 4096"),
            st(TurnStart, Critical, "shrink 4096"),
        ],
    );
}

#[test]
fn warning_without_paging_is_held_back_and_says_nothing() {
    let (s, w) = run(
        "no paging",
        BrakeState::default(),
        8192,
        false,
        &[st(TurnEnd, Warning, "-"), st(Idle, Warning, "-")],
    );
    assert_eq!((w, s.notice, s.pending_cap), (8192, None, None));
    // why: an unreadable paging counter leaves the level to decide alone
    let unreadable = Step {
        point: TurnEnd,
        level: Warning,
        paging: None,
        want: "defer 4096",
    };
    run("unreadable paging", BrakeState::default(), 8192, false, &[unreadable]);
}

#[test]
fn a_cap_never_applied_is_dropped_when_the_episode_ends() {
    // why: pressure ended before the idle respawn: the cap goes, silently; the hurt window stays
    let (s, w) = run(
        "dropped",
        BrakeState::default(),
        8192,
        false,
        &[
            paged(TurnEnd, Warning, "defer 4096"),
            st(Idle, Calm, "-"),
            st(Idle, Calm, "-"),
        ],
    );
    assert_eq!((w, s.pending_cap, s.cap, s.notice), (8192, None, None, None));
    assert_eq!(s.hurt, Some(8192));
}

#[test]
fn pressure_that_is_not_ours_says_external_and_shrinks_nothing() {
    // 4096 tokens x 23,040 B = 90 MiB: under 10 % of 1 GiB
    let (s, w) = run(
        "external",
        BrakeState::default(),
        4096,
        false,
        &[st(TurnEnd, Critical, "-")],
    );
    assert_eq!((w, s.notice), (4096, Some(BrakeNotice::External)));
    // why: a bigger window on a big machine is not ours either
    let f = WindowFacts {
        ram_bytes: 64 * GIB,
        ..facts(8192)
    };
    assert!(not_ours(&f));
    // why: external never replaces acted
    let acted = BrakeState {
        notice: Some(BrakeNotice::Acted),
        ..BrakeState::default()
    };
    let (s, _) = run("never over acted", acted, 4096, false, &[st(TurnEnd, Warning, "-")]);
    assert_eq!(s.notice, Some(BrakeNotice::Acted));
    // why: never on a child a brake reload seeded, before its episode ends
    let seeded = BrakeState {
        seeded: true,
        episode: Some(Episode::default()),
        ..BrakeState::default()
    };
    let (s, _) = run("seeded", seeded, 4096, false, &[st(TurnEnd, Warning, "-")]);
    assert_eq!(s.notice, None);
}

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
    // why: what `seed` makes of a live carry (tests/law_brake_clock.rs checks
    // that it does; the clock stays out of this pure module)
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
