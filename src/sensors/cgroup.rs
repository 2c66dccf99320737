//! Our memory cgroup: where `/proc/self/cgroup` puts it (read by `procfs`),
//! and the controller's own files, which procfs does not cover: the limit
//! (v2 `memory.max`, v1 `memory.limit_in_bytes`), the usage and its
//! reclaimable file pages, and the OOM-kill counter. Only our own group
//! counts, not its ancestors (the spec's rule). `ram` (the RAM total, the
//! OOM count) and the Linux pressure provider read it; one reader serves the
//! `name value` lines of `memory.stat`, `memory.events` and
//! `memory.oom_control`.

use std::path::PathBuf;

use super::ram::RamSource;

/// Where the cgroup hierarchies are mounted.
#[cfg(target_os = "linux")]
const ROOT: &str = "/sys/fs/cgroup";

/// Our memory cgroup's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupPaths {
    /// Unified hierarchy: the group's directory.
    V2(PathBuf),
    /// v1 memory controller: the group's directory.
    V1(PathBuf),
}

impl CgroupPaths {
    /// Ours, as `/proc/self/cgroup` names it (none off Linux).
    pub fn ours() -> Option<Self> {
        #[cfg(target_os = "linux")]
        {
            use procfs::FromRead;
            let groups = procfs::ProcessCGroups::from_file("/proc/self/cgroup").ok()?;
            locate(&groups.0, std::path::Path::new(ROOT))
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// One of the group's files, by its name in each hierarchy.
    fn read(&self, v2: &str, v1: &str) -> Option<String> {
        let path = match self {
            Self::V2(d) => d.join(v2),
            Self::V1(d) => d.join(v1),
        };
        std::fs::read_to_string(path).ok()
    }

    /// The group's memory limit, when it has one.
    pub fn limit(&self) -> Option<(u64, RamSource)> {
        let source = match self {
            Self::V2(_) => RamSource::CgroupV2,
            Self::V1(_) => RamSource::CgroupV1,
        };
        parse_limit(&self.read("memory.max", "memory.limit_in_bytes")?).map(|l| (l, source))
    }

    /// The group's usage less its inactive file pages, which the kernel
    /// reclaims on its own before it would kill for memory.
    pub fn unreclaimable_usage(&self) -> Option<u64> {
        let usage: u64 = self
            .read("memory.current", "memory.usage_in_bytes")?
            .trim()
            .parse()
            .ok()?;
        let inactive = match self {
            Self::V2(_) => "inactive_file",
            Self::V1(_) => "total_inactive_file",
        };
        let reclaimable = self
            .read("memory.stat", "memory.stat")
            .and_then(|s| counter(&s, inactive))
            .unwrap_or(0);
        Some(usage.saturating_sub(reclaimable))
    }

    /// The kernel's OOM-kill count for the group (v2 `memory.events`, v1
    /// `memory.oom_control`).
    pub fn oom_kills(&self) -> Option<u64> {
        counter(&self.read("memory.events", "memory.oom_control")?, "oom_kill")
    }
}

/// Our memory group's directory under `root` from `/proc/self/cgroup`'s
/// entries. A v1 `memory` controller line wins over the v2 `0::` line on a
/// hybrid machine, since v1 then holds the memory limits.
#[cfg(target_os = "linux")]
pub fn locate(groups: &[procfs::ProcessCGroup], root: &std::path::Path) -> Option<CgroupPaths> {
    let mut v2 = None;
    for g in groups {
        let rel = g.pathname.trim_start_matches('/');
        if g.controllers.iter().any(|c| c == "memory") {
            return Some(CgroupPaths::V1(root.join("memory").join(rel)));
        }
        if g.hierarchy == 0 && g.controllers.is_empty() {
            v2 = Some(CgroupPaths::V2(root.join(rel)));
        }
    }
    v2
}

/// A limit file's content: `None` for "max" or garbage, never 0.
pub fn parse_limit(content: &str) -> Option<u64> {
    let t = content.trim();
    if t == "max" {
        return None;
    }
    t.parse().ok()
}

/// The value of the `name value` line called `name`.
pub fn counter(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which group `/proc/self/cgroup` names, on each layout.
    #[cfg(target_os = "linux")]
    #[test]
    fn cgroup_location_rows() {
        use procfs::FromRead;
        let root = std::path::Path::new("/sys/fs/cgroup");
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
            let groups = procfs::ProcessCGroups::from_read(text.as_bytes()).unwrap();
            assert_eq!(locate(&groups.0, root), *want, "row {i}");
        }
    }

    /// Each hierarchy's files: the limit, the usage less inactive file
    /// pages, the OOM kills.
    #[test]
    fn each_version_reads_its_own_files() {
        let dir = tempfile::tempdir().unwrap();
        let write = |f: &str, s: &str| std::fs::write(dir.path().join(f), s).unwrap();
        let v2 = CgroupPaths::V2(dir.path().into());
        let v1 = CgroupPaths::V1(dir.path().into());
        write("memory.max", "4294967296\n");
        write("memory.limit_in_bytes", "2147483648\n");
        write("memory.current", "1000\n");
        write("memory.usage_in_bytes", "900\n");
        write("memory.stat", "anon 5\ninactive_file 300\ntotal_inactive_file 400\n");
        write("memory.events", "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n");
        write("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n");
        assert_eq!(v2.limit(), Some((4 << 30, RamSource::CgroupV2)));
        assert_eq!(v1.limit(), Some((2 << 30, RamSource::CgroupV1)));
        assert_eq!(
            (v2.unreclaimable_usage(), v1.unreclaimable_usage()),
            (Some(700), Some(500))
        );
        assert_eq!((v2.oom_kills(), v1.oom_kills()), (Some(2), Some(7)));
        // why: reclaimable pages above the usage (racing reads) are no negative
        write("memory.current", "100\n");
        assert_eq!(v2.unreclaimable_usage(), Some(0));
        // why: no memory.stat: nothing counts as reclaimable
        std::fs::remove_file(dir.path().join("memory.stat")).unwrap();
        assert_eq!(v2.unreclaimable_usage(), Some(100));
    }

    /// A counter is the line of its exact name.
    #[test]
    fn counter_lines() {
        assert_eq!(counter("pgpgin 5\npswpin 0\npswpout 17\n", "pswpout"), Some(17));
        assert_eq!(counter("pswpout_x 3\n", "pswpout"), None);
        assert_eq!(counter("oom 1\n", "oom_kill"), None);
    }
}
