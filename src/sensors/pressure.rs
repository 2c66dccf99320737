//! The RAM pressure providers behind one trait, one per OS: Linux (PSI and
//! available memory, `sensors::linux`), macOS (`kern.memorystatus_vm_pressure_level`,
//! `sensors::macos`), Windows (the memory load, `sensors::windows`). On a
//! platform without one, `default_provider` is `None` and the brake is off
//! with one WARNING (never a silent no-op).

use crate::law::brake::Level;

/// One RAM sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RamSample {
    /// The level, or why it cannot be read (the brake then turns off).
    pub level: Result<Level, String>,
    /// The system's cumulative swap-outs in bytes, when readable.
    pub swapout_bytes: Option<u64>,
    /// The memory available now (the cgroup's when it bounds the process),
    /// where the platform's reading has it (the dashboard's chart).
    pub available_bytes: Option<u64>,
}

/// A source of RAM pressure readings.
pub trait PressureProvider: Send {
    /// What it reads, for the logs.
    fn name(&self) -> &'static str;
    /// Takes one sample.
    fn sample(&mut self) -> RamSample;
}

/// This platform's provider, if it has one.
pub fn default_provider() -> Option<Box<dyn PressureProvider>> {
    #[cfg(target_os = "linux")]
    {
        Some(Box::new(super::linux::LinuxProvider::new()))
    }
    #[cfg(target_os = "macos")]
    {
        Some(Box::new(super::macos::MacProvider))
    }
    #[cfg(windows)]
    {
        Some(Box::new(super::windows::WindowsProvider::default()))
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
    {
        None
    }
}
