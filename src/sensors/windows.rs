//! The Windows pressure provider: the system memory load
//! (`GlobalMemoryStatusEx`'s `dwMemoryLoad`, percent in use) mapped to a
//! level, and paging from PDH's `\Memory\Pages Output/sec`: a rate counter
//! whose *raw* value (`PdhGetRawCounterValue`'s `FirstValue`) is the
//! cumulative count of pages written to the paging file since boot, so its
//! growth over a turn, times the page size, is the turn's swap-outs
//! (`law::pressure::paged_bytes`, `turn_paging`). A counter PDH cannot open
//! is the spec's "missing paging counter" case: one WARNING (the sensor's),
//! and the level decides alone. Type-checked here
//! (`scripts/cross-check.sh`); never run on Windows.

use super::pressure::{PressureProvider, RamSample};
use crate::law::brake::Level;

/// Memory load (percent) from which the level is warning.
pub const LOAD_WARNING_PCT: u32 = 85;
/// Memory load from which the level is critical.
pub const LOAD_CRITICAL_PCT: u32 = 95;

/// The Windows provider.
#[derive(Debug, Default)]
pub struct WindowsProvider {
    /// The open PDH query on the paging counter (`None` until the first
    /// sample, `Some(None)` when it cannot be opened).
    paging: Option<Option<PagingCounter>>,
}

/// An open PDH query with `\Memory\Pages Output/sec` added.
#[derive(Debug)]
struct PagingCounter {
    query: windows_sys::Win32::System::Performance::PDH_HQUERY,
    counter: windows_sys::Win32::System::Performance::PDH_HCOUNTER,
    page_size: u64,
}

// SAFETY: PDH handles are process-wide; the provider is used by one thread
// at a time (the sensor actor owns it).
unsafe impl Send for PagingCounter {}

impl PagingCounter {
    /// Opens the query, `None` when PDH has no such counter.
    fn open() -> Option<Self> {
        use windows_sys::Win32::System::Performance::{PdhAddEnglishCounterW, PdhCloseQuery, PdhOpenQueryW};
        use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};
        let path: Vec<u16> = "\\Memory\\Pages Output/sec".encode_utf16().chain(std::iter::once(0)).collect();
        // SAFETY: the handles are written by PDH and closed on failure;
        // SYSTEM_INFO is plain data GetSystemInfo fills.
        unsafe {
            let mut query = std::ptr::null_mut();
            if PdhOpenQueryW(std::ptr::null(), 0, &mut query) != 0 {
                return None;
            }
            let mut counter = std::ptr::null_mut();
            if PdhAddEnglishCounterW(query, path.as_ptr(), 0, &mut counter) != 0 {
                PdhCloseQuery(query);
                return None;
            }
            let mut info: SYSTEM_INFO = std::mem::zeroed();
            GetSystemInfo(&mut info);
            Some(Self {
                query,
                counter,
                page_size: u64::from(info.dwPageSize),
            })
        }
    }

    /// The cumulative bytes paged out now.
    fn read(&self) -> Option<u64> {
        use windows_sys::Win32::System::Performance::{PDH_RAW_COUNTER, PdhCollectQueryData, PdhGetRawCounterValue};
        // SAFETY: the query and counter are open (closed only in Drop);
        // PDH_RAW_COUNTER is plain data PDH fills.
        unsafe {
            if PdhCollectQueryData(self.query) != 0 {
                return None;
            }
            let mut raw: PDH_RAW_COUNTER = std::mem::zeroed();
            if PdhGetRawCounterValue(self.counter, std::ptr::null_mut(), &mut raw) != 0 {
                return None;
            }
            crate::law::pressure::paged_bytes(u64::try_from(raw.FirstValue).ok(), Some(self.page_size))
        }
    }
}

impl Drop for PagingCounter {
    fn drop(&mut self) {
        // SAFETY: the query is ours and closed once.
        unsafe { windows_sys::Win32::System::Performance::PdhCloseQuery(self.query) };
    }
}

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
        let paging = self.paging.get_or_insert_with(PagingCounter::open);
        RamSample {
            level,
            swapout_bytes: paging.as_ref().and_then(PagingCounter::read),
            // ullAvailPhys: what the chart draws on the other platforms.
            available_bytes: ok.then_some(st.ullAvailPhys),
        }
    }
}
