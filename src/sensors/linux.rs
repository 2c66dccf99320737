//! The Linux pressure provider: PSI (`/proc/pressure/memory`), available
//! memory against the RAM total bounded by the warden's memory cgroup (v1
//! here, v2 elsewhere), and swap-outs (`/proc/vmstat` `pswpout`).
//!
//! Inside a cgroup with a finite limit, system-wide PSI and MemAvailable say
//! nothing of the group (FACTS.md: PSI stays at 0 while the group nears its
//! OOM limit), so the group's own usage against its limit is the available
//! memory there: `limit - (usage - inactive file pages)`, the file pages
//! being reclaimable (`cgroup`). The `/proc` files are read by `procfs`,
//! each once per sample.

use procfs::{Current, Meminfo, MemoryPressure, VmStat};

use super::cgroup::CgroupPaths;
use super::pressure::{PressureProvider, RamSample};
use super::ram;
use crate::law::pressure::{self, Psi};

/// A PSI average as the kernel printed it (two decimals): procfs parses it
/// into an f32, whose widening to f64 would put 12.5000004 where the file
/// says 12.50 before the law compares it with its thresholds.
fn kernel_percent(avg: f32) -> f64 {
    (f64::from(avg) * 100.0).round() / 100.0
}

/// `/proc/pressure/memory`, which has a `full` line on every kernel with
/// PSI (only the CPU's lacked one before 5.13).
fn psi() -> Option<Psi> {
    let p = MemoryPressure::current().ok()?;
    Some(Psi {
        some_avg10: kernel_percent(p.some.avg10),
        full_avg10: kernel_percent(p.full.avg10),
    })
}

/// The Linux provider.
#[derive(Debug)]
pub struct LinuxProvider {
    /// Our memory cgroup, when it has a finite limit: (dir, limit).
    cgroup: Option<(CgroupPaths, u64)>,
}

impl LinuxProvider {
    /// The provider for this process.
    pub fn new() -> Self {
        let physical = ram::physical_total();
        let cgroup = CgroupPaths::ours().and_then(|g| {
            let (limit, _) = g.limit()?;
            (limit < physical).then_some((g, limit))
        });
        Self { cgroup }
    }

    /// Available memory and the total it is measured against.
    fn available(&self) -> Option<(u64, u64)> {
        match &self.cgroup {
            Some((g, limit)) => Some((limit.saturating_sub(g.unreclaimable_usage()?), *limit)),
            None => {
                let m = Meminfo::current().ok()?;
                Some((m.mem_available?, m.mem_total))
            }
        }
    }
}

impl Default for LinuxProvider {
    fn default() -> Self {
        Self::new()
    }
}

/// Bytes per page for `pswpout` (Linux counts 4 KiB pages on every platform
/// the warden targets; huge pages are not swapped).
const PAGE_BYTES: u64 = 4096;

impl PressureProvider for LinuxProvider {
    fn name(&self) -> &'static str {
        "linux (PSI, available memory, pswpout)"
    }

    fn sample(&mut self) -> RamSample {
        let psi = psi();
        let available = self.available();
        let level = pressure::level(psi, available).ok_or_else(|| {
            "neither /proc/pressure/memory nor the available memory (/proc/meminfo or the cgroup's usage) is readable"
                .to_string()
        });
        let swapout_bytes = VmStat::current()
            .ok()
            .and_then(|v| v.0.get("pswpout").and_then(|&pages| u64::try_from(pages).ok()))
            .map(|pages| pages * PAGE_BYTES);
        RamSample {
            level,
            swapout_bytes,
            available_bytes: available.map(|(a, _)| a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The law sees PSI's averages exactly as the kernel printed them.
    #[test]
    fn psi_averages_keep_the_kernels_two_decimals() {
        for (printed, want) in [(12.5f32, 12.5), (0.4, 0.4), (10.01, 10.01), (0.0, 0.0), (99.99, 99.99)] {
            assert_eq!(kernel_percent(printed), want, "{printed}");
        }
    }

    /// PSI or the available memory is readable on any Linux.
    #[test]
    fn this_machine_gives_a_level() {
        let mut p = LinuxProvider::new();
        assert!(p.sample().level.is_ok(), "PSI or meminfo must be readable on Linux");
    }
}
