//! The RAM total the window law sizes against: the machine's physical memory,
//! bounded by the warden's own memory cgroup when that has a finite limit (a
//! container, a systemd slice with `MemoryMax=`). cgroup v2 reads
//! `memory.max` ("max" = none), v1 reads `memory.limit_in_bytes` (whose
//! "none" is a huge number such as 9223372036854771712: any limit at or above
//! the physical total bounds nothing). Only our own group counts, not its
//! ancestors (the spec's rule). `WARDEN_RAM_OVERRIDE_GB` (QA) replaces all.
//!
//! Parsing is split from reading so the rules are tested on strings.

use std::path::{Path, PathBuf};

pub use crate::law::types::{RamSource, RamTotal};

/// Our memory cgroup's files, as `/proc/self/cgroup` locates them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupPaths {
    /// Unified hierarchy: the group's directory.
    V2(PathBuf),
    /// v1 memory controller: the group's directory.
    V1(PathBuf),
}

/// Parses `/proc/self/cgroup` into our memory group's directory under `root`
/// (normally `/sys/fs/cgroup`). A v1 `memory` controller line wins over the
/// v2 `0::` line on a hybrid machine, since v1 then holds the memory limits.
pub fn locate_cgroup(proc_self_cgroup: &str, root: &Path) -> Option<CgroupPaths> {
    let mut v2 = None;
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if ctrls.split(',').any(|c| c == "memory") {
            return Some(CgroupPaths::V1(root.join("memory").join(rel)));
        }
        if id == "0" && ctrls.is_empty() {
            v2 = Some(CgroupPaths::V2(root.join(rel)));
        }
    }
    v2
}

/// Parses a limit file's content: `None` for "max" or garbage.
pub fn parse_limit(content: &str) -> Option<u64> {
    let t = content.trim();
    if t == "max" {
        return None;
    }
    t.parse().ok()
}

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

/// Reads our cgroup's memory limit, if the platform has one.
pub fn cgroup_limit() -> Option<(u64, RamSource)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    match locate_cgroup(&text, Path::new("/sys/fs/cgroup"))? {
        CgroupPaths::V2(dir) => {
            parse_limit(&std::fs::read_to_string(dir.join("memory.max")).ok()?).map(|l| (l, RamSource::CgroupV2))
        }
        CgroupPaths::V1(dir) => parse_limit(&std::fs::read_to_string(dir.join("memory.limit_in_bytes")).ok()?)
            .map(|l| (l, RamSource::CgroupV1)),
    }
}

/// The kernel's OOM-kill count for our memory cgroup (v2 `memory.events`,
/// v1 `memory.oom_control`), when readable. A move during a child's life
/// tells a silent SIGKILL apart from any other.
pub fn oom_kill_count() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let file = match locate_cgroup(&text, Path::new("/sys/fs/cgroup"))? {
        CgroupPaths::V2(dir) => dir.join("memory.events"),
        CgroupPaths::V1(dir) => dir.join("memory.oom_control"),
    };
    parse_oom_kill(&std::fs::read_to_string(file).ok()?)
}

/// The `oom_kill N` line of `memory.events` / `memory.oom_control`.
pub fn parse_oom_kill(content: &str) -> Option<u64> {
    content
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill ").and_then(|n| n.trim().parse().ok()))
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

    #[test]
    fn cgroup_location_rows() {
        let root = Path::new("/sys/fs/cgroup");
        let rows: &[(&str, Option<CgroupPaths>)] = &[
            // why: pure v2: the 0:: line names our group
            (
                "0::/user.slice/app.scope\n",
                Some(CgroupPaths::V2(root.join("user.slice/app.scope"))),
            ),
            // why: hybrid (these machines): the v1 memory controller holds the limit
            (
                "12:memory:/\n11:cpu,cpuacct:/\n0::/\n",
                Some(CgroupPaths::V1(root.join("memory"))),
            ),
            // why: a v1 line naming memory among several controllers
            (
                "4:memory,hugetlb:/docker/abc\n",
                Some(CgroupPaths::V1(root.join("memory/docker/abc"))),
            ),
            // why: no memory controller and no v2 line: nothing to read
            ("3:cpu:/\n", None),
        ];
        for (i, (text, want)) in rows.iter().enumerate() {
            assert_eq!(locate_cgroup(text, root), *want, "row {i}");
        }
    }

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

    #[test]
    fn oom_kill_counter_parses_both_layouts() {
        assert_eq!(parse_oom_kill("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n"), Some(2));
        assert_eq!(parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"), Some(7));
        assert_eq!(parse_oom_kill("oom 1\n"), None);
    }
}
