//! OS readings: the RAM total (with the cgroup bound), the child's anonymous
//! memory, NVIDIA GPUs (NVML), the memory brake's pressure providers, one
//! per OS, the engine's view of the sensor's latest reading, and the GPU
//! spill gauge.

pub mod footprint;
pub mod history;
#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;
pub mod nvml;
pub mod pressure;
pub mod ram;
pub mod view;
pub mod vram;
#[cfg(windows)]
pub mod windows;
#[cfg(windows)]
pub mod windows_vram;
