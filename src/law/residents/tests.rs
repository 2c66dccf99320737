//! Table tests of admission (`law::residents::admit`): beside, evictions
//! (least recently used, idle only, until the floor fits), the wait and the
//! refusal, the one-model rule, the count cap, the CUDA rule, and that the
//! budget is the one the window law sizes on.


use super::*;
use crate::law::window::{FA_COMPUTE_BYTES_PER_TOKEN, GIB, MIB, Window};

#[derive(Clone, Copy)]
pub(super) enum Turn {
    Idle,
    InFlight,
    Queued,
}
use Turn::{Idle, InFlight, Queued};

/// (model, footprint MiB, seconds since its last use, turn)
/// The moment the rows' ages count back from (ms on a monotonic clock).
pub(super) const NOW_MS: u64 = 10_000_000;

type Row = (&'static str, u64, u64, Turn);
/// A newcomer's (weights, floor, full), MiB.
type Needs = (u64, u64, u64);

/// A resident of `mib` last used `ago` seconds before the moment `now_ms`; its
/// window is SmolLM2-like (23,040 B/token, 8192 tokens, on 1 GiB of RAM,
/// where its KV is "ours" for the brake).
pub(super) fn resident(now_ms: u64, (model, mib, ago, turn): Row) -> Resident {
    Resident {
        model: model.into(),
        kind: if model.starts_with('e') {
            ModelKind::Embedding
        } else {
            ModelKind::Chat
        },
        footprint_bytes: mib * MIB,
        last_used_ms: now_ms - ago * 1000,
        in_flight: matches!(turn, InFlight),
        queued: if matches!(turn, Queued) { 1 } else { 0 },
        pinned: false,
        reload_ms: 500,
        window: WindowFacts {
            allocated: 8192,
            kv_per_token: 23_040,
            ram_bytes: GIB,
            uncapped: 8192,
            pinned: false,
        },
        brake: BrakeState::default(),
    }
}

pub(super) fn residents(rows: &[Row]) -> Vec<Resident> {
    rows.iter().map(|&r| resident(NOW_MS, r)).collect()
}

/// A newcomer of `weights` MiB needing `floor` MiB at its floor window and
/// `full` at its full window.
fn newcomer(weights: u64, floor: u64, full: u64) -> Newcomer {
    Newcomer {
        model: "new".into(),
        kind: ModelKind::Chat,
        weights_bytes: weights * MIB,
        floor_bytes: floor * MIB,
        full_bytes: Some(full * MIB),
        waited_out: false,
    }
}

/// The decision in a word: `load [evicted...] fit`, `wait`, `refuse`.
fn said(a: &Admission) -> String {
    match a {
        Admission::Load { evict, fit, .. } => {
            let names: Vec<&str> = evict.iter().map(|h| h.model.as_str()).collect();
            let fit = match fit {
                Fit::Full => "full",
                Fit::Reduced => "reduced",
                Fit::FloorAlone => "floor-alone",
            };
            format!("load [{}] {fit}", names.join(" "))
        }
        Admission::Wait(_) => "wait".into(),
        Admission::Refuse(_) => "refuse".into(),
    }
}

/// 8 GiB of RAM: the CPU rule leaves 0.75 × 8 GiB − 256 MiB = 5888 MiB for
/// every resident's footprint and the newcomer's.
const RAM: Memory = Memory::Ram(8 * GIB);
/// The usual newcomer: 1000 MiB of weights, 1500 at its floor, 3000 at its full window.
const N: Needs = (1000, 1500, 3000);

/// Each admission rule on the CPU, one row per choice.
#[test]
fn admission_on_the_cpu_evicts_idle_residents_least_recently_used_until_the_floor_fits() {
    #[rustfmt::skip]
    let rows: &[(&[Row], Needs, Option<usize>, &str)] = &[
        // why: 3888 MiB left beside them holds the full window: load beside, nobody evicted
        (&[("a", 1000, 300, Idle), ("b", 1000, 60, Idle)], N, None, "load [] full"),
        // why: 2888 MiB left holds the floor, not the full window: a smaller window beats an eviction
        (&[("a", 1500, 300, Idle), ("b", 1500, 60, Idle)], N, None, "load [] reduced"),
        // why: 388 MiB left: the least recently used idle one goes, and only it (the floor, not the full window, decides)
        (&[("a", 2000, 300, Idle), ("b", 2000, 10, Idle), ("c", 1500, 60, Idle)], N, None, "load [a] reduced"),
        // why: one eviction leaves 2088 MiB for a 2500 MiB floor: the next least recently used goes too
        (&[("a", 2000, 300, Idle), ("b", 2000, 200, Idle), ("c", 1800, 10, Idle)], (1000, 2500, 3000), None, "load [a b] full"),
        // why: a resident in a turn is never evicted, even the least recently used: the idle one goes
        (&[("a", 4000, 600, InFlight), ("b", 1000, 60, Idle)], N, None, "load [b] reduced"),
        // why: only the memory a turn holds would make room: wait for its end, evicting nobody yet
        (&[("a", 4500, 600, InFlight), ("b", 1000, 60, Idle)], N, None, "wait"),
        // why: queued turns keep a resident like a turn in flight (they would reload it at once)
        (&[("a", 4500, 600, Queued), ("b", 1000, 60, Idle)], N, None, "wait"),
        // why: the one-model rule: nothing resident, a floor that does not fit still loads at the floor
        (&[], (5000, 7000, 9000), None, "load [] floor-alone"),
        // why: not fitting even alone, it evicts every idle resident and loads alone at the floor (today's switch)
        (&[("a", 1000, 300, Idle), ("b", 500, 60, Idle)], (5000, 7000, 9000), None, "load [a b] floor-alone"),
        // why: the one-model rule needs it alone: a resident in a turn makes it wait
        (&[("a", 1000, 300, InFlight)], (5000, 7000, 9000), None, "wait"),
        // why: memory fits, the count cap does not: the least recently used idle one goes
        (&[("a", 500, 300, Idle), ("b", 500, 60, Idle)], N, Some(2), "load [a] full"),
        // why: a cap of 1 is today's single child: a switch
        (&[("a", 500, 300, Idle)], N, Some(1), "load [a] full"),
        // why: the count cap with every resident in a turn: wait
        (&[("a", 500, 300, InFlight), ("b", 500, 60, Queued)], N, Some(2), "wait"),
        // why: a cap of 0 is read as 1: a model must be able to load
        (&[("a", 500, 300, Idle)], N, Some(0), "load [a] full"),
        // why: no cap by default: memory alone decides, however many are resident
        (&[("a", 100, 50, Idle), ("b", 100, 40, Idle), ("c", 100, 30, Idle), ("d", 100, 20, Idle), ("e", 100, 10, Idle)], N, MAX_RESIDENT_DEFAULT, "load [] full"),
    ];
    for (i, &(rs, (w, floor, full), max, want)) in rows.iter().enumerate() {
        let got = admit(&newcomer(w, floor, full), &residents(rs), RAM, max);
        assert_eq!(said(&got), want, "row {i}: {got:?}");
    }
}

/// CUDA: the free memory read at the load already excludes the residents;
/// the 0.9 share is one for all of them together.
#[test]
fn admission_on_cuda_budgets_the_free_memory_and_the_share_over_all_residents() {
    let vram = |total: u64, free: u64| {
        Memory::Gpu(Vram {
            total_bytes: total * MIB,
            free_bytes: free * MIB,
        })
    };
    #[rustfmt::skip]
    let rows: &[(&[Row], Memory, Needs, &str)] = &[
        // why: 24 GiB card, 8 GiB resident, 1 GiB desktop: min(22118 − 8192, 15384) − 1024 − 768 leaves 12134 MiB
        (&[("a", 4096, 300, Idle), ("b", 4096, 60, Idle)], vram(24_576, 15_384), (2000, 3000, 5000), "load [] full"),
        // why: a game holds the card (4000 MiB free): the LRU idle resident's 4096 MiB come back
        (&[("a", 4096, 300, Idle), ("b", 4096, 60, Idle)], vram(24_576, 4000), (2000, 3000, 5000), "load [a] full"),
        // why: 16 GiB card, 12 GiB resident, 4 GiB free: the free memory alone would hold it,
        // the 0.9 share over all residents (14746 − 12288) does not
        (&[("a", 6144, 300, Idle), ("b", 6144, 60, Idle)], vram(16_384, 4096), (500, 1000, 1500), "load [a] full"),
        // why: nothing idle to give back on the card: wait
        (&[("a", 6144, 300, InFlight), ("b", 6144, 60, Queued)], vram(16_384, 4096), (500, 1000, 1500), "wait"),
    ];
    for (i, &(rs, memory, (w, floor, full), want)) in rows.iter().enumerate() {
        let got = admit(&newcomer(w, floor, full), &residents(rs), memory, None);
        assert_eq!(said(&got), want, "row {i}: {got:?}");
    }
}

/// The budget `admit` decides on is the one `window::cpu` and `window::cuda`
/// size the window on, through `shape_beside` and `vram_beside`.
#[test]
fn the_budget_is_the_window_laws_beside_the_residents() {
    // SmolLM2-like: 98 MiB of weights, 23,040 B/token, trained 8192.
    let shape = ModelShape {
        kv_per_token: 23_040,
        weights_bytes: 98 * MIB,
        trained: Some(8192),
        sliding: false,
        mla: false,
    };
    let new = Newcomer::new("new", ModelKind::Chat, &shape, FA_COMPUTE_BYTES_PER_TOKEN, None);
    // why: the needs are the window law's footprints at the floor and at the trained window
    assert_eq!(new.floor_bytes, window::footprint_bytes(&shape, 4096));
    assert_eq!(new.full_bytes, Some(window::footprint_bytes(&shape, 8192)));
    // why: 1 GiB of RAM, 300 MiB resident: 512 − 300 − 98 MiB holds 4967 tokens, 4864 on the grid
    let rs = residents(&[("a", 300, 60, Idle)]);
    let got = admit(&new, &rs, Memory::Ram(GIB), None);
    let Admission::Load {
        kept_bytes,
        budget_bytes,
        fit: Fit::Reduced,
        ..
    } = got
    else {
        panic!("{got:?}")
    };
    let w = window::cpu(&shape_beside(&shape, kept_bytes), GIB, None, None);
    assert_eq!(
        w,
        Window::Sized {
            ctx: 4864,
            memory_bound: true,
            budget_bytes
        }
    );
    // why: on CUDA, after an eviction the shell reads the card again (the evicted
    // child's memory back in the free figure) and sizes beside what stays
    let slope = window::cuda_slope(true, 9);
    let new = Newcomer::new("new", ModelKind::Chat, &shape, slope, None);
    let rs = residents(&[("a", 2048, 300, Idle), ("b", 1024, 60, Idle)]);
    let before = Vram {
        total_bytes: 4 * GIB,
        free_bytes: 1024 * MIB,
    };
    let got = admit(&new, &rs, Memory::Gpu(before), None);
    let Admission::Load {
        evict,
        kept_bytes,
        budget_bytes,
        ..
    } = &got
    else {
        panic!("{got:?}")
    };
    assert_eq!((evict.len(), *kept_bytes), (1, 1024 * MIB), "{got:?}");
    let after = Vram {
        free_bytes: before.free_bytes + 2048 * MIB,
        ..before
    };
    let w = window::cuda(
        &shape_beside(&shape, *kept_bytes),
        vram_beside(after, *kept_bytes),
        slope,
        None,
        None,
    );
    assert_eq!(w.ctx(), Some(8192));
    assert!(
        matches!(w, Window::Sized { budget_bytes: b, .. } if b == *budget_bytes),
        "{w:?}"
    );
}

/// The floor is the trained window when smaller, and the pin when pinned.
#[test]
fn a_newcomers_floor_is_its_smallest_window() {
    let shape = |trained| ModelShape {
        kv_per_token: 1000,
        weights_bytes: 0,
        trained,
        sliding: false,
        mla: false,
    };
    // (trained, pin, floor bytes, full bytes)
    type FloorRow = (Option<u32>, Option<u32>, u64, Option<u64>);
    #[rustfmt::skip]
    let rows: &[FloorRow] = &[
        // why: the 4096 floor, the trained window as the full one
        (Some(32_768), None, 4096 * 2024, Some(32_768 * 2024)),
        // why: the floor never lifts a window above the trained one
        (Some(2048), None, 2048 * 2024, Some(2048 * 2024)),
        // why: no trained window: memory alone sizes it, there is no full window
        (None, None, 4096 * 2024, None),
        // why: a pin is what it loads at, floor and full alike
        (Some(32_768), Some(8192), 8192 * 2024, Some(8192 * 2024)),
    ];
    for (i, &(trained, pin, floor, full)) in rows.iter().enumerate() {
        let n = Newcomer::new("m", ModelKind::Chat, &shape(trained), FA_COMPUTE_BYTES_PER_TOKEN, pin);
        assert_eq!((n.floor_bytes, n.full_bytes), (floor, full), "row {i}");
    }
}

/// A load that waited out its timeout is refused, naming every resident
/// and what it holds.
#[test]
fn a_wait_that_times_out_is_refused_naming_each_resident() {
    let rs = residents(&[("a", 4500, 600, InFlight), ("e5", 1000, 60, Idle)]);
    let mut new = newcomer(1000, 1500, 3000);
    let Admission::Wait(short) = admit(&new, &rs, RAM, None) else {
        panic!("a turn holds the memory: the load waits")
    };
    new.waited_out = true;
    let Admission::Refuse(refused) = admit(&new, &rs, RAM, None) else {
        panic!("the wait timed out: refused")
    };
    assert_eq!(refused, short, "the refusal says what the wait was for");
    assert_eq!(DOES_NOT_FIT_CODE, "model_does_not_fit");
    assert_eq!(
        refused.to_string(),
        "new needs 1500 MiB at its floor window; 1388 MiB is left beside the residents in a turn: \
         a (chat) holds 4500 MiB, in a turn, e5 (embedding) holds 1000 MiB, idle"
    );
    // why: when the count cap, not memory, is what the turns hold, the message says so
    let rs = residents(&[("a", 500, 300, InFlight)]);
    let Admission::Refuse(by_count) = admit(&new, &rs, RAM, Some(1)) else {
        panic!("refused")
    };
    assert!(
        by_count
            .to_string()
            .contains("residents in a turn fill the count cap (WARDEN_MAX_RESIDENT=1)"),
        "{by_count}"
    );
}

/// `WARDEN_MAX_RESIDENT` as read.
#[test]
fn the_count_cap_is_a_positive_count_or_unset() {
    type ParseRow = (Option<&'static str>, Result<Option<usize>, ()>);
    #[rustfmt::skip]
    let rows: &[ParseRow] = &[
        // why: unset or empty: the default, no cap
        (None, Ok(None)),
        (Some(""), Ok(None)),
        // why: a count caps
        (Some("3"), Ok(Some(3))),
        (Some(" 2 "), Ok(Some(2))),
        // why: 0 would never load anything; a word is a typo
        (Some("0"), Err(())),
        (Some("many"), Err(())),
        (Some("-1"), Err(())),
    ];
    for (i, &(raw, want)) in rows.iter().enumerate() {
        let got = max_resident(raw);
        assert_eq!(got.clone().map_err(drop), want, "row {i}: {got:?}");
        if let Err(e) = got {
            assert!(
                e.contains("WARDEN_MAX_RESIDENT"),
                "row {i}: the error names the variable: {e}"
            );
        }
    }
}
