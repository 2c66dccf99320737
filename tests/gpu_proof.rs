//! The CUDA engine on a real NVIDIA GPU: run by `scripts/gpu-proof.sh` on a
//! GPU machine (with `WARDEN_GPU_PROOF_MODELS` naming the generated models
//! and `WARDEN_LLAMA_SERVER` the CUDA build). This file is built only with
//! the `gpu-tests` feature and its tests are ignored, so neither a plain
//! `cargo test` nor `./test.sh` (`--include-ignored`, on CI machines without
//! a GPU) runs them; run, they fail naming a missing GPU or model. The CUDA
//! rules themselves are proven without a GPU in `tests/fake/cuda_engine.rs` and
//! `law::cuda`.
//!
//! Each test prints `GPU-PROOF key=value` lines; the script gathers them
//! into its report.

mod support;

use std::path::{Path, PathBuf};

use llm_warden::engines;
use llm_warden::engines::cuda::nvml;
use llm_warden::gguf::ModelFacts;
use llm_warden::law::{cuda, window};
use llm_warden::status::EngineKind;
use llm_warden::{Warden, WardenConfig};
use support::*;

/// The models directory the proof script generated and NVML's devices;
/// fails the test naming which is missing.
fn proof_setup() -> (PathBuf, nvml::GpuSnapshot) {
    let snap = match nvml::snapshot() {
        Ok(s) if !s.devices.is_empty() => s,
        other => missing(&format!("an NVIDIA GPU ({other:?})")),
    };
    let Some(dir) = std::env::var_os("WARDEN_GPU_PROOF_MODELS").map(PathBuf::from) else {
        missing("WARDEN_GPU_PROOF_MODELS (scripts/gpu-proof.sh run sets it)");
    };
    for model in ["big.gguf", "small.gguf"] {
        if !dir.join(model).is_file() {
            missing(&format!(
                "{} (scripts/gen_gpu_models.py makes it)",
                dir.join(model).display()
            ));
        }
    }
    (dir, snap)
}

fn proof(key: &str, value: impl std::fmt::Display) {
    println!("GPU-PROOF {key}={value}");
}

fn start(cfg: WardenConfig, dir: &std::path::Path) -> Warden {
    let backend = engines::build(&cfg, EngineKind::Cuda).expect("the CUDA build of llama-server");
    TestWarden::backend(backend, dir).config(cfg).start()
}

/// The engine selection says CUDA, and the one GPU it sizes on.
fn selected_gpu(cfg: &WardenConfig, snap: &nvml::GpuSnapshot) -> cuda::GpuDevice {
    let sel = llm_warden::law::select::select(
        llm_warden::law::select::Platform {
            os: std::env::consts::OS,
            arm: false,
            nvidia_devices: nvml::device_count(),
        },
        cfg.engine,
        cfg.force_cpu,
    );
    proof("selected_engine", format!("{:?}", sel.kind));
    assert_eq!(sel.kind, EngineKind::Cuda);
    let gpu = match cuda::place(&snap.devices, cfg.cuda_visible_devices.as_deref()) {
        cuda::CudaPlacement::Sized { device, .. } => device,
        other => panic!("no single GPU to size on: {other:?}"),
    };
    proof(
        "gpu",
        format!(
            "{} {} total_mib={} free_mib={}",
            gpu.name,
            gpu.uuid,
            gpu.total_bytes >> 20,
            gpu.free_bytes >> 20
        ),
    );
    gpu
}

/// The law's window for `facts` on `gpu` with `free_bytes` free, and the
/// compute slope it used.
fn law_window(id: &str, facts: &ModelFacts, gpu: &cuda::GpuDevice, free_bytes: u64) -> (window::Window, u64) {
    let shape = window::shape_of(facts, 0);
    let vram = window::Vram {
        total_bytes: gpu.total_bytes,
        free_bytes,
    };
    let slope = window::cuda_slope(
        window::fa_proven(facts.key_length, facts.value_length, false),
        facts.head_count_max(),
    );
    let expected = window::cuda(&shape, vram, slope, None, None);
    proof(
        &format!("{id}.window_law"),
        format!("{expected:?} (free at load {} MiB)", free_bytes >> 20),
    );
    (expected, slope)
}

/// One model loaded on `gpu` in its own warden: pinned by UUID, fully
/// offloaded, its window the law's, and a streamed turn.
async fn prove_model(cfg: &WardenConfig, dir: &Path, gpu: &cuda::GpuDevice, id: &str) {
    let w = start(cfg.clone(), dir);
    let before = nvml::snapshot().unwrap();
    let s = w.load(Some(id.into()), None).await.unwrap();
    let pid = s.child_pid.unwrap();
    let facts = llm_warden::gguf::read_model_facts(&dir.join(format!("{id}.gguf"))).unwrap();
    let free = before.devices.iter().find(|d| d.uuid == gpu.uuid).unwrap().free_bytes;
    let (expected, slope) = law_window(id, &facts, gpu, free);
    proof(&format!("{id}.props_n_ctx"), s.context_tokens.unwrap_or(0));
    proof(&format!("{id}.memory_bound"), format!("{:?}", s.memory_bound_tokens));
    let pinned = env_of(pid, "CUDA_VISIBLE_DEVICES");
    proof(&format!("{id}.child_cuda_visible_devices"), format!("{pinned:?}"));
    assert_eq!(pinned.as_deref(), Some(gpu.uuid.as_str()), "pinned by UUID");
    let used = nvml::process_used_bytes(gpu.index, pid);
    proof(&format!("{id}.child_device_mib"), used.map_or(0, |b| b >> 20));
    let kv = llm_warden::law::kv::kv_bytes_per_token(&facts) * s.context_tokens.unwrap_or(0) as u64;
    let limit = cuda::device_check_limit(
        kv,
        s.context_tokens.unwrap_or(0) as u64 * slope + window::COMPUTE_INTERCEPT_BYTES,
        window::CUDA_CONTEXT_BYTES,
        facts.weights_bytes,
    );
    proof(&format!("{id}.device_check_limit_mib"), limit >> 20);
    proof(&format!("{id}.placement"), format!("{:?}", w.status().offload));
    assert_eq!(
        w.status().offload,
        Some(llm_warden::law::cuda::Offload::Full),
        "{id}: a full offload"
    );
    let tail = w.child_output_tail(200);
    if let Some(l) = tail.iter().rev().find(|l| l.contains("offloaded")) {
        proof(&format!("{id}.offloaded_line"), l);
    }
    assert_eq!(
        s.context_tokens,
        expected.ctx(),
        "{id}: /props n_ctx is the law's window"
    );
    let t = collect(w.submit(chat(Some(id), 8, true)).unwrap()).await;
    proof(&format!("{id}.stream_done"), t.done);
    w.shutdown().await;
}

/// Selection, UUID pinning, the window against NVML's free memory (read back
/// from /props), the placement, and the device check's figures, on the big
/// model (the VRAM budget binds) and the small one (it fits whole).
#[actix_rt::test]
#[ignore = "needs an NVIDIA GPU, the CUDA build and the generated models; scripts/gpu-proof.sh runs it"]
async fn the_cuda_engine_on_a_real_gpu() {
    let (dir, snap) = proof_setup();
    let cfg = WardenConfig::from_env().unwrap();
    let gpu = selected_gpu(&cfg, &snap);
    for id in ["big", "small"] {
        prove_model(&cfg, &dir, &gpu, id).await;
    }
}

/// WARDEN_VRAM_OVERRIDE_GB larger than the card: the sized window cannot be
/// allocated, CUDA runs out of memory at load, and the one retry at the 4096
/// floor loads.
#[actix_rt::test]
#[ignore = "needs an NVIDIA GPU, the CUDA build and the generated models; scripts/gpu-proof.sh runs it"]
async fn the_out_of_memory_retry_on_a_real_gpu() {
    let (dir, snap) = proof_setup();
    let total_gib = snap.devices.iter().map(|d| d.total_bytes).max().unwrap() >> 30;
    let cfg = WardenConfig {
        vram_override_bytes: Some((total_gib * 3) << 30),
        ..WardenConfig::from_env().unwrap()
    };
    let w = start(cfg, &dir);
    let r = w.load(Some("big".into()), None).await;
    let s = r.expect("the retry at the floor loads");
    proof("oom_retry.context_tokens", s.context_tokens.unwrap_or(0));
    assert_eq!(s.context_tokens, Some(4096));
    w.shutdown().await;
}
