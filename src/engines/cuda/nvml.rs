//! NVIDIA readings through NVML (`nvml-wrapper`, which loads
//! `libnvidia-ml.so.1` at run time: one binary serves machines with and
//! without NVIDIA; `Nvml::init` is an error without a driver, nothing
//! crashes). NVML is initialised once per process.

use std::sync::OnceLock;

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

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
        let (Ok(uuid), Some((total_bytes, free_bytes))) = (d.uuid(), memory(nvml, &d)) else {
            continue;
        };
        devices.push(GpuDevice {
            index,
            uuid,
            name: d.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
            total_bytes,
            free_bytes,
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

/// A device's (total, free) memory, bytes: NVML's v2 query where the
/// driver has it (it counts the driver's reserved memory as used, so the
/// free is what a child can really take), else the v1 query (the spec:
/// "v2 when the binding and the driver have it"). nvml-wrapper 0.13's
/// `memory_info` is v2 only, so v1 is called here through its library.
fn memory(nvml: &Nvml, d: &nvml_wrapper::Device) -> Option<(u64, u64)> {
    match d.memory_info() {
        Ok(m) => Some((m.total, m.free)),
        Err(e) if v1_fallback(&e) => memory_v1(nvml, d),
        Err(_) => None,
    }
}

/// Whether a failed v2 query means the driver lacks v2 (a library without
/// the symbol, or a driver that refuses the call or its struct version),
/// rather than a device that cannot answer.
fn v1_fallback(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::FailedToLoadSymbol(_)
            | NvmlError::FunctionNotFound
            | NvmlError::NotSupported
            | NvmlError::InvalidArg
            | NvmlError::Unknown
    )
}

/// The v1 query: `nvmlDeviceGetMemoryInfo` through the loaded library.
fn memory_v1(nvml: &Nvml, d: &nvml_wrapper::Device) -> Option<(u64, u64)> {
    use nvml_wrapper_sys::bindings::{nvmlMemory_t, nvmlReturn_enum_NVML_SUCCESS};
    let sym = nvml.lib().nvmlDeviceGetMemoryInfo.as_ref().ok()?;
    let mut m = nvmlMemory_t {
        total: 0,
        free: 0,
        used: 0,
    };
    // SAFETY: `sym` is the library's own `nvmlDeviceGetMemoryInfo`, given
    // the live handle of a device of this same library (`d` borrows `nvml`)
    // and a valid, exclusively borrowed `nvmlMemory_t` to fill.
    let r = unsafe { sym(d.handle(), &mut m) };
    (r == nvmlReturn_enum_NVML_SUCCESS).then_some((m.total, m.free))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver without the v2 query falls back to v1; a device that
    /// cannot answer (lost, no permission) is skipped, not asked again.
    #[test]
    fn only_a_missing_v2_falls_back_to_v1() {
        let rows = [
            (NvmlError::FailedToLoadSymbol("nvmlDeviceGetMemoryInfo_v2".into()), true),
            (NvmlError::FunctionNotFound, true),
            (NvmlError::NotSupported, true),
            // why: an old driver refuses the v2 struct's version field
            (NvmlError::InvalidArg, true),
            (NvmlError::Unknown, true),
            (NvmlError::GpuLost, false),
            (NvmlError::NoPermission, false),
            (NvmlError::Uninitialized, false),
        ];
        for (i, (e, want)) in rows.into_iter().enumerate() {
            assert_eq!(v1_fallback(&e), want, "row {i}: {e}");
        }
    }
}
