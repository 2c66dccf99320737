//! Table tests of the memory brake's law (`law::brake`) at turn boundaries:
//! episodes, shrinks, the deferred shrink, pressure not ours. The rows while
//! the user is away (lasting critical, pins, seeds, growth, a failed respawn)
//! are in `away_tests.rs`, over the same helpers. Most rows are whole
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

#[path = "away_tests.rs"]
mod away;
