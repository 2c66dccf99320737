//! OS readings: the RAM total (with the cgroup bound), the child's anonymous
//! memory, and the memory brake's pressure providers, one per OS.

pub mod footprint;
#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;
pub mod pressure;
pub mod ram;
#[cfg(windows)]
pub mod windows;
