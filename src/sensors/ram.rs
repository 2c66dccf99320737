//! The RAM total the window law sizes against: the machine's physical memory,
//! bounded by the warden's own memory cgroup when that has a finite limit (a
//! container, a systemd slice with `MemoryMax=`). cgroup v2 reads
//! `memory.max` ("max" = none), v1 reads `memory.limit_in_bytes` (whose
//! "none" is a huge number such as 9223372036854771712: any limit at or above
//! the physical total bounds nothing). Only our own group counts, not its
//! ancestors (the spec's rule); `cgroup` finds and reads it.
//! `WARDEN_RAM_OVERRIDE_GB` (QA) replaces all.

pub use crate::law::types::{RamSource, RamTotal};

use super::cgroup::CgroupPaths;

/// The effective total from the physical total and a cgroup limit.
pub fn effective(physical: u64, limit: Option<(u64, RamSource)>) -> RamTotal {
    match limit {
        Some((l, source)) if l < physical => RamTotal { bytes: l, source },
        _ => RamTotal {
            bytes: physical,
            source: RamSource::Physical,
        },
    }
}

/// Our cgroup's memory limit, if the platform has one.
pub fn cgroup_limit() -> Option<(u64, RamSource)> {
    CgroupPaths::ours()?.limit()
}

/// The kernel's OOM-kill count for our memory cgroup, when readable. A move
/// during a child's life tells a silent SIGKILL apart from any other.
pub fn oom_kill_count() -> Option<u64> {
    CgroupPaths::ours()?.oom_kills()
}

/// The `oom_kill N` line of `memory.events` / `memory.oom_control`.
#[cfg(any(test, feature = "testing"))]
pub fn parse_oom_kill(content: &str) -> Option<u64> {
    super::cgroup::counter(content, "oom_kill")
}

/// Assumed when the platform will not say how much memory it has: small
/// enough that the window law stays on the safe side of most machines.
pub const UNKNOWN_RAM_BYTES: u64 = 8 << 30;

/// The machine's physical memory.
pub fn physical_total() -> u64 {
    let total = sysinfo::System::new()
        .ok()
        .map(|mut sys| {
            sys.refresh_memory();
            sys.total_memory()
        })
        .filter(|&t| t > 0);
    total.unwrap_or_else(|| {
        tracing::warn!("the machine's memory total is unreadable; sizing windows as if it had 8 GiB");
        UNKNOWN_RAM_BYTES
    })
}

/// The RAM total the window law uses: the override, else physical bounded by
/// our cgroup.
pub fn ram_total(override_bytes: Option<u64>) -> RamTotal {
    if let Some(bytes) = override_bytes {
        return RamTotal {
            bytes,
            source: RamSource::Override,
        };
    }
    effective(physical_total(), cgroup_limit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sensors::cgroup::parse_limit;

    /// A cgroup limit bounds the total only when it is a number below it.
    #[test]
    fn limits_bound_only_when_below_physical() {
        let phys = 24u64 << 30;
        let rows = [
            // why: v2 "max" is no limit
            ("max\n", RamSource::CgroupV2, phys, RamSource::Physical),
            // why: v1's "no limit" is a huge number, at or above physical: ignored
            ("9223372036854771712\n", RamSource::CgroupV1, phys, RamSource::Physical),
            // why: a finite container limit bounds the total
            ("4294967296\n", RamSource::CgroupV2, 4 << 30, RamSource::CgroupV2),
            ("2147483648", RamSource::CgroupV1, 2 << 30, RamSource::CgroupV1),
            // why: garbage reads as no limit, never as 0
            ("lots", RamSource::CgroupV1, phys, RamSource::Physical),
        ];
        for (i, (content, src, bytes, source)) in rows.into_iter().enumerate() {
            let got = effective(phys, parse_limit(content).map(|l| (l, src)));
            assert_eq!(got, RamTotal { bytes, source }, "row {i}");
        }
    }
}
