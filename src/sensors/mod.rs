//! OS readings: the RAM total (with the cgroup bound), the child's anonymous
//! memory, the memory brake's pressure providers, one per OS, and the
//! engine's view of the sensor's latest reading. The GPU's readings (NVML,
//! the spill gauge) are the CUDA engine's (`engines::cuda`).

// cgroup v1/v2 paths and counters: Linux's alone, parsed (and tested)
// everywhere.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub mod cgroup;
pub mod footprint;
pub mod history;
#[cfg(target_os = "linux")]
pub mod linux;
// macOS's readings are system calls compiled there alone; what is made of
// them is compiled (and tested) everywhere.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub mod macos;
pub mod pressure;
pub mod ram;
pub mod view;
// Windows' readings are system calls compiled there alone; what is made of
// them is compiled (and tested) everywhere.
#[cfg_attr(not(windows), allow(dead_code))]
pub mod windows;
