//! NVIDIA readings through NVML (`nvml-wrapper`, which loads
//! `libnvidia-ml.so.1` at run time: one binary serves machines with and
//! without NVIDIA; `Nvml::init` is an error without a driver, nothing
//! crashes). NVML is initialised once per process.

use std::sync::OnceLock;

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

use crate::law::cuda::GpuDevice;

/// The process's NVML handle, or why there is none.
fn nvml() -> Result<&'static Nvml, String> {
    static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();
    NVML.get_or_init(|| Nvml::init().map_err(|e| format!("NVML is unavailable ({e})")))
        .as_ref()
        .map_err(Clone::clone)
}

/// What NVML says of the machine's GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuSnapshot {
    /// Every device, in NVML's order.
    pub devices: Vec<GpuDevice>,
    /// The CUDA version the driver supports (major, minor).
    pub driver_cuda: Option<(u32, u32)>,
}

/// The devices now (free memory is read fresh: the sizing of a load).
pub fn snapshot() -> Result<GpuSnapshot, String> {
    let nvml = nvml()?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML device count failed ({e})"))?;
    let mut devices = Vec::with_capacity(count as usize);
    for index in 0..count {
        let Ok(d) = nvml.device_by_index(index) else { continue };
        let (Ok(uuid), Ok(mem)) = (d.uuid(), d.memory_info()) else {
            continue;
        };
        devices.push(GpuDevice {
            index,
            uuid,
            name: d.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
            total_bytes: mem.total,
            free_bytes: mem.free,
        });
    }
    let driver_cuda = nvml.sys_cuda_driver_version().ok().map(|v| {
        (
            nvml_wrapper::cuda_driver_version_major(v) as u32,
            nvml_wrapper::cuda_driver_version_minor(v) as u32,
        )
    });
    Ok(GpuSnapshot { devices, driver_cuda })
}

/// Devices NVML sees (0 without NVIDIA): engine selection's question.
pub fn device_count() -> u32 {
    nvml().ok().and_then(|n| n.device_count().ok()).unwrap_or(0)
}

/// The device memory `pid` holds on the device with NVML `index` (Linux;
/// NVML has no per-process memory under Windows' WDDM).
pub fn process_used_bytes(index: u32, pid: u32) -> Option<u64> {
    let d = nvml().ok()?.device_by_index(index).ok()?;
    let procs = d.running_compute_processes().ok()?;
    procs
        .iter()
        .find(|p| p.pid == pid)
        .and_then(|p| match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        })
}
