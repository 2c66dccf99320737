//! Table tests of the memory brake's law where time enters it: the pacing
//! of the idle samples and the TTLs of the carry and the window memory.
//! Time is plain milliseconds on the caller's clock, so every row runs on
//! any machine (they used to live in `tests/`, reading the real clock, and
//! the expiry rows were skipped on a machine up less than 30 minutes).

use super::*;

const S: u64 = 1000;

/// An idle sample is due 55 s after the previous sample and after the last
/// turn, not sooner.
#[test]
fn idle_samples_are_paced() {
    let skip = idle_sample_skip(BRAKE_IDLE_INTERVAL);
    assert_eq!(skip, Duration::from_secs(55));
    let rows = [
        // (now, last sample, last turn end, due)
        (100 * S, None, None, true),              // why: nothing recent
        (100 * S, Some(50 * S), None, false),     // why: 50 s after the previous sample
        (100 * S, Some(45 * S), None, true),      // why: 55 s after it (a tick a few seconds early still runs)
        (100 * S, None, Some(60 * S), false),     // why: 40 s after a turn ended
        (100 * S, Some(0), Some(44 * S), true),   // why: both long enough ago
        (100 * S, Some(45 * S + 1), None, false), // why: one millisecond short of the skip
        (5 * S, Some(0), None, false),            // why: the clock's origin is a moment like any other
        (0, Some(3 * S), None, false),            // why: a record after now counts as just now
    ];
    for (i, (now, last, turn, want)) in rows.into_iter().enumerate() {
        assert_eq!(idle_sample_due(now, last, turn, skip), want, "row {i}: now={now} last={last:?} turn={turn:?}");
    }
}

/// A record lives strictly less than its TTL.
#[test]
fn records_live_strictly_less_than_their_ttl() {
    let ttl = BRAKE_RELOAD_TTL;
    let ttl_ms = ttl.as_millis() as u64;
    let rows = [
        (0, 0, true),             // why: just written
        (0, ttl_ms - 1, true),    // why: the last millisecond of its life
        (0, ttl_ms, false),       // why: the TTL reached ends it
        (7, 7 + ttl_ms + 1, false), // why: past it, whatever the origin
        (9 * S, 3 * S, true),     // why: a `now` before the write is no time passed
    ];
    for (i, (at, now, want)) in rows.into_iter().enumerate() {
        assert_eq!(alive(at, now, ttl), want, "row {i}: at={at} now={now}");
    }
}

/// A live unload carry seeds the reload's brake state whole.
#[test]
fn a_live_carry_seeds_its_episode_whole() {
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
        at_ms: Some(10 * S),
    };
    // why: away_tests.rs runs the brake on from exactly this state
    assert_eq!(
        seed(Some(&carry), None, 11 * S),
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
    let written = 1_000 * S;
    let expired = written + BRAKE_RELOAD_TTL.max(WINDOW_MEMORY_TTL).as_millis() as u64 + S;
    let carry = |at_ms| BrakeReload {
        model: "m".into(),
        cap: Some(4096),
        hurt: Some(8192),
        episode: Some(Episode::default()),
        at_ms,
    };
    let mem = Remembered {
        cap: Some(6144),
        hurt: Some(8192),
        written_ms: written,
    };
    let fresh = Remembered {
        written_ms: expired,
        ..mem
    };
    // (carry, window memory, now, (the cap seeded, seeded whole))
    type Row = (Option<BrakeReload>, Option<Remembered>, u64, (Option<u32>, bool));
    let rows: [Row; 6] = [
        // why: the carry wins while alive
        (Some(carry(Some(written))), Some(mem), written + S, (Some(4096), true)),
        // why: an expired carry falls back to a live window memory
        (Some(carry(Some(written))), Some(fresh), expired, (Some(6144), false)),
        // why: a carry never stamped is not alive
        (Some(carry(None)), Some(mem), written, (Some(6144), false)),
        // why: an expired window memory seeds nothing
        (None, Some(mem), expired, (None, false)),
        // why: nothing recorded seeds nothing
        (None, None, 0, (None, false)),
        // why: both expired: nothing
        (Some(carry(Some(written))), Some(mem), expired, (None, false)),
    ];
    for (i, (carry, memory, now, want)) in rows.into_iter().enumerate() {
        let s = seed(carry.as_ref(), memory.as_ref(), now);
        assert_eq!((s.cap, s.seeded), want, "row {i}: {s:?}");
        if want.0.is_none() {
            assert_eq!(s, BrakeState::default(), "row {i}: nothing seeded is the default state");
        }
    }
}
