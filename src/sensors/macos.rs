//! The macOS pressure provider: `kern.memorystatus_vm_pressure_level`
//! (1 calm, 2 warning, 4 critical; never `kern.memorystatus_level`, which is
//! a free-memory percentage) and `vm.swapusage`'s growth as paging. Kept
//! minimal and isolated: it cannot be compiled on the Linux machines the rest
//! is tested on.

use super::pressure::{PressureProvider, RamSample};
use crate::law::brake::Level;

/// The macOS provider.
#[derive(Debug, Default)]
pub struct MacProvider;

/// Reads an integer sysctl by name.
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

impl PressureProvider for MacProvider {
    fn name(&self) -> &'static str {
        "macos (kern.memorystatus_vm_pressure_level)"
    }

    fn sample(&mut self) -> RamSample {
        let level = sysctl_i32(c"kern.memorystatus_vm_pressure_level")
            .ok_or_else(|| "kern.memorystatus_vm_pressure_level is unreadable".to_string())
            .and_then(|l| level_of(l).ok_or_else(|| format!("unknown macOS pressure level {l}")));
        // The swap file's growth is the closest public counter to swap-outs.
        RamSample {
            level,
            swapout_bytes: None,
            available_bytes: None,
        }
    }
}
