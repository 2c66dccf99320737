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

use serde::Serialize;

use super::SpawnPlan;
use crate::law::cuda::{self, CudaPlacement};
use crate::law::window::{self, ModelShape, Window};

/// The child verbosity that shows the lines the CUDA engine reads.
pub const CUDA_CHILD_VERBOSITY: u8 = 4;

/// Where the engine learns of the GPUs.
#[derive(Debug, Clone)]
pub enum GpuSource {
    /// NVML, read at every load.
    Nvml,
    /// A fixed list (tests: the spill path driven on a machine without a GPU).
    Fixed(Vec<cuda::GpuDevice>),
}

impl GpuSource {
    fn snapshot(&self) -> Result<nvml::GpuSnapshot, String> {
        match self {
            Self::Nvml => nvml::snapshot(),
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
            Self::Fixed(_) => None,
        }
    }
}

/// The CUDA engine's own state.
#[derive(Debug, Clone)]
pub struct CudaEngine {
    /// The CUDA build of llama-server.
    pub server: PathBuf,
    /// The CUDA version it was built with (its BUILD_INFO), for the pre-flight.
    pub build_cuda: Option<(u32, u32)>,
    /// The GPUs.
    pub gpus: GpuSource,
}

/// The CUDA part of a spawn plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaSpawn {
    /// Where the child runs.
    pub placement: CudaPlacement,
    /// The window the law gave at load, before any cap: brake respawns fold
    /// their cap into it and never read NVML again.
    pub static_window: Option<u32>,
    /// Flash Attention proven for the model (the slope the window assumed).
    pub flash_attention: bool,
    /// `-ngl -2` (all layers, no fit) instead of `-ngl -1`: the spill brake's
    /// respawns, which must spill rather than drop layers.
    pub all_layers: bool,
}

impl CudaEngine {
    /// The placement and the window for a load: NVML's free and total
    /// memory of the chosen GPU now (`WARDEN_VRAM_OVERRIDE_GB` standing in
    /// for the free memory).
    pub fn plan_load(
        &self,
        shape: Option<&ModelShape>,
        facts: Option<&crate::gguf::ModelFacts>,
        cap: Option<u32>,
        pin: Option<u32>,
        user_visible: Option<&str>,
        vram_override: Option<u64>,
    ) -> (Window, CudaSpawn) {
        let placement = match self.gpus.snapshot() {
            Ok(s) => cuda::place(&s.devices, user_visible),
            Err(why) => {
                tracing::warn!("[CUDA_Engine] {why}; the window is left to llama-server's fit");
                CudaPlacement::Unsized
            }
        };
        let fa = facts.is_some_and(|f| {
            window::fa_proven(f.key_length, f.value_length, f.max_alibi_bias.is_some_and(|b| b > 0.0))
        });
        let slope = window::cuda_slope(fa, facts.map_or(0, |f| f.head_count_max()));
        let sized = |cap| match (&placement, shape) {
            (CudaPlacement::Sized { device, .. }, Some(s)) => {
                window::cuda(s, cuda::vram_for_sizing(device, vram_override), slope, cap, pin)
            }
            _ => pin.map_or(Window::Unsized, |ctx| Window::Pinned { ctx }),
        };
        let static_window = sized(None).ctx();
        let w = sized(cap);
        (
            w,
            CudaSpawn {
                placement,
                static_window,
                flash_attention: fa,
                all_layers: false,
            },
        )
    }

    /// The engine's argv for a plan (the fixed flags come after).
    pub fn argv(&self, plan: &SpawnPlan) -> Vec<OsString> {
        let mut a = super::llama::model_args(plan);
        let all = plan.cuda.as_ref().is_some_and(|c| c.all_layers);
        for s in ["-ngl", if all { "-2" } else { "-1" }, "-fitt", "1024", "-lv"] {
            a.push(s.into());
        }
        a.push(CUDA_CHILD_VERBOSITY.to_string().into());
        a
    }

    /// The child's `CUDA_VISIBLE_DEVICES`: the warden's pin, else the user's
    /// own value (never overridden), else none.
    pub fn visible_devices(plan: &SpawnPlan, user: Option<&str>) -> Option<String> {
        match plan.cuda.as_ref().map(|c| &c.placement) {
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
}
