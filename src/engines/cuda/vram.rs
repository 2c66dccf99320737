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

/// The engine's spill gauge: this platform's provider with the QA seam
/// (`WARDEN_FORCE_MEMORY_PRESSURE=vram-warning|vram-critical`), read by the
/// CUDA engine itself for its own child (no other actor holds its pid).
pub struct SpillGauge {
    provider: Option<Box<dyn VramProvider>>,
    forced: Option<crate::config::ForcedPressure>,
}

impl std::fmt::Debug for SpillGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillGauge")
            .field("provider", &self.provider.is_some())
            .field("forced", &self.forced)
            .finish()
    }
}

impl SpillGauge {
    /// This platform's gauge with the configured seam.
    pub fn new(forced: Option<crate::config::ForcedPressure>) -> Self {
        Self {
            provider: default_provider(),
            forced,
        }
    }

    /// The child's Shared GPU memory. The seam's tiers sit at `healthy`
    /// (`law::cuda::healthy_shared_bytes`) plus the tier, so the spill is
    /// exactly at the tier at any window.
    pub fn read(&mut self, pid: u32, healthy: u64) -> Result<u64, String> {
        use crate::config::ForcedPressure;
        match self.forced {
            Some(ForcedPressure::VramWarning) => return Ok(healthy + crate::law::cuda::SPILL_WARNING_BYTES),
            Some(ForcedPressure::VramCritical) => return Ok(healthy + crate::law::cuda::SPILL_CRITICAL_BYTES),
            _ => {}
        }
        match self.provider.as_mut() {
            Some(p) => p.shared_bytes(pid),
            None => Err("no GPU spill gauge on this platform".into()),
        }
    }
}
