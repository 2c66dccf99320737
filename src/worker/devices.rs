//! The devices and pressure a status reports, sampled on each request (a
//! few file reads, plus NVML when rpc-server has GPUs: well under the few
//! milliseconds the warden's 200 ms watch allows).
//!
//! Names and order are rpc-server's (`banner`); memory is the worker's own
//! reading: host RAM bounded by the worker's memory cgroup (rpc-server's CPU
//! device reports the host's physical RAM, which on a shared host or in a
//! container is memory the worker cannot have), and NVML's VRAM for GPUs.

use std::sync::Mutex;

use super::banner::BannerDevice;
use crate::law::brake::Level;
use crate::law::cuda::GpuDevice;
use crate::rpc::status::{DeviceKind, WorkerDevice};
use crate::sensors::pressure::{PressureProvider, default_provider};

const MIB: u64 = 1 << 20;

/// Host RAM now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ram {
    /// The total, bounded by our cgroup's limit.
    pub total_bytes: u64,
    /// Available now (cgroup-aware), when the platform says.
    pub available_bytes: Option<u64>,
}

/// Reads RAM, pressure and (when asked) the GPUs.
pub struct Sampler {
    /// `None` on a platform without a provider: no pressure, RAM free = total.
    provider: Option<Mutex<Box<dyn PressureProvider>>>,
    /// The user's `CUDA_VISIBLE_DEVICES`, which rpc-server's CUDA numbering follows.
    cuda_visible: Option<String>,
}

impl Sampler {
    /// This platform's sampler.
    pub fn new(cuda_visible: Option<String>) -> Self {
        Self {
            provider: default_provider().map(Mutex::new),
            cuda_visible,
        }
    }

    /// The devices (in the banner's order) and the RAM pressure now.
    pub fn sample(&self, banner: &[BannerDevice]) -> (Vec<WorkerDevice>, Option<Level>) {
        let sample = self
            .provider
            .as_ref()
            // A poisoned lock means a sample panicked once; the provider
            // holds only counters, so reading on is safe.
            .map(|p| p.lock().unwrap_or_else(|e| e.into_inner()).sample());
        let ram = Ram {
            total_bytes: crate::sensors::ram::ram_total(None).bytes,
            available_bytes: sample.as_ref().and_then(|s| s.available_bytes),
        };
        let gpus = if banner.iter().any(|d| d.kind == Some(DeviceKind::Cuda)) {
            crate::engines::cuda::nvml::snapshot().ok().map(|s| s.devices)
        } else {
            None
        };
        let visible = gpus
            .as_deref()
            .map(|g| crate::law::cuda::visible(g, self.cuda_visible.as_deref()));
        let pressure = sample.and_then(|s| s.level.ok());
        (assemble(banner, ram, visible.as_deref()), pressure)
    }
}

/// The status's devices: the banner's, in order, with the worker's memory
/// readings. `gpus` is NVML's visible devices in CUDA's (PCI) order, `None`
/// when NVML cannot say (rpc-server's start-time figures stand in). A
/// backend the wire has no kind for is kept as `Other` with rpc-server's own
/// figures: llama-server numbers every device rpc-server exposes, so the
/// split's values must line up with all of them.
pub fn assemble(banner: &[BannerDevice], ram: Ram, gpus: Option<&[&GpuDevice]>) -> Vec<WorkerDevice> {
    banner
        .iter()
        .map(|d| {
            let banner_figures = (d.total_mib * MIB, d.free_mib.min(d.total_mib) * MIB);
            let kind = d.kind.unwrap_or(DeviceKind::Other);
            let (total_bytes, free_bytes) = match kind {
                DeviceKind::Cpu => (
                    ram.total_bytes,
                    ram.available_bytes.unwrap_or(ram.total_bytes).min(ram.total_bytes),
                ),
                DeviceKind::Cuda => {
                    let index: Option<usize> = d.name.trim_start_matches("CUDA").parse().ok();
                    match gpus.zip(index).and_then(|(g, i)| g.get(i)) {
                        Some(g) => (g.total_bytes, g.free_bytes.min(g.total_bytes)),
                        None => banner_figures,
                    }
                }
                DeviceKind::Other => banner_figures,
            };
            WorkerDevice {
                name: d.name.clone(),
                kind,
                total_bytes,
                free_bytes,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, kind: Option<DeviceKind>, total_mib: u64, free_mib: u64) -> BannerDevice {
        BannerDevice {
            name: name.into(),
            kind,
            total_mib,
            free_mib,
        }
    }

    fn gpu(index: u32, total: u64, free: u64) -> GpuDevice {
        GpuDevice {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H200".into(),
            total_bytes: total,
            free_bytes: free,
        }
    }

    fn out(name: &str, kind: DeviceKind, total: u64, free: u64) -> WorkerDevice {
        WorkerDevice {
            name: name.into(),
            kind,
            total_bytes: total,
            free_bytes: free,
        }
    }

    /// (banner, RAM, NVML's GPUs, the status's devices)
    type Row<'a> = (Vec<BannerDevice>, Ram, Option<&'a [&'a GpuDevice]>, Vec<WorkerDevice>);

    #[test]
    fn assemble_rows() {
        use DeviceKind::{Cpu, Cuda, Other};
        let ram = Ram {
            total_bytes: 4 * MIB,
            available_bytes: Some(3 * MIB),
        };
        let (g0, g1) = (gpu(0, 100, 60), gpu(1, 200, 10));
        let both = [&g0, &g1];
        let rows: Vec<Row> = vec![
            // why: the CPU device is the cgroup-bounded RAM, not rpc-server's 24152 MiB
            (
                vec![dev("CPU", Some(Cpu), 24152, 24152)],
                ram,
                None,
                vec![out("CPU", Cpu, 4 * MIB, 3 * MIB)],
            ),
            // why: no available reading: free is the total
            (
                vec![dev("CPU", Some(Cpu), 1, 1)],
                Ram {
                    available_bytes: None,
                    ..ram
                },
                None,
                vec![out("CPU", Cpu, 4 * MIB, 4 * MIB)],
            ),
            // why: available above the cgroup's total (host-wide reading) is capped
            (
                vec![dev("CPU", Some(Cpu), 1, 1)],
                Ram {
                    available_bytes: Some(9 * MIB),
                    ..ram
                },
                None,
                vec![out("CPU", Cpu, 4 * MIB, 4 * MIB)],
            ),
            // why: GPUs take NVML's VRAM by CUDA index, in the banner's order
            (
                vec![
                    dev("CUDA1", Some(Cuda), 1, 1),
                    dev("CUDA0", Some(Cuda), 1, 1),
                    dev("CPU", Some(Cpu), 1, 1),
                ],
                ram,
                Some(&both),
                vec![
                    out("CUDA1", Cuda, 200, 10),
                    out("CUDA0", Cuda, 100, 60),
                    out("CPU", Cpu, 4 * MIB, 3 * MIB),
                ],
            ),
            // why: without NVML, rpc-server's own figures stand in
            (
                vec![dev("CUDA0", Some(Cuda), 1000, 900)],
                ram,
                None,
                vec![out("CUDA0", Cuda, 1000 * MIB, 900 * MIB)],
            ),
            // why: a backend the wire has no kind for keeps its place (llama-server
            // numbers it), as Other with rpc-server's figures
            (
                vec![dev("Vulkan0", None, 8, 6), dev("CPU", Some(Cpu), 1, 1)],
                ram,
                None,
                vec![
                    out("Vulkan0", Other, 8 * MIB, 6 * MIB),
                    out("CPU", Cpu, 4 * MIB, 3 * MIB),
                ],
            ),
        ];
        for (i, (banner, ram, gpus, want)) in rows.iter().enumerate() {
            assert_eq!(&assemble(banner, *ram, *gpus), want, "row {i}");
        }
    }
}
