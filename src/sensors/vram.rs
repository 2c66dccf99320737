//! The GPU spill gauge behind one trait: on Windows, PDH's
//! `\GPU Process Memory(pid_<pid>_luid_..._phys_<n>)\Shared Usage` (English
//! counter names, a gauge) summed over the child's instances. NVML has no
//! per-process memory under WDDM, and Linux has no spill at all (an
//! allocation that does not fit fails), so elsewhere there is no provider.

/// A source of the child's Shared GPU memory.
pub trait VramProvider: Send {
    /// The child's Shared Usage in bytes, or why it cannot be read.
    fn shared_bytes(&mut self, pid: u32) -> Result<u64, String>;
}

/// This platform's gauge, if it has one.
pub fn default_provider() -> Option<Box<dyn VramProvider>> {
    #[cfg(windows)]
    {
        Some(Box::new(super::windows_vram::PdhVram))
    }
    #[cfg(not(windows))]
    {
        None
    }
}
