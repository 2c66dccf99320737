//! The Windows pressure provider: the system memory load
//! (`GlobalMemoryStatusEx`'s `dwMemoryLoad`, percent in use) mapped to a
//! level. Paging (PDH's `\Memory\Pages Output/sec`) is not read: the spec's
//! "missing paging counter" case, one WARNING, and the level decides alone.
//! Kept minimal and isolated: it cannot be compiled on the Linux machines the
//! rest is tested on.

use super::pressure::{PressureProvider, RamSample};
use crate::law::brake::Level;

/// Memory load (percent) from which the level is warning.
pub const LOAD_WARNING_PCT: u32 = 85;
/// Memory load from which the level is critical.
pub const LOAD_CRITICAL_PCT: u32 = 95;

/// The Windows provider.
#[derive(Debug, Default)]
pub struct WindowsProvider;

/// The level from the memory load.
pub fn level_of(load_pct: u32) -> Level {
    if load_pct >= LOAD_CRITICAL_PCT {
        Level::Critical
    } else if load_pct >= LOAD_WARNING_PCT {
        Level::Warning
    } else {
        Level::Calm
    }
}

impl PressureProvider for WindowsProvider {
    fn name(&self) -> &'static str {
        "windows (GlobalMemoryStatusEx)"
    }

    fn sample(&mut self) -> RamSample {
        use windows_sys::Win32::System::SystemInformation::{GlobalMemoryStatusEx, MEMORYSTATUSEX};
        // SAFETY: MEMORYSTATUSEX is plain data; dwLength is set as the API requires.
        let mut st: MEMORYSTATUSEX = unsafe { std::mem::zeroed() };
        st.dwLength = std::mem::size_of::<MEMORYSTATUSEX>() as u32;
        // SAFETY: `st` is a valid, initialised MEMORYSTATUSEX.
        let ok = unsafe { GlobalMemoryStatusEx(&mut st) } != 0;
        let level = if ok {
            Ok(level_of(st.dwMemoryLoad))
        } else {
            Err("GlobalMemoryStatusEx failed".to_string())
        };
        RamSample {
            level,
            swapout_bytes: None,
            // ullAvailPhys: what the chart draws on the other platforms.
            available_bytes: ok.then_some(st.ullAvailPhys),
        }
    }
}
