//! The macOS pressure provider: `kern.memorystatus_vm_pressure_level`
//! (1 calm, 2 warning, 4 critical; never `kern.memorystatus_level`, which is
//! a free-memory percentage) and the system's swap-outs (`host_statistics64`'s
//! `swapouts`, in pages, times the page size: the counter `vm_stat` prints
//! as "Swapouts"), whose growth over a turn is its paging evidence
//! (`law::pressure::turn_paging`). The readings are system calls; what is
//! made of them (`level_of`, `law::pressure::paged_bytes`) is plain arithmetic, tested
//! on Linux with recorded values. Type-checked here by
//! `scripts/cross-check.sh`; never run on a Mac.

#[cfg(target_os = "macos")]
use super::pressure::{PressureProvider, RamSample};
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

#[cfg(target_os = "macos")]
impl PressureProvider for MacProvider {
    fn name(&self) -> &'static str {
        "macos (kern.memorystatus_vm_pressure_level)"
    }

    fn sample(&mut self) -> RamSample {
        let level = sysctl_i32(c"kern.memorystatus_vm_pressure_level")
            .ok_or_else(|| "kern.memorystatus_vm_pressure_level is unreadable".to_string())
            .and_then(|l| level_of(l).ok_or_else(|| format!("unknown macOS pressure level {l}")));
        RamSample {
            level,
            swapout_bytes: read_swapouts(),
            available_bytes: None,
        }
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
    let pages = (rc == libc::KERN_SUCCESS).then_some(stats.swapouts);
    crate::law::pressure::paged_bytes(pages, u64::try_from(page).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's three levels and nothing else.
    #[test]
    fn the_kernel_levels() {
        let rows = [(1, Some(Level::Calm)), (2, Some(Level::Warning)), (4, Some(Level::Critical)), (0, None), (3, None), (100, None)];
        for (k, want) in rows {
            assert_eq!(level_of(k), want, "{k}");
        }
    }
}
