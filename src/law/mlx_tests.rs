//! Table tests of the MLX law (`law::mlx`).

use super::*;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

fn facts(window: u32, last_request: u32) -> MlxFacts {
    MlxFacts {
        window,
        uncapped: 8192,
        kv_per_token: 46_080,
        ram_bytes: 24 * GIB,
        last_request_tokens: last_request,
        threshold: DEFAULT_COMPACTION_THRESHOLD,
        pinned: false,
    }
}

fn read(level: Level, above_base: u64) -> MlxReadings {
    MlxReadings {
        level,
        paging: Some(false),
        above_base: Some(above_base),
    }
}

#[test]
fn ceiling_and_bound() {
    // why: 0.75 x 1 GiB - 700 MiB base = 68 MiB: 71,303,168 B / 46,080 B = 1,547 tokens, less 512
    let b = MemoryBudget {
        base_bytes: 700 * MIB,
        working_set: WorkingSet::Ram(GIB),
        kv_per_token: 46_080,
    };
    assert_eq!(tokens_at_ceiling(b), 1547 - 512);
    // why: a base over the budget leaves no room
    assert_eq!(tokens_at_ceiling(MemoryBudget { base_bytes: GIB, ..b }), 0);
    // why: Metal's working set is the budget whole: 768 MiB - 700 MiB = 68 MiB, as 0.75 x 1 GiB above
    let metal = MemoryBudget {
        working_set: WorkingSet::Metal(768 * MIB),
        ..b
    };
    assert_eq!(tokens_at_ceiling(metal), 1547 - 512);
    // why: a 128 GiB M5 Max, whose Metal working set was measured at
    // 107.52 GiB (antirez/ds4#893: 115,448,720,916 B), a 2 GiB base, 46,080 B
    // per token: (115,448,720,916 - 2,147,483,648) / 46,080 = 2,458,794,
    // less 512; the budget is the working set whole, above 0.75 x 128 GiB
    let mac128 = MemoryBudget {
        base_bytes: 2 * GIB,
        working_set: WorkingSet::Metal(115_448_720_916),
        kv_per_token: 46_080,
    };
    assert_eq!(tokens_at_ceiling(mac128), 2_458_282);
    assert!(WorkingSet::Metal(115_448_720_916).budget_bytes() > WorkingSet::Ram(128 * GIB).budget_bytes());
    let rows = [
        // (trained, ceiling, cap, bound, why)
        (Some(8192), 1034, None, Some(4096)),         // why: under the floor: lifted to 4096
        (Some(8192), 6000, None, Some(6000)),         // why: the ceiling binds
        (Some(8192), 20_000, None, None),             // why: the trained window fits: no bound
        (Some(8192), 20_000, Some(5120), Some(5120)), // why: a brake cap binds alone
        (Some(8192), 6000, Some(5120), Some(5120)),   // why: the smaller of the two
        (Some(4096), 1000, None, Some(4096)),         // why: trained at the floor: the trained window
        (None, 20_000, None, Some(20_000)),           // why: no trained window: the ceiling always binds
        (None, 1000, None, Some(4096)),               // why: ... floored
        (None, 20_000, Some(5120), Some(5120)),       // why: ... or the brake's cap under it
    ];
    for (i, (trained, ceiling, cap, want)) in rows.into_iter().enumerate() {
        assert_eq!(memory_bound(trained, ceiling, cap), want, "row {i}");
    }
}

#[test]
fn the_child_outwaits_the_watchdog() {
    let s = Duration::from_secs;
    let rows = [
        // (trained, first_token_timeout, wait, why)
        (Some(8192), s(300), s(600)),  // why: the default watchdog: mlx-vlm's own 600 s
        (Some(8192), s(900), s(960)),  // why: a longer watchdog: 60 s beyond it
        (None, s(300), s(3660)),       // why: no trained window: the spec's 3660 s
        (None, s(3650), s(3710)),      // why: ... or 60 s beyond a longer watchdog
    ];
    for (i, (trained, ftt, want)) in rows.into_iter().enumerate() {
        assert_eq!(token_wait(trained, ftt), want, "row {i}");
    }
}

#[test]
fn release_first_then_a_useful_shrink_then_external() {
    let s = BrakeState::default();
    let rows: &[(&str, Point, MlxReadings, MlxFacts, MlxAction)] = &[
        // why: 300 MiB above base at a critical turn end: release
        (
            "release",
            Point::TurnEnd,
            read(Level::Critical, 300 * MIB),
            facts(8192, 7000),
            MlxAction::Release,
        ),
        // why: little to release, a long conversation: halve the bound
        (
            "shrink",
            Point::TurnEnd,
            read(Level::Critical, 10 * MIB),
            facts(8192, 7000),
            MlxAction::Shrink { cap: 4096 },
        ),
        // why: a short conversation holds no KV a smaller bound frees: nothing
        (
            "useless",
            Point::TurnEnd,
            read(Level::Critical, 10 * MIB),
            facts(8192, 1000),
            MlxAction::None,
        ),
        // why: warning without paging at a turn's end: nothing
        (
            "warning",
            Point::TurnEnd,
            MlxReadings {
                level: Level::Warning,
                paging: Some(false),
                above_base: Some(300 * MIB),
            },
            facts(8192, 7000),
            MlxAction::None,
        ),
        // why: warning with paging acts like critical (both actions are live)
        (
            "warning+paging",
            Point::TurnEnd,
            MlxReadings {
                level: Level::Warning,
                paging: Some(true),
                above_base: Some(300 * MIB),
            },
            facts(8192, 7000),
            MlxAction::Release,
        ),
    ];
    for (i, (name, point, r, f, want)) in rows.iter().enumerate() {
        let (a, _) = mlx_step(*point, r, &s, f);
        assert_eq!(a, *want, "row {i} ({name})");
    }
    // why: nothing to release or shrink: external, never over acted
    let (_, n) = mlx_step(Point::TurnEnd, &read(Level::Critical, 10 * MIB), &s, &facts(8192, 1000));
    assert_eq!(n.notice, Some(BrakeNotice::External));
    let acted = BrakeState {
        notice: Some(BrakeNotice::Acted),
        ..s
    };
    let (_, n) = mlx_step(
        Point::TurnEnd,
        &read(Level::Critical, 10 * MIB),
        &acted,
        &facts(8192, 1000),
    );
    assert_eq!(n.notice, Some(BrakeNotice::Acted));
}

#[test]
fn one_release_between_turns_and_the_unload_while_away() {
    let f = facts(8192, 7000);
    let s = BrakeState::default();
    // why: idle critical: release and arm; the next critical unloads
    let (a1, s1) = mlx_step(Point::Idle, &read(Level::Critical, 300 * MIB), &s, &f);
    assert_eq!(a1, MlxAction::Release);
    let (a2, s2) = mlx_step(Point::Idle, &read(Level::Critical, 300 * MIB), &s1, &f);
    assert_eq!(a2, MlxAction::Unload, "no second release without a turn");
    assert!(s2.episode.unwrap().unloaded);
    // why: a turn re-allows a release
    let (_, s3) = mlx_step(Point::TurnStart, &read(Level::Warning, 0), &s1, &f);
    let (a4, _) = mlx_step(Point::TurnEnd, &read(Level::Critical, 300 * MIB), &s3, &f);
    assert_eq!(a4, MlxAction::Release);
}

#[test]
fn a_bound_the_child_did_not_apply_is_forgotten() {
    let s = BrakeState::default();
    let (a, decided) = mlx_step(Point::TurnEnd, &read(Level::Critical, 0), &s, &facts(8192, 7000));
    assert_eq!(a, MlxAction::Shrink { cap: 4096 });
    let kept = after_bound(&s, &decided, a, true);
    assert_eq!((kept.cap, kept.notice), (Some(4096), Some(BrakeNotice::Acted)));
    let forgot = after_bound(&s, &decided, a, false);
    assert_eq!(
        (forgot.cap, forgot.notice, forgot.episode),
        (None, None, None),
        "as if it never happened"
    );
}

/// A calm turn end that swapped out 64 MiB is a warning (with its paging,
/// so it acts as a warning with paging does); nothing else moves the level.
#[test]
fn a_calm_turn_end_that_paged_is_a_warning() {
    use Level::*;
    use Point::*;
    let rows = [
        // (point, level, paging, decided at, why)
        (TurnEnd, Calm, Some(true), Warning, "64 MiB swapped out during the turn"),
        (TurnEnd, Calm, Some(false), Calm, "under 64 MiB"),
        (TurnEnd, Calm, None, Calm, "an unreadable counter is no evidence"),
        (TurnStart, Calm, Some(true), Calm, "only a turn's end has a paging window"),
        (Idle, Calm, Some(true), Calm, "an idle sample belongs to no turn"),
        (TurnEnd, Warning, Some(true), Warning, "already a warning"),
        (TurnEnd, Critical, Some(false), Critical, "the kernel's level stands"),
    ];
    for (point, level, paging, want, why) in rows {
        assert_eq!(sample_level(point, level, paging), want, "{why}");
    }
    // Through the step: a calm, paging turn end with a lot above base releases.
    let f = facts(8192, 6000);
    let r = MlxReadings {
        level: Calm,
        paging: Some(true),
        above_base: Some(GIB),
    };
    let (action, s) = mlx_step(TurnEnd, &r, &BrakeState::default(), &f);
    assert_eq!(action, MlxAction::Release, "{s:?}");
    let calm = MlxReadings { paging: Some(false), ..r };
    assert_eq!(mlx_step(TurnEnd, &calm, &BrakeState::default(), &f).0, MlxAction::None);
}
