//! Which engine runs here: selection (`law::select`) over what this
//! platform looks like, and the CUDA pre-flight; a CUDA machine that fails
//! it gets one clear notice (also in `/warden/status`) and the CPU engine.

use super::Backend;
use crate::config::WardenConfig;
use crate::error::EngineError;
use crate::law::select::{self, Platform};
use crate::status::EngineKind;

/// What the platform looks like to selection, read once at start: NVML's
/// device count (`count`) only when it could choose the engine
/// (`select::needs_gpu_probe`: never with `WARDEN_FORCE_CPU`).
fn platform(cfg: &WardenConfig, count: impl FnOnce() -> u32) -> Platform {
    let (os, arm) = (std::env::consts::OS, std::env::consts::ARCH == "aarch64");
    Platform {
        os,
        arm,
        nvidia_devices: if select::needs_gpu_probe(os, arm, cfg.engine, cfg.force_cpu) {
            count()
        } else {
            0
        },
    }
}

/// The CUDA pre-flight: the CUDA backend, or the reason this machine cannot
/// run it (no device the child may see, no CUDA build, a driver older than
/// the build's CUDA).
fn cuda_preflight(cfg: &WardenConfig) -> Result<Backend, String> {
    let snap = crate::engines::cuda::nvml::snapshot()?;
    let visible = crate::law::cuda::visible(&snap.devices, cfg.cuda_visible_devices.as_deref()).len() as u32;
    let server = cfg
        .llama_server
        .clone()
        .or_else(|| super::llama::find_flavour(cfg, super::llama::Flavour::Cuda).ok());
    let build_cuda = server.as_deref().and_then(super::cuda::build_cuda_version);
    if let Some(reason) = crate::law::cuda::preflight(visible, snap.driver_cuda, build_cuda, server.is_some()) {
        return Err(reason);
    }
    super::build(cfg, EngineKind::Cuda).map_err(|e| e.to_string())
}

/// The backend this machine runs, and the notice that says why it is not
/// the one asked for, when it is not.
pub fn choose(cfg: &WardenConfig) -> Result<(Backend, Option<String>), EngineError> {
    let selection = select::select(
        platform(cfg, crate::engines::cuda::nvml::device_count),
        cfg.engine,
        cfg.force_cpu,
    );
    if let Some(n) = &selection.note {
        tracing::warn!("{n}");
    }
    let mut note = selection.note.clone();
    let backend = match selection.kind {
        EngineKind::Cuda => match cuda_preflight(cfg) {
            Ok(b) => b,
            Err(reason) => {
                let msg = format!("the CUDA engine cannot run here: {reason}; using the CPU engine");
                tracing::warn!("{msg}");
                note = Some(msg);
                super::build(cfg, EngineKind::Cpu)?
            }
        },
        kind => super::build(cfg, kind)?,
    };
    Ok((backend, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `WARDEN_FORCE_CPU=1` never asks NVML; `auto` on Linux does.
    #[test]
    fn force_cpu_never_probes_the_gpu() {
        let forced = WardenConfig {
            force_cpu: true,
            ..WardenConfig::default()
        };
        let p = platform(&forced, || panic!("NVML was asked with WARDEN_FORCE_CPU=1"));
        assert_eq!(p.nvidia_devices, 0);
        if cfg!(target_os = "linux") {
            assert_eq!(platform(&WardenConfig::default(), || 3).nvidia_devices, 3);
        }
    }
}
