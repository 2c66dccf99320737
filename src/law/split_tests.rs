use super::*;
use crate::law::kv::{kv_bytes_per_token, tests::smollm2};
use crate::law::window::{self, MIB};

/// SmolLM2-135M as its header reads: tied (no `output.weight`), its
/// `token_embd` Q8_0 576 × 49152.
fn smol() -> LayerCosts {
    let mut f = smollm2();
    f.token_embd_bytes = 30_081_024;
    layer_costs(&f, kv_bytes_per_token(&f))
}

fn devices(limits_mib: &[i64]) -> Vec<Device> {
    limits_mib
        .iter()
        .enumerate()
        .map(|(i, &m)| Device {
            name: if i == 0 { "local".into() } else { format!("w{i}") },
            limit_bytes: m * MIB as i64,
        })
        .collect()
}

fn layers(p: &SplitPlan) -> Vec<(u32, bool)> {
    p.shares.iter().map(|s| (s.layers, s.output)).collect()
}

#[test]
fn smollm2_costs_match_what_llama_server_printed() {
    let c = smol();
    // why: 10 layers on RPC0 printed "model buffer size = 21.14 MiB" (2.11 MiB
    // each); the file's rest over 30 layers is within 3 % of it
    assert_eq!(c.layers, 30);
    assert!(
        (c.layer_bytes as f64 / MIB as f64 - 2.11).abs() < 0.07,
        "{}",
        c.layer_bytes
    );
    // why: RPC1 ran the output layer: 49.83 - 21.14 = 28.69 MiB, the token_embd copy
    assert_eq!(c.output_remote_bytes, 30_081_024);
    assert_eq!(c.output_local_bytes, 0);
    // why: 10 layers' KV at 4096 printed 30.00 MiB
    assert_eq!(10 * 4096 * c.kv_per_token_layer, 30 * MIB);
}

/// (limits MiB, trained, cap, pin, ctx, layers per device, fits)
type Row<'a> = (
    &'a [i64],
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Window,
    &'a [(u32, bool)],
    bool,
);

/// Splits each row over SmolLM2 and checks its window, its layers per
/// device, whether it fits, that every layer is placed, and that no device
/// of a plan that fits is over its limit.
fn check(rows: &[Row]) {
    let c = smol();
    for (i, (limits, trained, cap, pin, window, want, fits)) in rows.iter().enumerate() {
        let p = split(&c, *trained, &devices(limits), *cap, *pin, true);
        assert_eq!(p.window, *window, "row {i}: window");
        assert_eq!(layers(&p), *want, "row {i}: layers");
        assert_eq!(p.fits, *fits, "row {i}: fits");
        assert_eq!(
            p.shares.iter().map(|s| s.layers).sum::<u32>(),
            30,
            "row {i}: every layer placed"
        );
        if *fits {
            for s in &p.shares {
                assert!(
                    s.total_bytes() as i64 <= s.limit_bytes,
                    "row {i}: {} over its limit",
                    s.name
                );
            }
        }
    }
}

/// Layers go by capacity, the output to the last device that can hold its copy.
#[test]
fn split_rows_place_layers_by_capacity() {
    let rows: &[Row] = &[
        // why: room everywhere: the trained window, layers by capacity, the
        // output on the last worker
        (
            &[4096, 4096, 4096],
            Some(8192),
            None,
            None,
            sized(8192, false, 12288),
            &[(10, false), (10, false), (10, true)],
            true,
        ),
        // why: a 600 MiB machine holds 19 layers at 8192, two 512 MiB workers
        // 14 and 11 (the output's copy): 44 >= 30, so 8192 is reached
        (
            &[450, 384, 384],
            Some(8192),
            None,
            None,
            sized(8192, false, 1218),
            &[(13, false), (10, false), (7, true)],
            true,
        ),
        // why: the last worker cannot hold the output's copy (290 - 264 MiB of
        // compute leaves less than its 28.7 MiB): the one before runs it, and
        // with the local 19 layers its 11 are all 30; the last gets nothing
        (
            &[450, 384, 290],
            Some(8192),
            None,
            None,
            sized(8192, false, 1124),
            &[(19, false), (11, true), (0, false)],
            true,
        ),
        // why: one device alone is the one-machine law (the output local)
        (
            &[4096],
            Some(8192),
            None,
            None,
            sized(8192, false, 4096),
            &[(30, true)],
            true,
        ),
    ];
    check(rows);
}

/// The brake's cap and a pin bound the window; under the floor nothing loads.
#[test]
fn split_rows_fold_in_the_cap_the_pin_and_the_floor() {
    let rows: &[Row] = &[
        // why: the brake's cap folds in
        (
            &[4096, 4096, 4096],
            Some(8192),
            Some(4096),
            None,
            sized(4096, true, 12288),
            &[(10, false), (10, false), (10, true)],
            true,
        ),
        // why: a pin is the window, whatever memory says
        (
            &[4096, 4096],
            Some(8192),
            None,
            Some(6000),
            Window::Pinned { ctx: 6000 },
            &[(15, false), (15, true)],
            true,
        ),
        // why: nothing holds even the floor: said, not loaded
        (
            &[200, 200],
            Some(8192),
            None,
            None,
            sized(4096, true, 0),
            &[(15, false), (15, true)],
            false,
        ),
    ];
    check(rows);
}

fn sized(ctx: u32, memory_bound: bool, limit_mib: i64) -> Window {
    Window::Sized {
        ctx,
        memory_bound,
        budget_bytes: limit_mib * MIB as i64,
    }
}

#[test]
fn the_window_is_the_largest_that_fits_and_one_step_more_does_not() {
    let c = smol();
    for limits in [&[450i64, 300, 300][..], &[380, 380], &[500]] {
        let d = devices(limits);
        let p = split(&c, None, &d, None, None, true);
        let ctx = p.window.ctx().unwrap();
        assert!(p.fits, "{limits:?}");
        assert!(layout(&c, &d, ctx).is_some());
        assert!(
            layout(&c, &d, ctx + caps::WINDOW_GRID_TOKENS).is_none(),
            "{limits:?} at {ctx}"
        );
    }
}

#[test]
fn alone_it_agrees_with_the_cpu_law_within_a_grid_step() {
    let f = {
        let mut f = smollm2();
        f.token_embd_bytes = 30_081_024;
        f.trained_window = None;
        f
    };
    let c = layer_costs(&f, kv_bytes_per_token(&f));
    let shape = window::shape_of(&f, 0);
    for ram_mib in [700u64, 1024, 4096] {
        let cpu = window::cpu(&shape, ram_mib * MIB, None, None).ctx().unwrap();
        let d = vec![Device {
            name: "local".into(),
            limit_bytes: ram_limit(ram_mib * MIB),
        }];
        let ours = split(&c, None, &d, None, None, true).window.ctx().unwrap();
        assert!(
            ours >= cpu && ours <= cpu + caps::WINDOW_GRID_TOKENS,
            "{ram_mib} MiB: {ours} vs {cpu}"
        );
    }
}

#[test]
fn tensor_split_and_gpu_layers_follow_llama_cpp_placement() {
    let p = split(&smol(), Some(8192), &devices(&[450, 384, 384]), None, None, true);
    // why: 13 local layers stay on the CPU: -ngl = 30 + 1 - 13
    assert_eq!(p.gpu_layers(), 18);
    // why: the output layer counts as one on the worker that runs it
    let split: Vec<u32> = p.shares[1..].iter().map(|s| s.layers + u32::from(s.output)).collect();
    assert_eq!(split, vec![10, 8]);
}

#[test]
fn limits_follow_each_devices_rule() {
    // why: the CPU share of 1 GiB
    assert_eq!(ram_limit(1024 * MIB), 768 * MIB as i64);
    // why: 80 GB card, 70 GB free: min(72, 70) - 1 - 0.5 GiB
    let gib = 1024 * MIB;
    assert_eq!(vram_limit(80 * gib, 70 * gib), (70 * gib - gib - gib / 2) as i64);
}
