//! The CUDA engine on a machine without a GPU: a fixed GPU list stands in
//! for NVML and the fake child for llama-server (a test double; the real
//! proof on an H200 is `scripts/gpu-proof.sh`). Proven here: the argv
//! (`-c <window> -ngl -1 -fitt 1024`), UUID pinning and a user's
//! `CUDA_VISIBLE_DEVICES` left untouched, the one out-of-memory retry at the
//! floor, a partial placement turning the brake off, and every rule of the
//! spill brake through the QA seam on a pretended spill platform (and
//! nothing at all without it, as on Linux).

use crate::support;

use std::path::Path;

use llm_warden::Notice;
use llm_warden::config::ForcedPressure;
use llm_warden::engines::{Backend, CudaEngine, GpuSource};
use llm_warden::law::cuda::GpuDevice;
use llm_warden::status::WardenEvent;
use llm_warden::{Warden, WardenConfig};
use serde_json::{Value, json};
use support::*;

const GIB: u64 = 1 << 30;

/// An 8 GiB card (7 GiB free): the heavy model's 16384-token window (2 GiB
/// of KV, more than 10 % of the card) fits, and is the spill's cause.
fn card() -> GpuDevice {
    GpuDevice {
        index: 0,
        uuid: "GPU-1234abcd-5678".into(),
        name: "Test Card".into(),
        total_bytes: 8 * GIB,
        free_bytes: 7 * GIB,
    }
}

fn cuda_warden(dir: &Path, cfg: WardenConfig) -> Warden {
    let backend = Backend::Cuda(CudaEngine {
        server: fake_server(),
        gpus: GpuSource::Fixed(vec![card()]),
    });
    TestWarden::backend(backend, dir).config(cfg).start()
}

/// The spawns the fake recorded: (argv, its CUDA_VISIBLE_DEVICES).
fn spawns(log: &Path) -> Vec<(Vec<String>, Option<String>)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let argv = v["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            (argv, v["cuda_visible_devices"].as_str().map(str::to_string))
        })
        .collect()
}

fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    argv.iter()
        .position(|a| a == name)
        .and_then(|i| argv.get(i + 1))
        .map(String::as_str)
}

/// A load: the window sized on the card, the child pinned by UUID.
#[actix_rt::test]
async fn sized_on_the_card_and_pinned_by_uuid() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    heavy_model(dir.path(), "m", json!({"argv_log": log}));
    let w = cuda_warden(dir.path(), test_config());
    assert!(collect(w.submit(chat(None, 2, true)).unwrap()).await.done);
    let s = spawns(&log);
    let (argv, visible) = &s[0];
    assert_eq!(flag(argv, "-c"), Some("16384"));
    assert_eq!(flag(argv, "-ngl"), Some("-1"));
    assert_eq!(flag(argv, "-fitt"), Some("1024"));
    assert_eq!(visible.as_deref(), Some("GPU-1234abcd-5678"));
    assert_eq!(w.status().engine, llm_warden::status::EngineKind::Cuda);
    w.shutdown().await;
    // A user's CUDA_VISIBLE_DEVICES is never overridden.
    let cfg = WardenConfig {
        cuda_visible_devices: Some("0".into()),
        ..test_config()
    };
    let w = cuda_warden(dir.path(), cfg);
    assert!(collect(w.submit(chat(None, 2, true)).unwrap()).await.done);
    assert_eq!(spawns(&log)[1].1.as_deref(), Some("0"));
    w.shutdown().await;
}

/// `/v1/models` on the CUDA engine shows the CUDA plan (the card's window,
/// the UUID pin), the one the load then passes as `-c`.
#[actix_rt::test]
async fn models_show_the_cuda_plan_the_load_uses() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    heavy_model(dir.path(), "m", json!({"argv_log": log}));
    let w = cuda_warden(dir.path(), test_config());
    let base = serve_http(&w);
    let v: Value = json_of(llm_warden::child::client::shared_http_client().get(format!("{base}/v1/models"))).await;
    let plan = &v["data"][0]["plan"];
    assert_eq!(plan["context_tokens"], 16_384, "{plan}");
    assert_eq!(plan["cuda"]["placement"]["pin"], "GPU-1234abcd-5678", "{plan}");
    assert_eq!(plan["cuda"]["flash_attention"], true, "{plan}");
    assert!(collect(w.submit(chat(None, 2, true)).unwrap()).await.done);
    assert_eq!(flag(&spawns(&log)[0].0, "-c"), Some("16384"));
    w.shutdown().await;
}

/// CUDA out of memory at load: one retry at the 4096 floor (it loads);
/// failing there too, the curated load error.
#[actix_rt::test]
async fn out_of_memory_at_load_retries_once_at_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    heavy_model(
        dir.path(),
        "m",
        json!({"argv_log": log, "exit_on_ctx": {"16384": "cuda_oom"}}),
    );
    let w = cuda_warden(dir.path(), test_config());
    assert!(collect(w.submit(chat(None, 2, true)).unwrap()).await.done);
    let ctxs: Vec<String> = spawns(&log)
        .iter()
        .map(|(a, _)| flag(a, "-c").unwrap().to_string())
        .collect();
    assert_eq!(ctxs, ["16384", "4096"]);
    assert_eq!(w.status().context_tokens, Some(4096));
    w.shutdown().await;
    let dir = tempfile::tempdir().unwrap();
    heavy_model(
        dir.path(),
        "m",
        json!({"exit_on_ctx": {"16384": "cuda_oom", "4096": "cuda_oom"}}),
    );
    let w = cuda_warden(dir.path(), test_config());
    let t = collect(w.submit(chat(None, 2, true)).unwrap()).await;
    assert_eq!(
        t.error.expect("the second failure is the load error").code,
        "cuda_out_of_memory"
    );
    w.shutdown().await;
}

fn spill_cfg(tier: ForcedPressure) -> WardenConfig {
    WardenConfig {
        pretend_spill_platform: true,
        force_pressure: Some(tier),
        ..test_config()
    }
}

/// vram-critical on a spill platform: a shrink and an `-ngl -2` respawn at
/// the turn's end (acted), then two idle criticals: arm, unload.
#[actix_rt::test]
async fn critical_spill_shrinks_then_unloads() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    heavy_model(dir.path(), "m", json!({"argv_log": log}));
    let w = cuda_warden(dir.path(), spill_cfg(ForcedPressure::VramCritical));
    let t = collect(w.submit(chat(None, 2, true)).unwrap()).await;
    assert_eq!(
        t.notices.last(),
        Some(&Notice::MemoryWarning { reason: "acted" }),
        "{:?}",
        t.notices
    );
    let s = spawns(&log);
    assert_eq!(s.len(), 2);
    assert_eq!((flag(&s[1].0, "-c"), flag(&s[1].0, "-ngl")), (Some("8192"), Some("-2")));
    assert_eq!(s[1].1.as_deref(), Some("GPU-1234abcd-5678"), "the respawn stays pinned");
    w.brake_sample_now(calm_idle_reading()).await;
    assert!(w.status().child_pid.is_some(), "the first idle critical arms");
    w.brake_sample_now(calm_idle_reading()).await;
    assert_eq!(w.status().child_pid, None, "the second unloads");
    // The next message reloads at the cap, a fresh load: -ngl -1 again.
    let t = collect(w.submit(chat(None, 2, true)).unwrap()).await;
    assert_eq!(t.notices.first(), Some(&Notice::MemoryReload { reason: "brake" }));
    let s = spawns(&log);
    assert_eq!((flag(&s[2].0, "-c"), flag(&s[2].0, "-ngl")), (Some("8192"), Some("-1")));
    w.shutdown().await;
}

/// llama.cpp turned Flash Attention off at load: the healthy Shared level
/// is the non-FA one (2 KiB per token) for the baseline and for every
/// sample alike, so vram-critical still reads critical (with the static
/// proof's 1 KiB in the samples it read 16 MiB under the tier: a warning)
/// and the turn's end shrinks and respawns.
#[actix_rt::test]
async fn the_healthy_level_follows_the_flash_attention_llama_cpp_logged() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    heavy_model(dir.path(), "m", json!({"argv_log": log, "flash_attention_off": true}));
    let w = cuda_warden(dir.path(), spill_cfg(ForcedPressure::VramCritical));
    let t = collect(w.submit(chat(None, 2, true)).unwrap()).await;
    assert_eq!(
        t.notices.last(),
        Some(&Notice::MemoryWarning { reason: "acted" }),
        "{:?}",
        t.notices
    );
    let s = spawns(&log);
    assert_eq!(s.len(), 2, "a critical spill respawns at the turn's end: {s:?}");
    assert_eq!((flag(&s[1].0, "-c"), flag(&s[1].0, "-ngl")), (Some("8192"), Some("-2")));
    w.shutdown().await;
}

/// vram-warning: the shrink is decided at the turn's end (paging evidence:
/// a spill at a tier) and applied by an `-ngl -2` respawn at idle.
#[actix_rt::test]
async fn warning_spill_shrinks_once_the_user_is_away() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    heavy_model(dir.path(), "m", json!({"argv_log": log}));
    let w = cuda_warden(dir.path(), spill_cfg(ForcedPressure::VramWarning));
    assert!(collect(w.submit(chat(None, 2, true)).unwrap()).await.done);
    assert_eq!(spawns(&log).len(), 1, "nothing respawns while the user is here");
    assert_eq!(w.status().brake.state.pending_cap, Some(8192));
    w.brake_sample_now(calm_idle_reading()).await;
    let s = spawns(&log);
    assert_eq!((flag(&s[1].0, "-c"), flag(&s[1].0, "-ngl")), (Some("8192"), Some("-2")));
    w.shutdown().await;
}

/// Without a spill platform (Linux as it is), the seam's VRAM tiers do
/// nothing: nothing is read, nothing acts, no brake event.
#[actix_rt::test]
async fn linux_has_no_spill_and_the_brake_never_acts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    heavy_model(dir.path(), "m", json!({"argv_log": log}));
    let cfg = WardenConfig {
        force_pressure: Some(ForcedPressure::VramCritical),
        ..test_config()
    };
    let w = cuda_warden(dir.path(), cfg);
    let mut ev = w.subscribe();
    assert!(collect(w.submit(chat(None, 2, true)).unwrap()).await.done);
    for _ in 0..3 {
        w.brake_sample_now(calm_idle_reading()).await;
    }
    assert_eq!(spawns(&log).len(), 1);
    while let Ok(e) = ev.try_recv() {
        assert!(!matches!(e, WardenEvent::Brake { .. }), "{e:?}");
    }
    w.shutdown().await;
}

/// A partial offload (llama.cpp's `offloaded 20/33 layers`) turns the brake
/// off for that child: even critical spill does nothing.
#[actix_rt::test]
async fn a_partial_offload_turns_the_brake_off() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    heavy_model(dir.path(), "m", json!({"argv_log": log, "offloaded": "20/33"}));
    let w = cuda_warden(dir.path(), spill_cfg(ForcedPressure::VramCritical));
    let t = collect(w.submit(chat(None, 2, true)).unwrap()).await;
    assert!(
        t.notices.iter().all(|n| !matches!(n, Notice::MemoryWarning { .. })),
        "{:?}",
        t.notices
    );
    assert_eq!(spawns(&log).len(), 1);
    // The status says so: this child's brake is off, and why.
    let b = w.status().brake;
    assert!(!b.enabled, "{b:?}");
    assert!(
        b.off_reason.as_deref().is_some_and(|r| r.contains("partial offload")),
        "{b:?}"
    );
    w.shutdown().await;
}

/// An idle sample's reading as the sensor sends it, a calm RAM one: the CUDA
/// brake reads its spill gauge, never the RAM.
fn calm_idle_reading() -> Result<llm_warden::law::brake::Readings, llm_warden::sensors::view::BrakeOff> {
    Ok(llm_warden::law::brake::Readings {
        level: llm_warden::law::brake::Level::Calm,
        paging: Some(false),
        footprint_bytes: None,
    })
}

/// Several residents on one card (the fixed GPU list; its free memory does
/// not drop as fakes load, so the 0.9 share is what binds): two heavy
/// models get their trained 16384 each, a third is sized beside them into
/// what the share leaves (between the 4096 floor and 16384), and a fourth,
/// whose floor no longer fits, evicts the least recently used idle one.
#[actix_rt::test]
async fn residents_share_the_card_by_the_law() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("argv.log");
    for m in ["a", "b", "c", "d"] {
        heavy_model(dir.path(), m, json!({"argv_log": log}));
    }
    let w = cuda_warden(dir.path(), test_config());
    let mut ev = w.subscribe();
    for m in ["a", "b", "c"] {
        assert!(collect(w.submit(chat(Some(m), 2, true)).unwrap()).await.done, "{m}");
    }
    let windows: Vec<u32> = spawns(&log)
        .iter()
        .map(|(argv, _)| flag(argv, "-c").unwrap().parse().unwrap())
        .collect();
    assert_eq!(windows[..2], [16384, 16384], "two fit whole: {windows:?}");
    assert!(
        (4096..16384).contains(&windows[2]),
        "the third is sized beside the two: {windows:?}"
    );
    assert_eq!(w.status().residents.len(), 3);
    assert!(collect(w.submit(chat(Some("d"), 2, true)).unwrap()).await.done);
    let e = event_or_fail(&mut ev, "the eviction", |e| matches!(e, WardenEvent::Unloaded { .. })).await;
    assert!(
        matches!(&e, WardenEvent::Unloaded { model, reason, .. } if model == "a" && reason.as_str() == "evicted"),
        "{e:?}"
    );
    let mut left: Vec<String> = w.status().residents.into_iter().map(|r| r.model).collect();
    left.sort();
    assert_eq!(left, ["b", "c", "d"]);
    w.shutdown().await;
}
