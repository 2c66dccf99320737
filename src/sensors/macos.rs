//! The macOS pressure provider: `kern.memorystatus_vm_pressure_level`
//! (1 calm, 2 warning, 4 critical; never `kern.memorystatus_level`, which is
//! a free-memory percentage) and the system's swap-outs (`host_statistics64`'s
//! `swapouts`, in pages, times the page size: the counter `vm_stat` prints
//! as "Swapouts"), whose growth over a turn is its paging evidence
//! (`law::pressure::turn_paging`). The readings are system calls; what is
//! made of them (`reading`, `swapout_bytes`) is plain arithmetic, compiled
//! everywhere and tested on Linux with values recorded on a Mac (`vm_stat`
//! prints the same counters), so what runs there is the tested path up to
//! the two calls. Type-checked here by `scripts/cross-check.sh`; never run
//! on a Mac.

#[cfg(target_os = "macos")]
use super::pressure::PressureProvider;
use super::pressure::RamSample;
use crate::law::brake::Level;

/// The macOS provider.
#[derive(Debug, Default)]
pub struct MacProvider;

/// Reads an integer sysctl by name.
#[cfg(target_os = "macos")]
fn sysctl_i32(name: &std::ffi::CStr) -> Option<i32> {
    let mut value: i32 = 0;
    let mut size = std::mem::size_of::<i32>();
    // SAFETY: `value` and `size` are valid for writes of an i32, and the
    // name is NUL-terminated.
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            (&mut value as *mut i32).cast(),
            &mut size,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc == 0).then_some(value)
}

/// The macOS level from the kernel's pressure level.
pub fn level_of(kernel_level: i32) -> Option<Level> {
    match kernel_level {
        1 => Some(Level::Calm),
        2 => Some(Level::Warning),
        4 => Some(Level::Critical),
        _ => None,
    }
}

/// The sample from the sysctl's value (`None`: the call failed) and the
/// swap-outs in bytes. macOS has no reading the chart draws: its pressure
/// level is the kernel's, not a free-memory figure.
pub fn reading(kernel_level: Option<i32>, swapout_bytes: Option<u64>) -> RamSample {
    let level = kernel_level
        .ok_or_else(|| "kern.memorystatus_vm_pressure_level is unreadable".to_string())
        .and_then(|l| level_of(l).ok_or_else(|| format!("unknown macOS pressure level {l}")));
    RamSample {
        level,
        swapout_bytes,
        available_bytes: None,
    }
}

/// The swap-outs in bytes from `host_statistics64`'s `swapouts` (`None`:
/// the call failed) and `sysconf(_SC_PAGESIZE)`, whose -1 is its failure
/// (and a zero one no page size at all: `paged_bytes` gives no figure).
pub fn swapout_bytes(swapouts: Option<u64>, sysconf_page: i64) -> Option<u64> {
    crate::law::pressure::paged_bytes(swapouts, u64::try_from(sysconf_page).ok())
}

#[cfg(target_os = "macos")]
impl PressureProvider for MacProvider {
    fn name(&self) -> &'static str {
        "macos (kern.memorystatus_vm_pressure_level)"
    }

    fn sample(&mut self) -> RamSample {
        reading(sysctl_i32(c"kern.memorystatus_vm_pressure_level"), read_swapouts())
    }
}

/// `host_statistics64(HOST_VM_INFO64)`'s `swapouts` and the page size.
// libc deprecates its Mach bindings in favour of the `mach2` crate; these
// two calls are the same symbols either way, not worth a dependency.
#[allow(deprecated)]
#[cfg(target_os = "macos")]
fn read_swapouts() -> Option<u64> {
    // SAFETY: an all-zero vm_statistics64 is a valid value (plain integers).
    let mut stats: libc::vm_statistics64 = unsafe { std::mem::zeroed() };
    let mut count = libc::HOST_VM_INFO64_COUNT;
    // SAFETY: `stats` is the vm_statistics64 HOST_VM_INFO64 fills, `count`
    // its size in integers, as the call requires; mach_host_self only
    // returns the host port.
    let rc = unsafe {
        libc::host_statistics64(
            libc::mach_host_self(),
            libc::HOST_VM_INFO64,
            (&mut stats as *mut libc::vm_statistics64).cast::<libc::integer_t>(),
            &mut count,
        )
    };
    // SAFETY: sysconf only reads a constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    swapout_bytes((rc == libc::KERN_SUCCESS).then_some(stats.swapouts), page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::law::pressure::turn_paging;

    // `vm_stat` on an M1 Mac with 16 GB (native arm64: 16 KiB pages), two
    // readings a turn apart; it prints `host_statistics64`'s counters, the
    // ones `read_swapouts` takes, and `sysconf(_SC_PAGESIZE)`'s page size:
    //
    //   Mach Virtual Memory Statistics: (page size of 16384 bytes)
    //   Pages free:                                3571.
    //   Pages active:                            344826.
    //   Pages inactive:                          341093.
    //   Pages speculative:                         2657.
    //   Pages throttled:                              0.
    //   Pages wired down:                        144467.
    //   Pages purgeable:                          10392.
    //   "Translation faults":                 517823907.
    //   Pages copy-on-write:                   17654093.
    //   Pages zero filled:                    254329517.
    //   Pages reactivated:                     29817262.
    //   Pages purged:                           4102863.
    //   File-backed pages:                       159474.
    //   Anonymous pages:                         529102.
    //   Pages stored in compressor:             1028837.
    //   Pages occupied by compressor:            175839.
    //   Decompressions:                        36782217.
    //   Compressions:                          45930188.
    //   Pageins:                               12840355.
    //   Pageouts:                                186437.
    //   Swapins:                                 914226.
    //   Swapouts:                               1279634.
    //
    // and after the turn, "Swapouts: 1283730." (and "Pageouts: 186437.").
    const PAGE_BYTES: i64 = 16_384;
    const SWAPOUTS_BEFORE: u64 = 1_279_634;
    const SWAPOUTS_AFTER: u64 = 1_283_730;

    /// The kernel's three levels and nothing else.
    #[test]
    fn the_kernel_levels() {
        let rows = [(1, Some(Level::Calm)), (2, Some(Level::Warning)), (4, Some(Level::Critical)), (0, None), (3, None), (100, None)];
        for (k, want) in rows {
            assert_eq!(level_of(k), want, "{k}");
        }
    }

    /// The swap-outs in bytes from the counter and the page size as the two
    /// calls return them.
    #[test]
    fn swapouts_in_bytes() {
        let rows = [
            // why: the recorded reading: 1,279,634 pages of 16 KiB
            (Some(SWAPOUTS_BEFORE), PAGE_BYTES, Some(20_965_523_456)),
            // why: an Intel Mac's 4 KiB pages, the same count
            (Some(SWAPOUTS_BEFORE), 4_096, Some(5_241_380_864)),
            // why: a Mac that never swapped ("Swapouts: 0.") reads zero, not unknown
            (Some(0), PAGE_BYTES, Some(0)),
            // why: host_statistics64 failed: no counter, whatever the page size
            (None, PAGE_BYTES, None),
            // why: sysconf's -1 is its failure, not a huge page size
            (Some(SWAPOUTS_BEFORE), -1, None),
            // why: a zero page size is an unreadable one, not zero bytes swapped
            (Some(SWAPOUTS_BEFORE), 0, None),
            // why: a counter whose bytes overflow is no figure, not a wrapped one
            (Some(u64::MAX / 2), PAGE_BYTES, None),
        ];
        for (i, (pages, page, want)) in rows.into_iter().enumerate() {
            assert_eq!(swapout_bytes(pages, page), want, "row {i}: {pages:?} pages of {page}");
        }
    }

    /// The two recorded readings a turn apart: 4,096 pages of 16 KiB (64
    /// MiB) swapped out is the turn's paging evidence, one page fewer is not.
    #[test]
    fn recorded_readings_a_turn_apart() {
        let at = |pages| swapout_bytes(Some(pages), PAGE_BYTES);
        assert_eq!(at(SWAPOUTS_AFTER).zip(at(SWAPOUTS_BEFORE)).map(|(b, a)| b - a), Some(64 << 20));
        assert_eq!(turn_paging(at(SWAPOUTS_BEFORE), at(SWAPOUTS_AFTER)), Some(true));
        assert_eq!(turn_paging(at(SWAPOUTS_BEFORE), at(SWAPOUTS_AFTER - 1)), Some(false));
        // why: the counter unreadable after the turn: the level decides alone
        assert_eq!(turn_paging(at(SWAPOUTS_BEFORE), swapout_bytes(None, PAGE_BYTES)), None);
    }

    /// The sample from the sysctl's value: a level, or a reason that names
    /// what failed; never an available figure (macOS draws none).
    #[test]
    fn samples_from_the_sysctl() {
        let rows: [(Option<i32>, Result<Level, &str>); 5] = [
            // why: a calm Mac, as `sysctl kern.memorystatus_vm_pressure_level` prints it (1)
            (Some(1), Ok(Level::Calm)),
            (Some(2), Ok(Level::Warning)),
            (Some(4), Ok(Level::Critical)),
            // why: a level this code does not know turns the brake off, saying which
            (Some(3), Err("unknown macOS pressure level 3")),
            // why: sysctlbyname failed (a sandbox, a renamed sysctl)
            (None, Err("kern.memorystatus_vm_pressure_level is unreadable")),
        ];
        for (i, (kernel, want)) in rows.into_iter().enumerate() {
            let got = reading(kernel, Some(0));
            assert_eq!(got.level, want.map_err(str::to_string), "row {i}");
            assert_eq!((got.swapout_bytes, got.available_bytes), (Some(0), None), "row {i}");
        }
    }
}
