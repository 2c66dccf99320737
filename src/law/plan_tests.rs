//! Table tests of the one plan (`law::plan`).
#![allow(clippy::type_complexity)] // table rows are wide tuples on purpose

use super::*;
use crate::law::kv::tests::{gemma3, smollm2};
use crate::law::types::RamSource;
use crate::law::window::{GIB, MIB};

fn ram(bytes: u64) -> RamTotal {
    RamTotal {
        bytes,
        source: RamSource::Physical,
    }
}

fn cpu(ram_bytes: u64, mmproj_bytes: u64) -> Readings {
    Readings {
        ram: ram(ram_bytes),
        mmproj_bytes,
        beside_bytes: 0,
        slots: 1,
        engine: EngineReadings::Cpu,
    }
}

fn card(index: u32, total_gib: u64, free_gib: u64) -> GpuDevice {
    GpuDevice {
        index,
        uuid: format!("GPU-{index}"),
        name: format!("card{index}"),
        total_bytes: total_gib * GIB,
        free_bytes: free_gib * GIB,
    }
}

fn gpus(devices: Result<Vec<GpuDevice>, &str>, user: Option<&str>, vram_override: Option<u64>) -> Readings {
    Readings {
        ram: ram(GIB),
        mmproj_bytes: 0,
        beside_bytes: 0,
        slots: 1,
        engine: EngineReadings::Cuda(GpuReadings {
            devices: devices.map_err(str::to_string),
            user_visible: user.map(str::to_string),
            vram_override_bytes: vram_override,
        }),
    }
}

/// An 8 GiB card with 7 GiB free: SmolLM2's trained window fits many times.
fn roomy() -> Result<Vec<GpuDevice>, &'static str> {
    Ok(vec![card(0, 8, 7)])
}

/// SmolLM2's shape with ALiBi: no Flash Attention, the non-FA slope
/// (512 x 9 heads x 4 B = 18,432 B per token).
fn alibi() -> ModelFacts {
    ModelFacts {
        max_alibi_bias: Some(8.0),
        ..smollm2()
    }
}

/// The placement as a short word: `-` (not CUDA), `fit` (no GPU to size
/// on), `none` (no device), `cardN` (+ ` pinned` when the warden pins it).
fn placed(p: &Plan) -> String {
    match p.cuda.as_ref().map(|c| &c.placement) {
        None => "-".into(),
        Some(CudaPlacement::Unsized) => "fit".into(),
        Some(CudaPlacement::NoDevice) => "none".into(),
        Some(CudaPlacement::Sized { device, pin }) => {
            format!("{}{}", device.name, if pin.is_some() { " pinned" } else { "" })
        }
    }
}

/// name, facts, readings, brake cap, user pin, want (ctx, memory-bound, placement)
type Row = (
    &'static str,
    Option<ModelFacts>,
    Readings,
    Option<u32>,
    Option<u32>,
    (Option<u32>, bool, &'static str),
);

fn check(rows: Vec<Row>) {
    for (i, (name, facts, readings, cap, pin, want)) in rows.iter().enumerate() {
        let p = plan(facts.as_ref(), readings, *cap, *pin);
        let got = (p.window.ctx(), p.window.memory_bound().is_some(), placed(&p));
        assert_eq!(got, (want.0, want.1, want.2.to_string()), "row {i} ({name}): {p:?}");
    }
}

/// A CPU window is sized on RAM less the projector, under the cap, and a
/// pin or a missing header decides it outright.
#[test]
fn cpu_rows() {
    check(vec![
        // why: 24 GiB of RAM holds SmolLM2's whole trained window
        (
            "cpu roomy",
            Some(smollm2()),
            cpu(24 * GIB, 0),
            None,
            None,
            (Some(8192), false, "-"),
        ),
        // why: 0.65 GiB: 156,651,250 B / 24,064 B = 6509 -> 6400, memory-bound
        (
            "cpu tight",
            Some(smollm2()),
            cpu(GIB * 65 / 100, 0),
            None,
            None,
            (Some(6400), true, "-"),
        ),
        // why: a 20 MiB projector comes out of the same budget: 135,679,730 B / 24,064 B -> 5632
        (
            "cpu mmproj",
            Some(smollm2()),
            cpu(GIB * 65 / 100, 20 * MIB),
            None,
            None,
            (Some(5632), true, "-"),
        ),
        // why: the brake's cap folds in under the memory window
        (
            "cpu cap",
            Some(smollm2()),
            cpu(24 * GIB, 0),
            Some(5120),
            None,
            (Some(5120), false, "-"),
        ),
        // why: a pin wins over memory and cap alike, off the grid too
        (
            "cpu pin",
            Some(smollm2()),
            cpu(GIB / 8, 0),
            Some(5120),
            Some(8000),
            (Some(8000), false, "-"),
        ),
        // why: no header, no -c: the child sizes itself
        ("cpu no facts", None, cpu(24 * GIB, 0), None, None, (None, false, "-")),
        // why: no header but a pin: the pin is passed
        (
            "cpu no facts pin",
            None,
            cpu(24 * GIB, 0),
            None,
            Some(4096),
            (Some(4096), false, "-"),
        ),
        // why: the full-size sliding cache would bind Gemma at 14,336 on 1 GiB: the small one gives its trained window
        (
            "cpu gemma 1G",
            Some(gemma3()),
            cpu(GIB, 0),
            None,
            None,
            (Some(32_768), false, "-"),
        ),
        // why: a sliding hybrid keeps its small cache: the formula over-estimates it, never memory-bound
        (
            "cpu sliding hybrid 1G",
            Some(ModelFacts {
                architecture: "jamba".into(),
                ..gemma3()
            }),
            cpu(GIB, 0),
            None,
            None,
            (Some(14_336), false, "-"),
        ),
    ]);
}

/// A CUDA window is sized on the chosen card's free memory (or the
/// override), with the FA or non-FA slope, under the cap.
#[test]
fn cuda_sizing_rows() {
    check(vec![
        // why: the card's free memory dwarfs the model: trained binds; pinned by UUID
        (
            "cuda roomy",
            Some(smollm2()),
            gpus(roomy(), None, None),
            None,
            None,
            (Some(8192), false, "card0 pinned"),
        ),
        // why: 2 GiB free: ceiling 1 GiB - weights - 768 MiB = 170,073,024 B / (23,040 + 1,024) = 7067 -> 6912
        (
            "cuda tight",
            Some(smollm2()),
            gpus(Ok(vec![card(0, 8, 2)]), None, None),
            None,
            None,
            (Some(6912), true, "card0 pinned"),
        ),
        // why: no Flash Attention (ALiBi): the same budget at 23,040 + 18,432 B per token = 4100 -> 4096
        (
            "cuda non-FA slope",
            Some(alibi()),
            gpus(Ok(vec![card(0, 8, 2)]), None, None),
            None,
            None,
            (Some(4096), true, "card0 pinned"),
        ),
        // why: WARDEN_VRAM_OVERRIDE_GB stands in for the free memory (2 GiB, as "cuda tight")
        (
            "cuda override",
            Some(smollm2()),
            gpus(roomy(), None, Some(2 * GIB)),
            None,
            None,
            (Some(6912), true, "card0 pinned"),
        ),
        // why: the cap folds in on CUDA too
        (
            "cuda cap",
            Some(smollm2()),
            gpus(roomy(), None, None),
            Some(4608),
            None,
            (Some(4608), false, "card0 pinned"),
        ),
    ]);
}

/// Which card a CUDA load is sized on and whether the warden pins it.
#[test]
fn cuda_placement_rows() {
    let two = Ok(vec![card(0, 8, 7), card(1, 24, 23)]);
    check(vec![
        // why: the largest card is sized on and pinned
        (
            "cuda two cards",
            Some(smollm2()),
            gpus(two.clone(), None, None),
            None,
            None,
            (Some(8192), false, "card1 pinned"),
        ),
        // why: the user's one device is sized on and left unpinned (their value is passed)
        (
            "cuda user one",
            Some(smollm2()),
            gpus(two.clone(), Some("0"), None),
            None,
            None,
            (Some(8192), false, "card0"),
        ),
        // why: several devices named by the user: no sizing, fit sizes the window
        (
            "cuda user two",
            Some(smollm2()),
            gpus(two.clone(), Some("0,1"), None),
            None,
            None,
            (None, false, "fit"),
        ),
        // why: several devices named and a pin: the pin is passed
        (
            "cuda user two pin",
            Some(smollm2()),
            gpus(two, Some("0,1"), None),
            None,
            Some(6000),
            (Some(6000), false, "fit"),
        ),
        // why: NVML unreadable: no GPU to size on, fit sizes the window
        (
            "cuda no nvml",
            Some(smollm2()),
            gpus(Err("NVML is unavailable"), None, None),
            None,
            None,
            (None, false, "fit"),
        ),
        // why: a device the user names that NVML does not see: nothing to size on
        (
            "cuda no device",
            Some(smollm2()),
            gpus(roomy(), Some("7"), None),
            None,
            None,
            (None, false, "none"),
        ),
    ]);
}

/// MLX is never sized at spawn.
#[test]
fn mlx_rows() {
    check(vec![
        // why: MLX sizes nothing at spawn, whatever the memory
        (
            "mlx",
            Some(smollm2()),
            Readings {
                engine: EngineReadings::Mlx,
                ..cpu(GIB / 8, 0)
            },
            None,
            None,
            (None, false, "-"),
        ),
    ]);
}

#[test]
fn budgets_static_windows_and_the_fa_proof() {
    let tight = gpus(Ok(vec![card(0, 8, 2)]), None, None);
    let rows: Vec<(
        &str,
        Option<ModelFacts>,
        Readings,
        Option<u32>,
        Option<i64>,
        Option<(Option<u32>, bool)>,
    )> = vec![
        // why: the CPU budget is 0.75 x RAM - weights - 256 MiB, shown even under a pin
        (
            "cpu pinned",
            Some(smollm2()),
            cpu(GIB * 65 / 100, 0),
            Some(8000),
            Some(156_651_250),
            None,
        ),
        // why: the CUDA budget; the static window is the uncapped one, FA proven for 64/64 heads
        (
            "cuda",
            Some(smollm2()),
            tight.clone(),
            None,
            Some(170_073_024),
            Some((Some(6912), true)),
        ),
        // why: ALiBi disproves Flash Attention; same budget, the non-FA window
        (
            "cuda alibi",
            Some(alibi()),
            tight,
            None,
            Some(170_073_024),
            Some((Some(4096), false)),
        ),
        // why: no GPU to size on: no budget, no static window
        (
            "cuda fit",
            Some(smollm2()),
            gpus(Err("no NVML"), None, None),
            None,
            None,
            Some((None, true)),
        ),
        // why: no header: nothing sized, and nothing proves Flash Attention
        (
            "cuda no facts",
            None,
            gpus(roomy(), None, None),
            None,
            None,
            Some((None, false)),
        ),
        // why: MLX sizes nothing
        (
            "mlx",
            Some(smollm2()),
            Readings {
                engine: EngineReadings::Mlx,
                ..cpu(GIB, 0)
            },
            None,
            None,
            None,
        ),
    ];
    for (i, (name, facts, readings, pin, budget, cuda_want)) in rows.iter().enumerate() {
        let p = plan(facts.as_ref(), readings, Some(4608), *pin);
        let got = p.cuda.as_ref().map(|c| (c.static_window, c.flash_attention));
        assert_eq!((p.budget_bytes, got), (*budget, *cuda_want), "row {i} ({name}): {p:?}");
    }
}

#[test]
fn cuda_respawn_window_rows() {
    let sized = |ctx| {
        Some(Window::Sized {
            ctx,
            memory_bound: false,
            budget_bytes: 0,
        })
    };
    let rows = [
        // why: the cap folds into the static window
        ((Some(16_384), 8192, None), sized(8192)),
        // why: a cap off the grid is rounded down (5000 -> 4864)
        ((Some(16_384), 5000, None), sized(4864)),
        // why: a cap above the static window changes nothing
        ((Some(8192), 16_384, None), sized(8192)),
        // why: never under the 4096 floor
        ((Some(16_384), 2000, None), sized(4096)),
        // why: a load the law did not size keeps its window (fit's, no -c)
        ((None, 8192, None), None),
        // why: a pinned window is never resized
        ((Some(16_384), 8192, Some(8000)), None),
    ];
    for (i, ((st, cap, pin), want)) in rows.into_iter().enumerate() {
        assert_eq!(cuda_respawn_window(st, cap, pin), want, "row {i}");
    }
}

/// Beside other residents the window is sized as if their bytes were more
/// weights of this model, on the CPU and on the card alike, while the
/// plan's shape stays the model's own (its footprint is its own).
#[test]
fn a_plan_beside_residents_sizes_on_what_they_leave() {
    let beside = |readings: Readings, bytes: u64| Readings {
        beside_bytes: bytes,
        ..readings
    };
    let facts = smollm2();
    let shape = window::shape_of(&facts, 0);
    // why: on 1 GiB alone SmolLM2 gets its trained 8192; beside 300 MiB it is memory-bound
    let alone = plan(Some(&facts), &cpu(GIB, 0), None, None);
    let crowded = plan(Some(&facts), &beside(cpu(GIB, 0), 300 * MIB), None, None);
    assert_eq!(alone.window.ctx(), Some(8192));
    let want = window::cpu(
        &ModelShape {
            weights_bytes: shape.weights_bytes + 300 * MIB,
            ..shape
        },
        GIB,
        None,
        None,
    );
    assert_eq!(crowded.window, want);
    assert!(crowded.window.ctx() < alone.window.ctx());
    assert_eq!(crowded.shape, alone.shape, "the shape is the model's own");
    assert_eq!(
        crowded.budget_bytes,
        alone.budget_bytes.map(|b| b - (300 * MIB) as i64),
        "the budget loses exactly what the residents hold"
    );
    // why: on a card the free memory already excludes the residents, so
    // beside 2 GiB of them the budget loses 2 GiB only from the 0.9 share
    let card_alone = plan(Some(&facts), &gpus(Ok(vec![card(0, 8, 5)]), None, None), None, None);
    let card_beside = plan(
        Some(&facts),
        &beside(gpus(Ok(vec![card(0, 8, 5)]), None, None), 2 * GIB),
        None,
        None,
    );
    let (a, b) = (card_alone.budget_bytes.unwrap(), card_beside.budget_bytes.unwrap());
    // min(0.9 x 8, 5) - ... alone; min(0.9 x 8 - 2, 5 + 2 - 2) beside: 5 GiB either way
    assert_eq!(a, b, "free memory already excludes the residents: {a} vs {b}");
    let card_full = plan(
        Some(&facts),
        &beside(gpus(Ok(vec![card(0, 8, 2)]), None, None), 6 * GIB),
        None,
        None,
    );
    // why: 0.9 x 8 GiB - 6 GiB held = 1.2 GiB < the 2 GiB free: the share binds
    let share_bound = ((8 * GIB) as f64 * window::CUDA_VRAM_FRACTION) as i64 - (6 * GIB) as i64;
    let alone_two = plan(Some(&facts), &gpus(Ok(vec![card(0, 8, 2)]), None, None), None, None);
    assert_eq!(
        alone_two.budget_bytes.unwrap() - card_full.budget_bytes.unwrap(),
        (2 * GIB) as i64 - share_bound,
        "beside 6 GiB of residents the 0.9 share, not the free memory, binds"
    );
}

/// A sliding model keeps the full-size sliding cache (its conversations
/// kept across unloads) where that costs no window, and otherwise the
/// small cache with the window its exact formula gives, when larger.
#[test]
fn a_sliding_model_keeps_the_full_cache_only_where_it_costs_no_window() {
    let at = |ram: u64, slots: u32, pin: Option<u32>| {
        let p = plan(Some(&gemma3()), &Readings { slots, ..cpu(ram, 0) }, None, pin);
        (p.window.ctx(), p.window.memory_bound().is_some(), p.swa)
    };
    use crate::law::kv::SwaCache::{Full, Window};
    for (ram, slots, pin, want, why) in [
        (24 * GIB, 1, None, (Some(32_768), false, Full), "room for the full cache at the trained window"),
        (GIB, 1, None, (Some(32_768), false, Window), "the full cache binds at 14,336: the small one reaches 32,768"),
        (GIB, 4, None, (Some(32_768), false, Window), "four slots' sliding cells still fit"),
        (720 * MIB, 1, None, (Some(6_912), true, Window), "both bind: the small cache's window is larger"),
        (512 * MIB, 1, None, (Some(4_096), true, Full), "nothing fits either way: the floor, kept full"),
        (GIB, 1, Some(16_384), (Some(16_384), false, Full), "a pinned window is the user's: the full cache"),
    ] {
        assert_eq!(at(ram, slots, pin), want, "{why}");
    }
    // The small cache's plan carries its own shape: the footprint is what
    // the child holds (the full layers per token, the sliding cells fixed).
    let p = plan(Some(&gemma3()), &cpu(GIB, 0), None, None);
    let s = p.shape.unwrap();
    assert_eq!(s.kv_per_token, 3 * 1024);
    assert_eq!(s.weights_bytes, gemma3().weights_bytes + 15 * MIB);
}
