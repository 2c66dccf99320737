//! The child's anonymous memory: what a smaller window or an unload gives
//! back. On Linux `Anonymous:` + `Swap:` of `/proc/<pid>/smaps_rollup`
//! (clean file-backed pages, such as mapped weights, are excluded: the kernel
//! reclaims those on its own).

/// Parses an `smaps_rollup` into Anonymous + Swap, in bytes.
pub fn parse_smaps_rollup(content: &str) -> Option<u64> {
    let field = |name: &str| {
        content.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?;
            rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        })
    };
    let anon = field("Anonymous:")?;
    Some((anon + field("Swap:").unwrap_or(0)) * 1024)
}

/// The child's anonymous memory now, when the platform can tell.
pub fn anon_bytes(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        parse_smaps_rollup(&std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_plus_swap() {
        let text = "00400000-7fff [rollup]\nRss:              363000 kB\nAnonymous:        107000 kB\nSwap:               1000 kB\n";
        assert_eq!(parse_smaps_rollup(text), Some(108_000 * 1024));
        assert_eq!(parse_smaps_rollup("Rss: 1 kB\n"), None);
    }
}
