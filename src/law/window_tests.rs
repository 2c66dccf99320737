//! Table tests of the window law (`law::window`).
#![allow(clippy::type_complexity)] // table rows are wide tuples on purpose

use super::*;

fn smollm2() -> ModelShape {
    ModelShape {
        kv_per_token: 23_040,
        weights_bytes: 98_362_432,
        trained: Some(8192),
        sliding: false,
        mla: false,
    }
}

/// Gemma-3-270M's numbers as an over-estimated shape: a sliding cache kept
/// small (what a sliding model without `--swa-full` would be).
fn gemma3() -> ModelShape {
    ModelShape {
        kv_per_token: 18_432,
        weights_bytes: 253_113_024,
        trained: Some(32768),
        sliding: true,
        mla: false,
    }
}

fn gib_f(g: f64) -> u64 {
    (g * GIB as f64) as u64
}

fn sized(ctx: u32, memory_bound: bool) -> (Option<u32>, bool) {
    (Some(ctx), memory_bound)
}

#[test]
fn cpu_window_rows() {
    let big_ram = 24 * GIB;
    let rows: &[(&str, ModelShape, u64, Option<u32>, Option<u32>, (Option<u32>, bool))] = &[
        // why: 24 GiB holds SmolLM2's whole trained window: trained binds
        ("smollm2 24G", smollm2(), big_ram, None, None, sized(8192, false)),
        // why: 0.65 GiB: budget 156,651,251 B / 24,064 B = 6509 -> 6400 on the grid, memory-bound
        ("smollm2 0.65G", smollm2(), gib_f(0.65), None, None, sized(6400, true)),
        // why: 0.5 GiB: budget holds 1490 tokens, the floor lifts it to 4096, still memory-bound
        (
            "smollm2 0.5G floor",
            smollm2(),
            gib_f(0.5),
            None,
            None,
            sized(4096, true),
        ),
        // why: weights larger than the budget: the floor, never a refusal
        ("smollm2 0.1G", smollm2(), gib_f(0.1), None, None, sized(4096, true)),
        // why: the brake's cap folds in below the memory window
        ("smollm2 cap", smollm2(), big_ram, Some(5120), None, sized(5120, false)),
        // why: a cap above the window changes nothing
        (
            "smollm2 high cap",
            smollm2(),
            big_ram,
            Some(16384),
            None,
            sized(8192, false),
        ),
        // why: an over-estimated model is sized on the full formula (283,757,888 B / 19,456 B = 14,584 -> 14,336,
        // under its trained 32768) but is never reported memory-bound
        ("gemma3 1G", gemma3(), GIB, None, None, sized(14_336, false)),
        // why: with --swa-full the formula is exact: the same window, memory-bound
        (
            "gemma3 swa-full 1G",
            ModelShape {
                sliding: false,
                ..gemma3()
            },
            GIB,
            None,
            None,
            sized(14_336, true),
        ),
        // why: 24 GiB: gemma's trained 32768 fits
        ("gemma3 24G", gemma3(), big_ram, None, None, sized(32768, false)),
    ];
    for (i, (name, shape, ram, cap, pin, want)) in rows.iter().enumerate() {
        let w = cpu(shape, *ram, *cap, *pin);
        let got = (w.ctx(), w.memory_bound().is_some());
        assert_eq!(got, *want, "row {i} ({name}): {w:?}");
    }
}

#[test]
fn pins_mla_and_trained_edges() {
    // why: a pin is passed as is (off the grid too) and never memory-bound
    assert_eq!(cpu(&smollm2(), GIB / 8, None, Some(8000)), Window::Pinned { ctx: 8000 });
    // why: MLA is refused: no -c, fit sizes it
    let mla = ModelShape { mla: true, ..smollm2() };
    assert_eq!(cpu(&mla, 24 * GIB, None, None), Window::Unsized);
    // why: the floor never lifts a window above a short trained window
    let short = ModelShape {
        trained: Some(2048),
        ..smollm2()
    };
    assert_eq!(cpu(&short, 24 * GIB, None, None).ctx(), Some(2048));
    // why: without a trained window, memory alone sizes it (and binds it)
    let untrained = ModelShape {
        trained: None,
        ..smollm2()
    };
    let w = cpu(&untrained, gib_f(0.65), None, None);
    assert_eq!(w.ctx(), Some(6400));
}

#[test]
fn cuda_window_rows() {
    let h200 = Vram {
        total_bytes: 139 * GIB,
        free_bytes: 138 * GIB,
    };
    let rows: &[(&str, Vram, u64, Option<u32>, (Option<u32>, bool))] = &[
        // why: a big card holds SmolLM2's trained window
        ("smollm2 h200", h200, 1024, None, sized(8192, false)),
        // why: free below 0.9 x total binds: 3 GiB free - 1 GiB - weights - 256 MiB - 512 MiB
        // = 1,243,814,848 B / 24,064 B = 51,688 -> 51,456 on the grid
        (
            "trained huge, 3G free",
            Vram {
                total_bytes: 24 * GIB,
                free_bytes: 3 * GIB,
            },
            1024,
            None,
            sized(51_456, true),
        ),
        // why: non-FA slope 512 x 9 heads x 4 B = 18,432 B/token: 1,243,814,848 / 41,472 = 29,991 -> 29,952
        (
            "non-FA slope",
            Vram {
                total_bytes: 24 * GIB,
                free_bytes: 3 * GIB,
            },
            cuda_slope(false, 9),
            None,
            sized(29_952, true),
        ),
        // why: nothing fits: the floor
        (
            "tiny card",
            Vram {
                total_bytes: 2 * GIB,
                free_bytes: GIB,
            },
            1024,
            None,
            sized(4096, true),
        ),
    ];
    for (i, (name, vram, slope, cap, want)) in rows.iter().enumerate() {
        let shape = if name.starts_with("smollm2") {
            smollm2()
        } else {
            ModelShape {
                trained: Some(131_072),
                ..smollm2()
            }
        };
        let w = cuda(&shape, *vram, *slope, *cap, None);
        assert_eq!((w.ctx(), w.memory_bound().is_some()), *want, "row {i} ({name}): {w:?}");
    }
}

#[test]
fn flash_attention_proof() {
    let rows = [
        // why: llama 64/64 is a supported head size
        (64, 64, false, true),
        // why: gemma's 256/256 is supported
        (256, 256, false, true),
        // why: unequal K and V head sizes (MLA-like) fall back
        (192, 128, false, false),
        // why: a head size without a kernel
        (48, 48, false, false),
        // why: ALiBi disables the proof
        (128, 128, true, false),
    ];
    for (i, (k, v, alibi, want)) in rows.into_iter().enumerate() {
        assert_eq!(fa_proven(k, v, alibi), want, "row {i}");
    }
    assert_eq!(cuda_slope(true, 32), 1024);
    assert_eq!(cuda_slope(false, 32), 65_536);
}

#[test]
fn footprint_postload_working_window_and_kv_bound() {
    let s = smollm2();
    // why: the amber figure: KV and compute for the window plus the weights
    assert_eq!(footprint_bytes(&s, 4096), 4096 * 24_064 + 98_362_432);
    // why: x1.1 + 256 MiB over window x (KV + 1 KiB) + 64 MiB + weights
    let predicted = 4096 * 24_064 + 64 * MIB + 98_362_432;
    assert_eq!(
        postload_limit_bytes(&s, 4096),
        (predicted as f64 * 1.1) as u64 + 256 * MIB
    );
    let rows = [
        // why: the smaller of the two binds
        (Some(8192), Some(6000), Some(6000)),
        (Some(4096), Some(6000), Some(4096)),
        // why: an unknown side leaves the other
        (None, Some(6000), Some(6000)),
        (Some(8192), None, Some(8192)),
        (None, None, None),
    ];
    for (i, (a, c, want)) in rows.into_iter().enumerate() {
        assert_eq!(working_window(a, c), want, "working row {i}");
    }
    let bounds = [
        // why: a limit under the floor is lifted to it
        (Some(32_768), 1000, 4096),
        // why: never above the trained window
        (Some(8192), 50_000, 8192),
        // why: in between, the limit itself
        (Some(32_768), 10_000, 10_000),
        // why: a trained window at or under the floor is the bound
        (Some(2048), 1000, 2048),
        // why: no trained window: the limit, floored, is the bound
        (None, 1000, 4096),
        (None, 50_000, 50_000),
    ];
    for (i, (trained, limit, want)) in bounds.into_iter().enumerate() {
        assert_eq!(kv_bound(trained, limit), want, "kv_bound row {i}");
    }
}

#[test]
fn postload_excess_rows() {
    let s = smollm2();
    let limit = postload_limit_bytes(&s, 4096);
    let over = |held| {
        Some(Excess {
            held_bytes: held,
            limit_bytes: limit,
        })
    };
    let rows = [
        // why: within the limit: nothing to say
        (Some(limit - MIB), None),
        // why: the limit itself is still allowed
        (Some(limit), None),
        // why: above it, one WARNING with both figures
        (Some(limit + 1), over(limit + 1)),
        // why: an unread footprint says nothing
        (None, None),
    ];
    for (i, (anon, want)) in rows.into_iter().enumerate() {
        assert_eq!(postload_excess(&s, 4096, anon), want, "row {i}");
    }
}

#[test]
fn a_pin_beyond_the_trained_window_is_named() {
    let sized = Window::Sized {
        ctx: 8192,
        memory_bound: false,
        budget_bytes: 0,
    };
    let rows = [
        // (window, trained, warned, why)
        (Window::Pinned { ctx: 100_000 }, Some(8192), Some((100_000, 8192))), // why: the pin passes the trained window
        (Window::Pinned { ctx: 8192 }, Some(8192), None),                     // why: at the trained window: fine
        (Window::Pinned { ctx: 4096 }, Some(8192), None),                     // why: under it: fine
        (Window::Pinned { ctx: 100_000 }, None, None),                        // why: no trained window to pass
        (sized, Some(4096), None),                                            // why: the law never sizes past it
        (Window::Unsized, Some(8192), None),
    ];
    for (i, (w, trained, want)) in rows.into_iter().enumerate() {
        assert_eq!(pinned_beyond_trained(w, trained), want, "row {i}");
    }
}
