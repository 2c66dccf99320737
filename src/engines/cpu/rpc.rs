//! The CPU engine over llama.cpp RPC workers: the plan from the workers'
//! readings (`law::workers`, `law::split`), the argv that carries it out
//! (`-ngl`, `--rpc`, `--tensor-split`, `--fit off`), and what llama-server
//! says each device was given, read back from its load lines.
//!
//! `--fit off`: b10883's fit adjusts "unset" arguments to the devices' free
//! memory, and rpc-server reports its host's physical RAM, not the worker's
//! cgroup; the split is the warden's, so fit must not touch it. `-lv 4`:
//! the per-device buffer lines are not printed at llama-server's default
//! verbosity (measured: 23 more lines per request at 4, none per token).

use std::ffi::OsString;

use super::SpawnPlan;
use crate::engines::EnginePlan;
use crate::error::ModelLoadError;
use crate::law::split::{self, Device, SplitPlan};
use crate::law::window::Window;
use crate::law::workers::{self, Joined};
use crate::rpc::remote::WorkerAddr;
use crate::rpc::status::{DeviceKind, WorkerBuild, WorkerStatus};

/// The child's verbosity when it runs over workers (see the module doc).
pub const RPC_CHILD_VERBOSITY: u8 = 4;

pub use crate::status::split::{Given, LeftOut, RpcPlan, RpcUse};

/// One reading of a configured worker before a load, with its last good
/// reading from the watch (for the window it would have given).
#[derive(Debug, Clone)]
pub struct Reading {
    /// The worker.
    pub addr: WorkerAddr,
    /// What it answered now.
    pub now: Result<WorkerStatus, String>,
    /// Its last good reading.
    pub last_good: Option<WorkerStatus>,
    /// The watch's poll count when `now` was read.
    pub polls: u64,
}

/// The plan of `base` (the CPU engine's one-machine plan) over the workers
/// that answer. Refuses a worker of another build, and a model the devices
/// cannot hold even at the floor.
pub fn plan(
    base: SpawnPlan,
    readings: &[Reading],
    ours: &WorkerBuild,
    pin: Option<u32>,
) -> Result<SpawnPlan, ModelLoadError> {
    let id = base.entry.id.clone();
    let (Some(facts), Some(shape), Some(ram)) = (base.facts.clone(), base.shape, base.ram) else {
        tracing::warn!(model = %id, "the header could not be read: loading without the workers");
        return Ok(base);
    };
    let (joined, left_out) = sort_readings(readings, ours, &id)?;
    let costs = split::layer_costs(&facts, shape.kv_per_token);
    let split_over = |devices: &[Device]| split::split(&costs, shape.trained, devices, base.cap, pin, !shape.mla);
    let local = Device {
        name: "local".into(),
        limit_bytes: split::ram_limit(ram.bytes),
    };
    let (devices, mut used) = devices_and_uses(&local, &joined);
    let plan = split_over(&devices);
    if !plan.fits {
        return Err(ModelLoadError::DoesNotFit {
            id,
            window: plan.window.ctx().unwrap_or(0),
            detail: describe(&plan, &left_out),
        });
    }
    let full_window = (!left_out.is_empty())
        .then(|| all_workers_window(readings, local, |d| split_over(d).window.ctx()))
        .flatten()
        .filter(|&w| plan.window.ctx().is_some_and(|ours| w > ours));
    count_ram_layers(&mut used, &joined, &plan);
    // A worker the split gave nothing is left out of --rpc.
    used.retain(|u| plan.shares[u.shares.clone()].iter().any(|s| s.layers > 0 || s.output));
    Ok(SpawnPlan {
        window: plan.window,
        // The split has a limit per device, not one budget.
        budget_bytes: None,
        engine: EnginePlan::Cpu {
            rpc: Some(RpcPlan {
                split: plan,
                used,
                left_out,
                full_window,
            }),
        },
        ..base
    })
}

/// A worker whose rpc-server is up with devices: its address, its reading,
/// and the watch's poll count when it was read.
type Up<'a> = (&'a WorkerAddr, &'a WorkerStatus, u64);

/// The readings sorted into the workers that join and those left out (and
/// why); a worker of another build refuses the load.
fn sort_readings<'a>(
    readings: &'a [Reading],
    ours: &WorkerBuild,
    id: &str,
) -> Result<(Vec<Up<'a>>, Vec<LeftOut>), ModelLoadError> {
    let mut left_out = Vec::new();
    let mut joined = Vec::new();
    for r in readings {
        let addr = r.addr.to_string();
        match &r.now {
            Ok(s) if s.rpc.up && s.devices.is_empty() => left_out.push(LeftOut {
                addr,
                why: "its rpc-server exposes no device".into(),
            }),
            Ok(s) if s.rpc.up => {
                workers::check_build(&addr, ours, &s.build).map_err(|detail| ModelLoadError::WorkerBuildMismatch {
                    id: id.to_owned(),
                    detail,
                })?;
                joined.push((&r.addr, s, r.polls));
            }
            Ok(s) => left_out.push(LeftOut {
                addr,
                why: format!(
                    "its rpc-server is down ({})",
                    s.rpc.last_exit.as_deref().unwrap_or("starting")
                ),
            }),
            Err(e) => left_out.push(LeftOut { addr, why: e.clone() }),
        }
    }
    Ok((joined, left_out))
}

/// The split's devices (the local machine first, then each joined worker's)
/// and one use per joined worker, its `ram_layers` still to count.
fn devices_and_uses(local: &Device, joined: &[Up]) -> (Vec<Device>, Vec<RpcUse>) {
    let mut devices = vec![local.clone()];
    let mut used = Vec::new();
    for (addr, s, polls) in joined {
        let start = devices.len();
        devices.extend(workers::devices_of(&addr.to_string(), s));
        used.push(RpcUse {
            addr: addr.to_string(),
            endpoint: addr.rpc_endpoint(s.rpc.port),
            joined: Joined {
                pid: s.rpc.pid,
                starts: s.rpc.starts,
            },
            polls_at_plan: *polls,
            shares: start..devices.len(),
            ram_bytes: s
                .devices
                .iter()
                .filter(|d| d.kind == DeviceKind::Cpu)
                .map(|d| d.total_bytes)
                .sum(),
            ram_layers: 0,
        });
    }
    (devices, used)
}

/// The window every configured worker would give, each read now when its
/// rpc-server is up, else by its last good reading; `None` when one has
/// neither.
fn all_workers_window(
    readings: &[Reading],
    local: Device,
    window_of: impl Fn(&[Device]) -> Option<u32>,
) -> Option<u32> {
    let mut all = vec![local];
    for r in readings {
        let s = r.now.as_ref().ok().filter(|s| s.rpc.up).or(r.last_good.as_ref())?;
        all.extend(workers::devices_of(&r.addr.to_string(), s));
    }
    window_of(&all)
}

/// Each use's layers on its host-memory devices, from the plan's shares.
fn count_ram_layers(used: &mut [RpcUse], joined: &[Up], plan: &SplitPlan) {
    for (u, (_, s, _)) in used.iter_mut().zip(joined) {
        u.ram_layers = plan.shares[u.shares.clone()]
            .iter()
            .zip(&s.devices)
            .filter(|(_, d)| d.kind == DeviceKind::Cpu)
            .map(|(sh, _)| sh.layers)
            .sum();
    }
}

/// Each device's share against its limit, and who was left out (an error's
/// detail, a log line).
pub fn describe(plan: &SplitPlan, left_out: &[LeftOut]) -> String {
    let mib = |b: u64| b >> 20;
    let mut parts: Vec<String> = plan
        .shares
        .iter()
        .map(|s| {
            format!(
                "{}: {} layers{}, {} MiB weights + {} MiB KV + {} MiB compute = {} MiB of {} MiB",
                s.name,
                s.layers,
                if s.output { " + output" } else { "" },
                mib(s.weights_bytes),
                mib(s.kv_bytes),
                mib(s.compute_bytes),
                mib(s.total_bytes()),
                s.limit_bytes.max(0) >> 20
            )
        })
        .collect();
    for l in left_out {
        parts.push(format!("{} left out: {}", l.addr, l.why));
    }
    parts.join("; ")
}

/// The argv part that places the layers: `-ngl`, `--rpc`, `--tensor-split`,
/// `--fit off`.
pub fn argv(rpc: &RpcPlan) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["-ngl".into(), rpc.split.gpu_layers().to_string().into()];
    if !rpc.used.is_empty() {
        let endpoints: Vec<&str> = rpc.used.iter().map(|u| u.endpoint.as_str()).collect();
        let split: Vec<String> = rpc
            .used
            .iter()
            .flat_map(|u| rpc.split.shares[u.shares.clone()].iter())
            .map(|s| (s.layers + u32::from(s.output)).to_string())
            .collect();
        a.extend(["--rpc".into(), endpoints.join(",").into()]);
        a.extend(["--tensor-split".into(), split.join(",").into()]);
    }
    a.extend(["--fit".into(), "off".into()]);
    a
}

/// Reads the per-device buffer lines of a child's load (`model buffer
/// size`, `KV buffer size`, `compute buffer size`), one `Given` per device
/// of the plan. The local machine's model line is `CPU_Mapped`: the mapped
/// file, which holds every layer's weights whatever was copied away.
pub fn given(lines: &[String], rpc: &RpcPlan) -> Vec<Given> {
    let mut out: Vec<Given> = rpc
        .split
        .shares
        .iter()
        .map(|s| Given {
            device: s.name.clone(),
            ..Given::default()
        })
        .collect();
    for line in lines {
        let Some((device, kind, bytes)) = buffer_line(line) else {
            continue;
        };
        let Some(i) = device_index(device, rpc) else { continue };
        let g = &mut out[i];
        match kind {
            Buffer::Model => g.model_bytes += bytes,
            Buffer::Kv => g.kv_bytes += bytes,
            Buffer::Compute => g.compute_bytes += bytes,
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Buffer {
    Model,
    Kv,
    Compute,
}

/// `(device, kind, bytes)` of one buffer line.
fn buffer_line(line: &str) -> Option<(&str, Buffer, u64)> {
    let (head, kind, tail) = [
        (" model buffer size = ", Buffer::Model),
        (" KV buffer size = ", Buffer::Kv),
        (" compute buffer size = ", Buffer::Compute),
    ]
    .into_iter()
    .find_map(|(m, k)| line.split_once(m).map(|(h, t)| (h, k, t)))?;
    let device = head.split_whitespace().last()?;
    let mib: f64 = tail.trim().strip_suffix("MiB")?.trim().parse().ok()?;
    Some((device, kind, (mib * 1024.0 * 1024.0).round() as u64))
}

/// The plan's device a buffer line names: `RPC<n>[endpoint]` is device `n`
/// of that worker; `CPU`, `CPU_Mapped`, `CPU_REPACK` are the local machine.
fn device_index(device: &str, rpc: &RpcPlan) -> Option<usize> {
    if device.starts_with("CPU") {
        return Some(0);
    }
    let rest = device.strip_prefix("RPC")?;
    let (n, endpoint) = rest.split_once('[')?;
    let endpoint = endpoint.strip_suffix(']')?;
    let n: usize = n.parse().ok()?;
    let u = rpc.used.iter().find(|u| u.endpoint == endpoint)?;
    let i = u.shares.start.checked_add(n)?;
    (i < u.shares.end).then_some(i)
}

/// The window the plan's devices would give without the brake's cap (the
/// brake's growth bound).
pub fn uncapped(plan: &SpawnPlan) -> Option<u32> {
    let (rpc, facts, shape) = (plan.rpc()?, plan.facts.as_ref()?, plan.shape?);
    let devices: Vec<Device> = rpc
        .split
        .shares
        .iter()
        .map(|s| Device {
            name: s.name.clone(),
            limit_bytes: s.limit_bytes,
        })
        .collect();
    let costs = split::layer_costs(facts, shape.kv_per_token);
    split::split(&costs, shape.trained, &devices, None, None, !shape.mla)
        .window
        .ctx()
}

/// KV bytes per window token in this machine's RAM (its layers' share),
/// for the brake's "is it ours" test.
pub fn local_kv_per_token(plan: &SpawnPlan) -> Option<u64> {
    let (rpc, facts, shape) = (plan.rpc()?, plan.facts.as_ref()?, plan.shape?);
    let per_layer = split::layer_costs(facts, shape.kv_per_token).kv_per_token_layer;
    Some(per_layer * rpc.split.shares.first()?.layers as u64)
}

/// The one-line summary of a split for the load log.
pub fn summary(rpc: &RpcPlan, window: Window) -> String {
    format!(
        "window {} over {} device(s): {}",
        window.ctx().map_or("unsized".into(), |c| c.to_string()),
        rpc.split.shares.len(),
        describe(&rpc.split, &rpc.left_out)
    )
}

#[cfg(test)]
#[path = "rpc_tests.rs"]
mod tests;
