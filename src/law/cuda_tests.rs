//! Table tests of the CUDA law (`law::cuda`).

use super::*;
use crate::law::window::GIB;

fn dev(index: u32, uuid: &str, total_gib: u64) -> GpuDevice {
    GpuDevice {
        index,
        uuid: uuid.into(),
        name: format!("card{index}"),
        total_bytes: total_gib * GIB,
        free_bytes: total_gib * GIB - GIB,
    }
}

fn two() -> Vec<GpuDevice> {
    vec![dev(0, "GPU-aaaa1111-0000", 8), dev(1, "GPU-bbbb2222-0000", 24)]
}

#[test]
fn visible_devices_rows() {
    let d = two();
    let idx = |v: Vec<&GpuDevice>| v.iter().map(|d| d.index).collect::<Vec<_>>();
    let rows: &[(Option<&str>, &[u32])] = &[
        // why: unset and empty both mean every device
        (None, &[0, 1]),
        (Some(""), &[0, 1]),
        // why: integers are NVML indexes
        (Some("1"), &[1]),
        // why: UUIDs match by prefix, with or without the GPU- prefix, any case
        (Some("GPU-bbbb"), &[1]),
        (Some("aaaa1111"), &[0]),
        (Some("gpu-AAAA"), &[0]),
        // why: several, in the user's order
        (Some("1,0"), &[1, 0]),
        // why: CUDA stops at the first entry it cannot find
        (Some("1,7,0"), &[1]),
        (Some("-1"), &[]),
    ];
    for (i, (spec, want)) in rows.iter().enumerate() {
        assert_eq!(idx(visible(&d, *spec)), *want, "row {i}: {spec:?}");
    }
}

#[test]
fn the_spawn_matrix() {
    let d = two();
    // why: unset: the largest card, pinned by UUID
    assert_eq!(
        place(&d, None),
        CudaPlacement::Sized {
            device: d[1].clone(),
            pin: Some("GPU-bbbb2222-0000".into())
        }
    );
    // why: the user names one: sized on it, their value untouched
    assert_eq!(
        place(&d, Some("0")),
        CudaPlacement::Sized {
            device: d[0].clone(),
            pin: None
        }
    );
    // why: several named: no sizing, brake off
    assert_eq!(place(&d, Some("0,1")), CudaPlacement::Unsized);
    // why: nothing visible
    assert_eq!(place(&d, Some("GPU-ffff")), CudaPlacement::NoDevice);
    assert_eq!(place(&[], None), CudaPlacement::NoDevice);
    // why: on equal sizes the lower index wins (stable)
    let twins = vec![dev(0, "GPU-a", 24), dev(1, "GPU-b", 24)];
    assert!(matches!(place(&twins, None), CudaPlacement::Sized { device, .. } if device.index == 0));
}

#[test]
fn the_vram_override_stands_in_for_free_memory() {
    let d = dev(0, "GPU-a", 24);
    let v = vram_for_sizing(&d, Some(200 * GIB));
    // why: larger than the card: the total follows it (the OOM-retry proof)
    assert_eq!((v.total_bytes, v.free_bytes), (200 * GIB, 200 * GIB));
    let v = vram_for_sizing(&d, Some(4 * GIB));
    assert_eq!((v.total_bytes, v.free_bytes), (24 * GIB, 4 * GIB));
    let v = vram_for_sizing(&d, None);
    assert_eq!((v.total_bytes, v.free_bytes), (24 * GIB, 23 * GIB));
}

#[test]
fn out_of_memory_retry_rows() {
    let oom = cuda_oom(&["ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: cudaMalloc failed: out of memory".into()]);
    assert!(oom);
    assert!(
        !cuda_oom(&["failed to allocate buffer".into()]),
        "a host failure is not a CUDA OOM"
    );
    let rows = [
        // (sized, pinned, respawn, window, oom, retry, why)
        (true, false, false, Some(131_072), true, true), // why: the one retry
        (false, false, false, None, true, false),        // why: fit-sized: not retried
        (true, true, false, Some(131_072), true, false), // why: a user pin: not retried
        (true, false, true, Some(131_072), true, false), // why: a brake respawn: not retried
        (true, false, false, Some(4096), true, false),   // why: already at the floor
        (true, false, false, Some(131_072), false, false), // why: another failure
    ];
    for (i, (sized, pinned, respawn, window, oom, want)) in rows.into_iter().enumerate() {
        assert_eq!(retry_at_floor(sized, pinned, respawn, window, oom), want, "row {i}");
    }
}

#[test]
#[allow(clippy::type_complexity)] // table rows are wide tuples on purpose
fn placement_rows() {
    let l = |s: &str| vec![s.to_string()];
    assert_eq!(
        offloaded_line(&l("load_tensors: offloaded 31/31 layers to GPU")),
        Some((31, 31))
    );
    assert_eq!(
        offloaded_line(&[
            "load_tensors: offloaded 0/31 layers to GPU".into(),
            "load_tensors: offloaded 20/31 layers to GPU".into()
        ]),
        Some((20, 31)),
        "the last line wins (fit's probe prints first)"
    );
    assert_eq!(offloaded_line(&l("nothing here")), None);
    let floor = full_offload_floor(1000 * MIB, 100 * MIB, 0, Some(200 * MIB));
    assert_eq!(floor, 1100 * MIB);
    let rows: &[(Option<(u32, u32)>, Option<u64>, Offload)] = &[
        // why: the line decides when present
        (Some((31, 31)), Some(0), Offload::Full),
        (Some((20, 31)), Some(10 * GIB), Offload::Partial),
        // why: device bytes over the floor: full
        (None, Some(1200 * MIB), Offload::Full),
        // why: a layer plus 64 MiB missing: partial
        (None, Some(900 * MIB), Offload::Partial),
        // why: 90 MiB missing, within a 30 MiB layer plus the 64 MiB slack: full
        (None, Some(1010 * MIB), Offload::Full),
        // why: no signal at all: assumed full
        (None, None, Offload::Full),
    ];
    for (i, (line, bytes, want)) in rows.iter().enumerate() {
        assert_eq!(classify_placement(*line, *bytes, floor, 30 * MIB).0, *want, "row {i}");
    }
}

#[test]
fn device_check_and_spill_rows() {
    // why: x1.1 of the parts plus 256 MiB
    assert_eq!(
        device_check_limit(1000 * MIB, 100 * MIB, 512 * MIB, 388 * MIB),
        2200 * MIB + 256 * MIB
    );
    // why: #661's healthy levels: 128 MiB + 1 KiB/token with FA, 2 KiB without
    assert_eq!(healthy_shared_bytes(8192, true), 136 * MIB);
    assert_eq!(healthy_shared_bytes(8192, false), 144 * MIB);
    // why: the baseline is the load reading bounded by the healthy level, never 0
    assert_eq!(spill_baseline(Some(90 * MIB), 136 * MIB), 90 * MIB);
    assert_eq!(spill_baseline(Some(500 * MIB), 136 * MIB), 136 * MIB);
    assert_eq!(spill_baseline(None, 136 * MIB), 136 * MIB);
    let base = 136 * MIB;
    let rows = [
        (base + 100 * MIB, Level::Calm),      // why: a small spill is no damage
        (base + 256 * MIB, Level::Warning),   // why: the warning tier
        (base + 1024 * MIB, Level::Critical), // why: the critical tier
        (50 * MIB, Level::Calm),              // why: under the baseline
    ];
    for (i, (shared, want)) in rows.into_iter().enumerate() {
        assert_eq!(spill_level(shared, base), want, "row {i}");
    }
}

#[test]
fn preflight_rows() {
    let rows = [
        // (devices, driver, build, cuda build present, falls back)
        (0, Some((13, 0)), Some((12, 4)), true, true),  // why: no device
        (1, Some((13, 0)), Some((12, 4)), false, true), // why: no CUDA build
        (1, Some((12, 2)), Some((12, 4)), true, true),  // why: the driver is too old for the build
        (1, Some((13, 0)), Some((12, 4)), true, false), // why: all good
        (1, None, Some((12, 4)), true, false),          // why: an unreadable driver version is not a reason
    ];
    for (i, (n, driver, build, present, falls_back)) in rows.into_iter().enumerate() {
        assert_eq!(preflight(n, driver, build, present).is_some(), falls_back, "row {i}");
    }
}

#[test]
fn device_excess_rows() {
    let f = crate::law::kv::tests::smollm2();
    // SmolLM2 at 8192 tokens: KV 180 MiB, compute 8 MiB + 256 MiB with FA
    // (144 MiB + 256 MiB without: 512 x 9 heads x 4 B = 18,432 B per token).
    let limit = |compute: u64| device_check_limit(180 * MIB, compute, 512 * MIB, f.weights_bytes);
    let (fa, no_fa) = (limit(264 * MIB), limit(400 * MIB));
    let rows = [
        // why: within the FA limit
        (true, Some(fa), None),
        // why: above it: the figures the WARNING prints
        (true, Some(fa + 1), Some((fa + 1, fa))),
        // why: without FA the non-FA scores are allowed for
        (false, Some(fa + 1), None),
        (false, Some(no_fa + 1), Some((no_fa + 1, no_fa))),
        // why: NVML did not say: nothing to check
        (true, None, None),
    ];
    for (i, (runs, held, want)) in rows.into_iter().enumerate() {
        let got = device_excess(&f, 8192, runs, held).map(|e| (e.held_bytes, e.limit_bytes));
        assert_eq!(got, want, "row {i}");
    }
}

#[test]
fn flash_attention_rows() {
    let lines = |ls: &[&str]| ls.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let on = "llama_context: Flash Attention enabled";
    let off = "llama_context: Flash Attention not supported, set to disabled";
    let rows = [
        // why: proven and llama.cpp agrees
        (true, lines(&[on]), (true, false)),
        // why: proven but llama.cpp disabled it: the window is on the wrong slope
        (true, lines(&[off]), (false, true)),
        // why: the last line wins (fit's probe pass prints one first)
        (true, lines(&[off, "x", on]), (true, false)),
        (true, lines(&[on, off]), (false, true)),
        // why: no line reached the output: the static proof
        (true, lines(&["other"]), (true, false)),
        (false, lines(&[]), (false, false)),
        // why: the spec: what llama.cpp logged decides, even against the proof
        (false, lines(&[on]), (true, false)),
        // why: not proven and off: sized on the non-FA slope, nothing to say
        (false, lines(&[off]), (false, false)),
    ];
    for (i, (proven, tail, want)) in rows.into_iter().enumerate() {
        let fa = flash_attention(proven, &tail);
        assert_eq!((fa.runs, fa.wrong_slope), want, "row {i}");
    }
}

#[test]
fn spill_at_load_rows() {
    const M: u64 = 1 << 20;
    let rows = [
        // why: above the healthy level: said
        (Some(300 * M), 200 * M, Some(300 * M)),
        // why: at the healthy level: nothing to say
        (Some(200 * M), 200 * M, None),
        (Some(10 * M), 200 * M, None),
        // why: an unread gauge says nothing
        (None, 200 * M, None),
    ];
    for (i, (reading, healthy, want)) in rows.into_iter().enumerate() {
        assert_eq!(spill_at_load_excess(reading, healthy), want, "row {i}");
    }
}

/// Windows' device bytes: Dedicated plus the Shared above the healthy
/// amount (a spill at load is not a missing layer).
#[test]
fn device_bytes_where_only_dedicated_and_shared_are_known() {
    let rows = [
        // (dedicated, shared, healthy, device bytes, why)
        (6 * GIB, 100 * MIB, 136 * MIB, 6 * GIB, "a healthy Shared adds nothing"),
        (6 * GIB, 636 * MIB, 136 * MIB, 6 * GIB + 500 * MIB, "500 MiB spilled count as held"),
        (0, 0, 136 * MIB, 0, "nothing read as nothing"),
    ];
    for (d, s, h, want, why) in rows {
        assert_eq!(device_bytes_on_spill(d, s, h), want, "{why}");
    }
}
