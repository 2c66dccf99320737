//! The memory brake's law where it reads a clock: pacing of the idle samples
//! and the TTLs of the carry and the window memory. The law takes `now` as an
//! argument; these rows live outside `src/law` because only a test may read
//! the real clock to get a reference instant (the law modules stay pure).

use std::time::{Duration, Instant};

use llm_warden::law::brake::{
    BRAKE_IDLE_INTERVAL, BRAKE_RELOAD_TTL, BrakeReload, BrakeState, Episode, Level, Remembered, idle_sample_due,
    idle_sample_skip, seed,
};

/// An idle sample is due 55 s after the previous sample and after the last
/// turn, not sooner.
#[test]
fn idle_samples_are_paced() {
    let t0 = Instant::now();
    let at = |s| t0 + Duration::from_secs(s);
    assert_eq!(idle_sample_skip(BRAKE_IDLE_INTERVAL), Duration::from_secs(55));
    let rows = [
        // (now, last sample, last turn end, due, why)
        (at(100), None, None, true),                // why: nothing recent
        (at(100), Some(at(50)), None, false),       // why: 50 s after the previous sample
        (at(100), Some(at(45)), None, true),        // why: 55 s after it (a tick a few seconds early still runs)
        (at(100), None, Some(at(60)), false),       // why: 40 s after a turn ended
        (at(100), Some(at(0)), Some(at(44)), true), // why: both long enough ago
    ];
    for (i, (now, last, turn, want)) in rows.into_iter().enumerate() {
        let skip = idle_sample_skip(BRAKE_IDLE_INTERVAL);
        assert_eq!(idle_sample_due(now, last, turn, skip), want, "row {i}");
    }
}

/// A live unload carry seeds the reload's brake state whole.
#[test]
fn a_live_carry_seeds_its_episode_whole() {
    let now = Instant::now();
    let episode = Episode {
        level: Level::Critical,
        shrinks: 1,
        unloaded: true,
    };
    let carry = BrakeReload {
        model: "m".into(),
        cap: Some(4096),
        hurt: Some(8192),
        episode: Some(episode),
        at: Some(now),
    };
    // why: brake_tests.rs runs the brake on from exactly this state
    assert_eq!(
        seed(Some(&carry), None, now),
        BrakeState {
            episode: Some(episode),
            cap: Some(4096),
            hurt: Some(8192),
            seeded: true,
            ..BrakeState::default()
        }
    );
}

/// Seeding takes the carry while it lives, then the window memory, and nothing
/// once both expired.
#[test]
fn seeding_reads_the_carry_then_the_window_memory_within_their_ttls() {
    let now = Instant::now();
    let old = now.checked_sub(BRAKE_RELOAD_TTL + Duration::from_secs(1));
    let carry = |at| BrakeReload {
        model: "m".into(),
        cap: Some(4096),
        hurt: Some(8192),
        episode: Some(Episode::default()),
        at,
    };
    let mem = Remembered {
        cap: Some(6144),
        hurt: Some(8192),
        written: now,
    };
    // why: the carry wins while alive
    assert_eq!(seed(Some(&carry(Some(now))), Some(&mem), now).cap, Some(4096));
    if let Some(old) = old {
        // why: an expired carry falls back to the window memory
        let s = seed(Some(&carry(Some(old))), Some(&mem), now);
        assert_eq!((s.cap, s.seeded), (Some(6144), false));
        // why: an expired window memory seeds nothing
        let stale = Remembered { written: old, ..mem };
        assert_eq!(seed(None, Some(&stale), now), BrakeState::default());
    }
}
