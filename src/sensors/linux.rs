//! The Linux pressure provider: PSI (`/proc/pressure/memory`), available
//! memory against the RAM total bounded by the warden's memory cgroup (v1
//! here, v2 elsewhere), and swap-outs (`/proc/vmstat` `pswpout`).
//!
//! Inside a cgroup with a finite limit, system-wide PSI and MemAvailable say
//! nothing of the group (FACTS.md: PSI stays at 0 while the group nears its
//! OOM limit), so the group's own usage against its limit is the available
//! memory there: `limit - (usage - inactive file pages)`, the file pages
//! being reclaimable. Parsing is split from reading and tested on strings.

use std::path::{Path, PathBuf};

use super::pressure::{PressureProvider, RamSample};
use super::ram::{self, CgroupPaths};
use crate::law::pressure::{self, Psi};

/// Parses `/proc/pressure/memory`.
pub fn parse_psi(text: &str) -> Option<Psi> {
    let avg10 = |kind: &str| {
        text.lines()
            .find(|l| l.starts_with(kind))?
            .split_whitespace()
            .find_map(|f| f.strip_prefix("avg10="))?
            .parse::<f64>()
            .ok()
    };
    Some(Psi {
        some_avg10: avg10("some")?,
        // Older kernels print no `full` line for memory; `some` still decides.
        full_avg10: avg10("full").unwrap_or(0.0),
    })
}

/// `(MemAvailable, MemTotal)` in bytes from `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let kb = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
    };
    Some((kb("MemAvailable:")? * 1024, kb("MemTotal:")? * 1024))
}

/// A named counter of a `memory.stat`-style or `/proc/vmstat` file.
pub fn parse_counter(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The Linux provider.
#[derive(Debug)]
pub struct LinuxProvider {
    /// Our memory cgroup, when it has a finite limit: (dir, version, limit).
    cgroup: Option<(CgroupPaths, u64)>,
    /// Where `/proc` is (tests point it elsewhere).
    proc_root: PathBuf,
}

impl LinuxProvider {
    /// The provider for this process.
    pub fn new() -> Self {
        let physical = ram::physical_total();
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| ram::locate_cgroup(&t, Path::new("/sys/fs/cgroup")))
            .and_then(|paths| {
                let limit_file = match &paths {
                    CgroupPaths::V2(d) => d.join("memory.max"),
                    CgroupPaths::V1(d) => d.join("memory.limit_in_bytes"),
                };
                let limit = ram::parse_limit(&std::fs::read_to_string(limit_file).ok()?)?;
                (limit < physical).then_some((paths, limit))
            });
        Self {
            cgroup,
            proc_root: PathBuf::from("/proc"),
        }
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.proc_root.join(rel)).ok()
    }

    /// Available memory and the total it is measured against.
    fn available(&self) -> Option<(u64, u64)> {
        match &self.cgroup {
            Some((paths, limit)) => {
                let (usage, stat, inactive) = match paths {
                    CgroupPaths::V2(d) => (d.join("memory.current"), d.join("memory.stat"), "inactive_file"),
                    CgroupPaths::V1(d) => (
                        d.join("memory.usage_in_bytes"),
                        d.join("memory.stat"),
                        "total_inactive_file",
                    ),
                };
                let usage: u64 = std::fs::read_to_string(usage).ok()?.trim().parse().ok()?;
                let reclaimable = std::fs::read_to_string(stat)
                    .ok()
                    .and_then(|s| parse_counter(&s, inactive))
                    .unwrap_or(0);
                Some((limit.saturating_sub(usage.saturating_sub(reclaimable)), *limit))
            }
            None => parse_meminfo(&self.read("meminfo")?),
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
        let psi = self.read("pressure/memory").and_then(|t| parse_psi(&t));
        let available = self.available();
        let level = pressure::level(psi, available).ok_or_else(|| {
            "neither /proc/pressure/memory nor the available memory (/proc/meminfo or the cgroup's usage) is readable"
                .to_string()
        });
        let swapout_bytes = self
            .read("vmstat")
            .and_then(|t| parse_counter(&t, "pswpout"))
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

    #[test]
    fn parses_the_kernel_files() {
        let psi = "some avg10=12.50 avg60=3.00 avg300=1.00 total=123\nfull avg10=0.40 avg60=0.10 avg300=0.00 total=9\n";
        assert_eq!(
            parse_psi(psi),
            Some(Psi {
                some_avg10: 12.5,
                full_avg10: 0.4
            })
        );
        assert_eq!(
            parse_psi("some avg10=1.00 avg60=0 avg300=0 total=0\n").map(|p| p.full_avg10),
            Some(0.0)
        );
        assert_eq!(parse_psi("garbage"), None);
        let meminfo = "MemTotal:       24683000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(parse_meminfo(meminfo), Some((20_000_000 * 1024, 24_683_000 * 1024)));
        assert_eq!(parse_counter("pgpgin 5\npswpin 0\npswpout 17\n", "pswpout"), Some(17));
        assert_eq!(
            parse_counter("cache 1\ntotal_inactive_file 4096\n", "total_inactive_file"),
            Some(4096)
        );
        assert_eq!(parse_counter("pswpout_x 3\n", "pswpout"), None);
    }

    #[test]
    fn this_machine_gives_a_level() {
        let mut p = LinuxProvider::new();
        assert!(p.sample().level.is_ok(), "PSI or meminfo must be readable on Linux");
    }
}
