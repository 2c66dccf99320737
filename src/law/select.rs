//! Engine selection at start (the spec's `get_engine`), and the user's
//! preference applied after it.
//!
//! macOS on Apple Silicon → MLX; NVML reports a device → CUDA; otherwise CPU.
//! `WARDEN_FORCE_CPU=1` wins over everything. A preference of `cpu` replaces
//! CUDA by CPU (safe: both serve the same GGUF catalog); `WARDEN_ENGINE=mlx`
//! selects MLX anywhere (how it is tested on Linux); `cuda` asked without a
//! device falls back to CPU with a reason.

use super::types::{EngineKind, EnginePreference};

/// What selection looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platform {
    /// `std::env::consts::OS`-style: "macos", "linux", "windows".
    pub os: &'static str,
    /// Apple Silicon (or any arm64 Mac).
    pub arm: bool,
    /// NVML's device count (0 when NVML is absent).
    pub nvidia_devices: u32,
}

/// The engine chosen, and why when it is not what was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The engine.
    pub kind: EngineKind,
    /// A notice for the user when the choice overrode a preference.
    pub note: Option<String>,
}

/// Whether selection needs NVML's device count at all: not when the CPU is
/// forced (the spec: forcing the CPU bypasses GPU detection entirely: a
/// person whose NVIDIA driver is broken, the very reason to force it, must
/// not be stopped or slowed by it), not when another engine is asked for,
/// and not on Apple Silicon, where `auto` is MLX.
pub fn needs_gpu_probe(os: &str, arm: bool, pref: EnginePreference, force_cpu: bool) -> bool {
    match pref {
        _ if force_cpu => false,
        EnginePreference::Cpu | EnginePreference::Mlx => false,
        EnginePreference::Cuda => true,
        EnginePreference::Auto => !(os == "macos" && arm),
    }
}

/// Chooses the engine.
pub fn select(p: Platform, pref: EnginePreference, force_cpu: bool) -> Selection {
    let plain = |kind| Selection { kind, note: None };
    if force_cpu {
        return plain(EngineKind::Cpu);
    }
    let auto = if p.os == "macos" && p.arm {
        EngineKind::Mlx
    } else if p.nvidia_devices > 0 {
        EngineKind::Cuda
    } else {
        EngineKind::Cpu
    };
    match pref {
        EnginePreference::Auto => plain(auto),
        EnginePreference::Cpu => plain(EngineKind::Cpu),
        EnginePreference::Mlx => plain(EngineKind::Mlx),
        EnginePreference::Cuda if p.nvidia_devices > 0 => plain(EngineKind::Cuda),
        EnginePreference::Cuda => Selection {
            kind: EngineKind::Cpu,
            note: Some("the CUDA engine was asked for, but NVML sees no NVIDIA device; using the CPU engine".into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EnginePreference as P;

    #[test]
    fn selection_rows() {
        let mac = Platform {
            os: "macos",
            arm: true,
            nvidia_devices: 0,
        };
        let intel_mac = Platform {
            os: "macos",
            arm: false,
            nvidia_devices: 0,
        };
        let gpu = Platform {
            os: "linux",
            arm: false,
            nvidia_devices: 1,
        };
        let cpu = Platform {
            os: "linux",
            arm: false,
            nvidia_devices: 0,
        };
        let rows = [
            // why: Apple Silicon runs MLX
            (mac, P::Auto, false, EngineKind::Mlx),
            // why: an Intel Mac has neither MLX nor CUDA
            (intel_mac, P::Auto, false, EngineKind::Cpu),
            // why: an NVIDIA device selects CUDA
            (gpu, P::Auto, false, EngineKind::Cuda),
            (cpu, P::Auto, false, EngineKind::Cpu),
            // why: WARDEN_FORCE_CPU wins over the hardware and the preference
            (gpu, P::Cuda, true, EngineKind::Cpu),
            (mac, P::Mlx, true, EngineKind::Cpu),
            // why: the user's cpu preference replaces CUDA
            (gpu, P::Cpu, false, EngineKind::Cpu),
            // why: WARDEN_ENGINE=mlx selects MLX anywhere (tests on Linux)
            (cpu, P::Mlx, false, EngineKind::Mlx),
            // why: cuda without a device falls back to CPU
            (cpu, P::Cuda, false, EngineKind::Cpu),
        ];
        for (i, (p, pref, force, want)) in rows.into_iter().enumerate() {
            assert_eq!(select(p, pref, force).kind, want, "row {i}");
        }
        assert!(select(cpu, P::Cuda, false).note.is_some());
    }

    /// NVML is asked only when its answer could choose CUDA.
    #[test]
    fn the_gpu_is_probed_only_when_it_could_be_chosen() {
        let rows = [
            // why: WARDEN_FORCE_CPU bypasses GPU detection entirely
            ("linux", false, P::Auto, true, false),
            ("linux", false, P::Cuda, true, false),
            ("windows", false, P::Auto, true, false),
            // why: auto on Linux or Windows may find a device
            ("linux", false, P::Auto, false, true),
            ("windows", false, P::Auto, false, true),
            // why: cuda asked must see whether a device is there
            ("linux", false, P::Cuda, false, true),
            // why: another engine asked needs no device count
            ("linux", false, P::Cpu, false, false),
            ("linux", false, P::Mlx, false, false),
            // why: Apple Silicon's auto is MLX
            ("macos", true, P::Auto, false, false),
        ];
        for (i, (os, arm, pref, force, want)) in rows.into_iter().enumerate() {
            assert_eq!(needs_gpu_probe(os, arm, pref, force), want, "row {i}");
        }
    }
}
