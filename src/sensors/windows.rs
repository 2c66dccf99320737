//! The Windows pressure provider: the system memory load
//! (`GlobalMemoryStatusEx`'s `dwMemoryLoad`, percent in use) mapped to a
//! level, and paging from PDH's `\Memory\Pages Output/sec`: a rate counter
//! whose *raw* value (`PdhGetRawCounterValue`'s `FirstValue`) is the
//! cumulative count of pages written to the paging file since boot, so its
//! growth over a turn, times the page size, is the turn's swap-outs
//! (`law::pressure::paged_bytes`, `turn_paging`). A counter PDH cannot open
//! is the spec's "missing paging counter" case: one WARNING (the sensor's),
//! and the level decides alone. What is made of the readings (`reading`,
//! `paged_out_bytes`) is plain arithmetic, compiled everywhere and tested on
//! Linux with recorded values; the calls are Windows' alone. Type-checked
//! here (`scripts/cross-check.sh`); never run on Windows.

#[cfg(windows)]
use super::pressure::PressureProvider;
use super::pressure::RamSample;
use crate::law::brake::Level;

/// Memory load (percent) from which the level is warning.
pub const LOAD_WARNING_PCT: u32 = 85;
/// Memory load from which the level is critical.
pub const LOAD_CRITICAL_PCT: u32 = 95;

/// The Windows provider.
#[cfg(windows)]
#[derive(Debug, Default)]
pub struct WindowsProvider {
    /// The open PDH query on the paging counter (`None` until the first
    /// sample, `Some(None)` when it cannot be opened).
    paging: Option<Option<PagingCounter>>,
}

/// An open PDH query with `\Memory\Pages Output/sec` added.
#[cfg(windows)]
#[derive(Debug)]
struct PagingCounter {
    query: windows_sys::Win32::System::Performance::PDH_HQUERY,
    counter: windows_sys::Win32::System::Performance::PDH_HCOUNTER,
    /// `GetSystemInfo`'s `dwPageSize`.
    page_size: u32,
}

// SAFETY: PDH handles are process-wide; the provider is used by one thread
// at a time (the sensor actor owns it).
#[cfg(windows)]
unsafe impl Send for PagingCounter {}

#[cfg(windows)]
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
                page_size: info.dwPageSize,
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
            paged_out_bytes(raw.FirstValue, self.page_size)
        }
    }
}

#[cfg(windows)]
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

/// The two fields of `MEMORYSTATUSEX` the sample reads, as plain numbers
/// (the windows-sys struct exists only on Windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStatus {
    /// `dwMemoryLoad`: percent of physical memory in use.
    pub load_pct: u32,
    /// `ullAvailPhys`, bytes.
    pub avail_phys_bytes: u64,
}

/// The sample from `GlobalMemoryStatusEx` (`None`: the call failed) and the
/// cumulative bytes paged out.
pub fn reading(status: Option<MemoryStatus>, swapout_bytes: Option<u64>) -> RamSample {
    RamSample {
        level: status
            .map(|s| level_of(s.load_pct))
            .ok_or_else(|| "GlobalMemoryStatusEx failed".to_string()),
        swapout_bytes,
        // ullAvailPhys: what the chart draws on the other platforms.
        available_bytes: status.map(|s| s.avail_phys_bytes),
    }
}

/// The cumulative bytes paged out from the raw `\Memory\Pages Output/sec`
/// (`PDH_RAW_COUNTER::FirstValue`, a signed count of pages) and
/// `dwPageSize`: a negative count is no count.
pub fn paged_out_bytes(first_value: i64, page_size: u32) -> Option<u64> {
    crate::law::pressure::paged_bytes(u64::try_from(first_value).ok(), Some(u64::from(page_size)))
}

#[cfg(windows)]
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
        let status = ok.then_some(MemoryStatus {
            load_pct: st.dwMemoryLoad,
            avail_phys_bytes: st.ullAvailPhys,
        });
        let paging = self.paging.get_or_insert_with(PagingCounter::open);
        reading(status, paging.as_ref().and_then(PagingCounter::read))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memory load's levels at and around the two thresholds.
    #[test]
    fn load_levels() {
        let rows = [
            (0, Level::Calm),
            (LOAD_WARNING_PCT - 1, Level::Calm),
            // why: the thresholds belong to the level above
            (LOAD_WARNING_PCT, Level::Warning),
            (LOAD_CRITICAL_PCT - 1, Level::Warning),
            (LOAD_CRITICAL_PCT, Level::Critical),
            (100, Level::Critical),
        ];
        for (i, (load, want)) in rows.into_iter().enumerate() {
            assert_eq!(level_of(load), want, "row {i}: load {load}%");
        }
    }

    /// The sample from `GlobalMemoryStatusEx` as recorded on a 32 GB
    /// desktop (`dwMemoryLoad` 47, `ullAvailPhys` 18,158,358,528) and on
    /// the same machine loading a model that does not fit.
    #[test]
    fn samples_from_the_memory_status() {
        let status = |load_pct, avail_phys_bytes| {
            Some(MemoryStatus {
                load_pct,
                avail_phys_bytes,
            })
        };
        let rows = [
            // why: the recorded reading: calm, and the chart's available bytes
            (status(47, 18_158_358_528), Ok(Level::Calm), Some(18_158_358_528)),
            (status(96, 1_221_853_184), Ok(Level::Critical), Some(1_221_853_184)),
            // why: the call failed: the brake turns off saying which call, and the chart has no point
            (None, Err("GlobalMemoryStatusEx failed".to_string()), None),
        ];
        for (i, (st, level, available)) in rows.into_iter().enumerate() {
            let got = reading(st, Some(7));
            assert_eq!((got.level, got.available_bytes), (level, available), "row {i}");
            assert_eq!(got.swapout_bytes, Some(7), "row {i}: the paging reading passes through");
        }
    }

    /// The raw `\Memory\Pages Output/sec` in bytes, as PDH and
    /// `GetSystemInfo` return them.
    #[test]
    fn pages_output_in_bytes() {
        let rows = [
            // why: recorded on the same desktop after a day up: 1,873,402 pages of 4 KiB
            (1_873_402, 4_096, Some(7_673_454_592)),
            // why: a machine that never paged reads zero, not unknown
            (0, 4_096, Some(0)),
            // why: FirstValue is signed: a negative count is garbage, not a huge one
            (-1, 4_096, None),
            // why: a zero page size is an unreadable one, not zero bytes paged
            (1_873_402, 0, None),
            // why: the largest raw value PDH can hold, in bytes, overflows: no figure
            (i64::MAX, 4_096, None),
        ];
        for (i, (raw, page, want)) in rows.into_iter().enumerate() {
            assert_eq!(paged_out_bytes(raw, page), want, "row {i}: {raw} pages of {page}");
        }
    }
}
