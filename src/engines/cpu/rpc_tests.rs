use std::sync::Arc;

use super::*;
use crate::catalog::{ModelEntry, ModelFormat};
use crate::law::brake::Level;
use crate::law::kv::tests::smollm2;
use crate::law::window::{self, MIB};
use crate::rpc::status::{DeviceKind, RpcState, WorkerDevice};
use crate::sensors::ram::{RamSource, RamTotal};

fn base(ram_mib: u64) -> SpawnPlan {
    let mut f = smollm2();
    f.token_embd_bytes = 30_081_024;
    let facts = Arc::new(f);
    SpawnPlan {
        entry: Arc::new(ModelEntry {
            id: "smol".into(),
            format: ModelFormat::Gguf,
            path: "/m/smol.gguf".into(),
            mmproj: None,
        }),
        shape: Some(window::shape_of(&facts, 0)),
        facts: Some(facts),
        window: Window::Unsized,
        budget_bytes: None,
        ram: Some(RamTotal {
            bytes: ram_mib * MIB,
            source: RamSource::Override,
        }),
        cap: None,
        beside_bytes: 0,
        slots: 1,
        swa: crate::law::kv::SwaCache::Full,
        extra_args: Vec::new(),
        engine: crate::engines::plan::EnginePlan::Cpu { rpc: None },
    }
}

fn build(tag: &str) -> WorkerBuild {
    WorkerBuild {
        llama_cpp: Some(tag.into()),
        rpc_protocol: Some("6.0.0".into()),
        flavour: Some("cpu".into()),
    }
}

fn worker(port: u16, ram_mib: u64, tag: &str, up: bool) -> WorkerStatus {
    WorkerStatus {
        build: build(tag),
        rpc: RpcState {
            up,
            port,
            pid: Some(10),
            starts: 1,
            last_exit: None,
        },
        devices: vec![WorkerDevice {
            name: "CPU".into(),
            kind: DeviceKind::Cpu,
            total_bytes: ram_mib * MIB,
            free_bytes: ram_mib * MIB,
        }],
        pressure: Some(Level::Calm),
    }
}

fn reading(status_port: u16, now: Result<WorkerStatus, String>, last: Option<WorkerStatus>) -> Reading {
    Reading {
        addr: format!("127.0.0.1:{status_port}").parse().unwrap(),
        now,
        last_good: last,
        polls: 0,
    }
}

fn strings(a: &[OsString]) -> Vec<String> {
    a.iter().map(|s| s.to_string_lossy().into_owned()).collect()
}

#[test]
fn two_workers_reach_the_window_one_machine_cannot() {
    // why: 600 MiB here (450 MiB limit) and two 512 MiB workers (384 each),
    // the law's second row: 8192 tokens, 13 + 10 + 7 layers
    let r = [
        reading(1, Ok(worker(50061, 512, "b10883", true)), None),
        reading(2, Ok(worker(50062, 512, "b10883", true)), None),
    ];
    let p = plan(base(600), &r, &build("b10883"), None).unwrap();
    assert_eq!(p.window.ctx(), Some(8192));
    let rpc = p.rpc().unwrap();
    assert_eq!(
        strings(&argv(rpc)),
        [
            "-ngl",
            "18",
            "--rpc",
            "127.0.0.1:50061,127.0.0.1:50062",
            "--tensor-split",
            "10,8",
            "--fit",
            "off"
        ]
    );
    assert!(rpc.left_out.is_empty() && rpc.full_window.is_none());
}

#[test]
fn a_worker_of_another_build_is_refused_before_any_spawn() {
    let r = [reading(1, Ok(worker(50061, 512, "b9999", true)), None)];
    let e = plan(base(600), &r, &build("b10883"), None).unwrap_err();
    assert_eq!(e.code(), "worker_build_mismatch");
    assert!(
        e.to_string().contains("b9999") && e.to_string().contains("127.0.0.1:1"),
        "{e}"
    );
}

#[test]
fn an_unreachable_worker_is_left_out_and_the_smaller_window_said() {
    // why: the second worker is gone; 560 MiB here (15 layers at 8192) and
    // one worker (11 with the output) hold a smaller window, and the plan
    // knows the window both would have given
    let r = [
        reading(1, Ok(worker(50061, 512, "b10883", true)), None),
        reading(
            2,
            Err("connection refused".into()),
            Some(worker(50062, 512, "b10883", true)),
        ),
    ];
    let p = plan(base(560), &r, &build("b10883"), None).unwrap();
    let rpc = p.rpc().unwrap().clone();
    assert_eq!(rpc.used.len(), 1);
    assert_eq!(rpc.left_out[0].addr, "127.0.0.1:2");
    let ctx = p.window.ctx().unwrap();
    assert!(ctx < 8192, "{ctx}");
    assert_eq!(rpc.full_window, Some(8192));
}

#[test]
fn a_model_the_devices_cannot_hold_fails_with_the_arithmetic() {
    // why: 300 MiB here and the only worker gone: not even the floor fits
    let r = [reading(1, Err("connection refused".into()), None)];
    let e = plan(base(300), &r, &build("b10883"), None).unwrap_err();
    assert_eq!(e.code(), "model_does_not_fit");
    let text = e.to_string();
    assert!(
        text.contains("local: 30 layers") && text.contains("of 225 MiB"),
        "{text}"
    );
    assert!(text.contains("127.0.0.1:1 left out: connection refused"), "{text}");
}

/// The buffer lines llama-server b10883 printed at `-lv 4` for SmolLM2 with
/// `-ngl 21 --rpc 127.0.0.1:50161,127.0.0.1:50162 --tensor-split 10,11`.
const LOAD_LINES: &[&str] = &[
    "0.00.135.055 I load_tensors:   CPU_Mapped model buffer size =    92.10 MiB",
    "0.00.135.056 I load_tensors: RPC0[127.0.0.1:50161] model buffer size =    21.14 MiB",
    "0.00.135.057 I load_tensors: RPC0[127.0.0.1:50162] model buffer size =    49.83 MiB",
    "0.00.304.626 I llama_context:        CPU  output buffer size =     0.19 MiB",
    "0.00.304.850 I llama_kv_cache:        CPU KV buffer size =    30.00 MiB",
    "0.00.327.833 I llama_kv_cache: RPC0[127.0.0.1:50161] KV buffer size =    30.00 MiB",
    "0.00.331.757 I llama_kv_cache: RPC0[127.0.0.1:50162] KV buffer size =    30.00 MiB",
    "0.00.358.737 I sched_reserve: RPC0[127.0.0.1:50161] compute buffer size =    15.26 MiB",
    "0.00.358.743 I sched_reserve: RPC0[127.0.0.1:50162] compute buffer size =    15.26 MiB",
    "0.00.358.745 I sched_reserve:        CPU compute buffer size =    17.51 MiB",
];

#[test]
fn what_each_device_was_given_is_read_from_the_load_lines() {
    let r = [
        reading(1, Ok(worker(50161, 4096, "b10883", true)), None),
        reading(2, Ok(worker(50162, 4096, "b10883", true)), None),
    ];
    let p = plan(base(4096), &r, &build("b10883"), None).unwrap();
    let lines: Vec<String> = LOAD_LINES.iter().map(|l| l.to_string()).collect();
    let g = given(&lines, p.rpc().unwrap());
    let mib = |m: f64| (m * MIB as f64).round() as u64;
    assert_eq!(g.len(), 3);
    assert_eq!(
        (g[0].model_bytes, g[0].kv_bytes, g[0].compute_bytes),
        (mib(92.10), mib(30.0), mib(17.51))
    );
    assert_eq!(g[1].device, "127.0.0.1:1/CPU");
    assert_eq!(
        (g[1].model_bytes, g[1].kv_bytes, g[1].compute_bytes),
        (mib(21.14), mib(30.0), mib(15.26))
    );
    assert_eq!((g[2].model_bytes, g[2].kv_bytes), (mib(49.83), mib(30.0)));
}

#[test]
fn a_worker_given_nothing_is_left_out_of_the_rpc_list() {
    // why: the law's row: the last worker (290 MiB here: 386 MiB of RAM)
    // cannot hold the output's copy, so the one before runs it and the last
    // is not connected at all (no compute buffer there either)
    let r = [
        reading(1, Ok(worker(50061, 512, "b10883", true)), None),
        reading(2, Ok(worker(50062, 387, "b10883", true)), None),
    ];
    let p = plan(base(600), &r, &build("b10883"), None).unwrap();
    let rpc = p.rpc().unwrap();
    assert_eq!(
        strings(&argv(rpc)),
        [
            "-ngl",
            "12",
            "--rpc",
            "127.0.0.1:50061",
            "--tensor-split",
            "12",
            "--fit",
            "off"
        ]
    );
    assert_eq!(rpc.split.shares[2].compute_bytes, 0);
}

#[test]
fn every_device_of_a_worker_keeps_its_place_in_the_numbering() {
    // why: llama-server numbers all of a worker's devices (RPC0, RPC1 of an
    // endpoint); a device without a memory rule gets a zero split, the
    // values of the others stay on their devices
    let mut w = worker(50061, 4096, "b10883", true);
    w.devices.insert(
        0,
        WorkerDevice {
            name: "Vulkan0".into(),
            kind: DeviceKind::Other,
            total_bytes: 8 << 30,
            free_bytes: 8 << 30,
        },
    );
    let r = [reading(1, Ok(w), None)];
    let p = plan(base(4096), &r, &build("b10883"), None).unwrap();
    let rpc = p.rpc().unwrap();
    let a = strings(&argv(rpc));
    let split = &a[a.iter().position(|x| x == "--tensor-split").unwrap() + 1];
    assert!(split.starts_with("0,"), "{a:?}");
    let lines: Vec<String> = [
        "I load_tensors: RPC1[127.0.0.1:50061] model buffer size =    10.00 MiB",
        "I llama_kv_cache: RPC1[127.0.0.1:50061] KV buffer size =    20.00 MiB",
    ]
    .iter()
    .map(|l| l.to_string())
    .collect();
    let g = given(&lines, rpc);
    assert_eq!(g[2].device, "127.0.0.1:1/CPU");
    assert_eq!((g[2].model_bytes, g[2].kv_bytes), (10 * MIB, 20 * MIB));
    assert_eq!((g[1].model_bytes, g[1].kv_bytes), (0, 0), "Vulkan0 got nothing");
}

#[test]
fn a_worker_without_devices_is_left_out_with_the_reason() {
    let mut w = worker(50061, 512, "b10883", true);
    w.devices.clear();
    let r = [reading(1, Ok(w), None)];
    let p = plan(base(4096), &r, &build("b10883"), None).unwrap();
    let rpc = p.rpc().unwrap().clone();
    assert!(rpc.used.is_empty());
    assert_eq!(rpc.left_out[0].why, "its rpc-server exposes no device");
}
