//! The CUDA engine: llama-server built with `-DGGML_CUDA=ON`, `-ngl -1
//! -fitt 1024` (fit places the layers with a 1 GiB margin), its window sized
//! by the warden against the selected GPU's memory (`law::window::cuda`),
//! the child pinned to that GPU by UUID (`law::cuda::place`).
//!
//! `-lv 4` makes llama.cpp print what the engine reads after load (the
//! buffer sizes, `Flash Attention enabled` or `... not supported, set to
//! disabled`, `offloaded N/M layers to GPU`), about 170 lines per load.

pub mod live;
pub mod nvml;
pub mod vram;
#[cfg(windows)]
pub mod windows_vram;

use std::ffi::OsString;
use std::path::PathBuf;

use super::SpawnPlan;
use crate::law::cuda::CudaPlacement;


/// The child verbosity that shows the lines the CUDA engine reads.
pub const CUDA_CHILD_VERBOSITY: u8 = 4;

/// Where the engine learns of the GPUs.
#[derive(Debug, Clone)]
pub enum GpuSource {
    /// NVML, read at every load.
    Nvml,
    /// A fixed list (tests: the spill path driven on a machine without a
    /// GPU, the fake card); absent from a build without tests.
    #[cfg(any(test, feature = "testing"))]
    Fixed(Vec<crate::law::cuda::GpuDevice>),
}

impl GpuSource {
    /// The devices now (NVML's free memory read fresh: the sizing of a load).
    pub fn snapshot(&self) -> Result<nvml::GpuSnapshot, String> {
        match self {
            Self::Nvml => nvml::snapshot(),
            #[cfg(any(test, feature = "testing"))]
            Self::Fixed(devices) => Ok(nvml::GpuSnapshot {
                devices: devices.clone(),
                driver_cuda: None,
            }),
        }
    }

    /// The device memory `pid` holds on device `index`, when known.
    pub fn process_used_bytes(&self, index: u32, pid: u32) -> Option<u64> {
        match self {
            Self::Nvml => nvml::process_used_bytes(index, pid),
            #[cfg(any(test, feature = "testing"))]
            Self::Fixed(_) => None,
        }
    }
}

/// The CUDA engine's own state.
#[derive(Debug, Clone)]
pub struct CudaEngine {
    /// The CUDA build of llama-server.
    pub server: PathBuf,
    /// The GPUs.
    pub gpus: GpuSource,
}

impl CudaEngine {
    /// The engine's argv for a plan (the fixed flags come after).
    pub fn argv(&self, plan: &SpawnPlan) -> Vec<OsString> {
        let mut a = super::llama::model_args(plan);
        let all = plan.cuda().is_some_and(|c| c.all_layers);
        for s in ["-ngl", if all { "-2" } else { "-1" }, "-fitt", "1024", "-lv"] {
            a.push(s.into());
        }
        a.push(CUDA_CHILD_VERBOSITY.to_string().into());
        a
    }

    /// The child's `CUDA_VISIBLE_DEVICES`: the warden's pin, else the user's
    /// own value (never overridden), else none.
    pub fn visible_devices(plan: &SpawnPlan, user: Option<&str>) -> Option<String> {
        match plan.cuda().map(|c| &c.placement) {
            Some(CudaPlacement::Sized { pin: Some(uuid), .. }) => Some(uuid.clone()),
            _ => user.filter(|u| !u.trim().is_empty()).map(str::to_string),
        }
    }
}

/// The CUDA version a build recorded in its BUILD_INFO (`cuda 12.4`).
pub fn build_cuda_version(server: &std::path::Path) -> Option<(u32, u32)> {
    let info = std::fs::read_to_string(server.parent()?.parent()?.join("BUILD_INFO")).ok()?;
    let v = info.split_whitespace().skip_while(|w| *w != "cuda").nth(1)?;
    let (a, b) = v.split_once('.')?;
    Some((
        a.parse().ok()?,
        b.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().ok()?,
    ))
}

/// What the CUDA engine keeps about its live child.
#[derive(Debug, Default)]
pub struct CudaChild {
    /// What fit did with the layers.
    pub offload: Option<crate::law::cuda::Offload>,
    /// Why the brake never samples this child (partial offload, unsized).
    pub brake_off: Option<String>,
    /// The Shared GPU memory baseline (spill platforms).
    pub spill_baseline: Option<u64>,
    /// Whether Flash Attention runs, as llama.cpp said at load (else the
    /// static proof): the one source of the healthy Shared level, for the
    /// baseline and every sample alike.
    pub flash_attention: Option<bool>,
    /// The spill gauge it is read with (spill platforms only).
    pub gauge: Option<vram::SpillGauge>,
    /// The unreadable-gauge WARNING was given (re-armed by a good reading).
    pub gauge_warned: bool,
}
