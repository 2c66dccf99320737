//! The child's anonymous memory: what a smaller window or an unload gives
//! back (clean file-backed pages, such as mapped weights, are excluded: the
//! kernel reclaims those on its own).
//!
//! On macOS it is the child's `phys_footprint` (`proc_pid_rusage`,
//! `RUSAGE_INFO_V2`), the spec's measure there: what Activity Monitor shows
//! as the process's memory, compressed and swapped pages included, clean
//! file-backed pages excluded.
//!
//! On Windows it is the child's private commit (`GetProcessMemoryInfo`'s
//! `PrivateUsage`), the spec's measure there: memory only it holds,
//! committed whether resident or paged out, mapped files excluded.
//!
//! On Linux the spec names `Anonymous:` + `Swap:` of `/proc/<pid>/smaps_rollup`. The
//! same counters are in `/proc/<pid>/status` as `RssAnon:` + `VmSwap:`
//! (measured equal here: 207864 kB both), and reading them costs ~0.05 ms
//! (parsed by `procfs`) against 5-6 ms for smaps_rollup, which walks the
//! child's page tables: that read was most of the first-token time the
//! warden added before this change (the bench). `status` is read;
//! `smaps_rollup` is the fallback where `status` lacks the fields; one read
//! each, both parsed by `procfs`.

/// The child's anonymous memory now, when the platform can tell.
pub fn anon_bytes(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        from_status(pid).or_else(|| from_smaps_rollup(pid))
    }
    #[cfg(target_os = "macos")]
    {
        phys_footprint(pid)
    }
    #[cfg(windows)]
    {
        private_commit(pid)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
    {
        let _ = pid;
        None
    }
}

/// `PrivateUsage` of `GetProcessMemoryInfo` for `pid`, in bytes.
#[cfg(windows)]
fn private_commit(pid: u32) -> Option<u64> {
    use windows_sys::Win32::Foundation::CloseHandle;
    use windows_sys::Win32::System::ProcessStatus::{GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS, PROCESS_MEMORY_COUNTERS_EX};
    use windows_sys::Win32::System::Threading::{OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION};
    // SAFETY: opening a process by id for a query only; a null handle is
    // the failure, checked below.
    let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if h.is_null() {
        return None;
    }
    // SAFETY: an all-zero PROCESS_MEMORY_COUNTERS_EX is a valid value; `cb`
    // says which of the two structs is passed, as the API requires.
    let mut c: PROCESS_MEMORY_COUNTERS_EX = unsafe { std::mem::zeroed() };
    c.cb = std::mem::size_of::<PROCESS_MEMORY_COUNTERS_EX>() as u32;
    // SAFETY: `h` is a process handle opened above; `c` is as large as `cb` says.
    let ok = unsafe { GetProcessMemoryInfo(h, (&mut c as *mut PROCESS_MEMORY_COUNTERS_EX).cast::<PROCESS_MEMORY_COUNTERS>(), c.cb) } != 0;
    // SAFETY: `h` is ours and closed once.
    unsafe { CloseHandle(h) };
    private_commit_bytes(ok.then_some(c.PrivateUsage))
}

/// The child's anonymous memory from `PROCESS_MEMORY_COUNTERS_EX`'s
/// `PrivateUsage` (a `SIZE_T` of bytes; `None`: the call failed). Never
/// `WorkingSetSize`, which counts the mapped weights the kernel reclaims on
/// its own and misses what is paged out. Takes the plain number: the
/// windows-sys struct exists only on Windows, this is tested everywhere.
#[cfg_attr(not(windows), allow(dead_code))]
fn private_commit_bytes(private_usage: Option<usize>) -> Option<u64> {
    private_usage.map(|b| b as u64)
}

/// `ri_phys_footprint` of `proc_pid_rusage(pid, RUSAGE_INFO_V2)`, in bytes.
#[cfg(target_os = "macos")]
fn phys_footprint(pid: u32) -> Option<u64> {
    let pid = libc::c_int::try_from(pid).ok()?;
    // SAFETY: an all-zero rusage_info_v2 is a valid value (plain integers).
    let mut info: libc::rusage_info_v2 = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a rusage_info_v2, the struct RUSAGE_INFO_V2 fills;
    // the call writes at most its size and only on success.
    let rc = unsafe {
        libc::proc_pid_rusage(
            pid,
            libc::RUSAGE_INFO_V2,
            (&mut info as *mut libc::rusage_info_v2).cast::<libc::rusage_info_t>(),
        )
    };
    (rc == 0).then_some(info.ri_phys_footprint)
}

/// Anonymous memory plus what of it is swapped out, when the anonymous
/// count is known (a missing swap count is none swapped: no swap, or a
/// kernel without the field).
#[cfg(any(target_os = "linux", test))]
fn anon_plus_swap(anon: Option<u64>, swap: Option<u64>) -> Option<u64> {
    Some(anon? + swap.unwrap_or(0))
}

/// `RssAnon` + `VmSwap` of `/proc/<pid>/status`, in bytes.
#[cfg(target_os = "linux")]
fn from_status(pid: u32) -> Option<u64> {
    use procfs::FromRead;
    let s = procfs::process::Status::from_file(format!("/proc/{pid}/status")).ok()?;
    // procfs keeps status' sizes in KiB, as the file prints them.
    anon_plus_swap(s.rssanon, s.vmswap).map(|kib| kib * 1024)
}

/// `Anonymous` + `Swap` of `/proc/<pid>/smaps_rollup`, in bytes (procfs
/// converts its sizes).
#[cfg(target_os = "linux")]
fn from_smaps_rollup(pid: u32) -> Option<u64> {
    use procfs::FromRead;
    let r = procfs::process::SmapsRollup::from_file(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let fields = &r.memory_map_rollup.0.first()?.extension.map;
    anon_plus_swap(fields.get("Anonymous").copied(), fields.get("Swap").copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Swap counts when given; without the anonymous count there is no figure.
    #[test]
    fn anonymous_plus_swap() {
        let rows = [
            (Some(107_000), Some(1_000), Some(108_000)),
            // why: no swap field is no swap, not an unknown footprint
            (Some(107_000), None, Some(107_000)),
            // why: no anonymous field (a kernel thread, an old kernel): the fallback's turn
            (None, Some(1_000), None),
        ];
        for (i, (anon, swap, want)) in rows.into_iter().enumerate() {
            assert_eq!(anon_plus_swap(anon, swap), want, "row {i}");
        }
    }

    /// Windows' figure from `GetProcessMemoryInfo` as recorded on
    /// llama-server children (`WorkingSetSize` / `PrivateUsage`, bytes).
    #[test]
    fn private_commit_from_the_process_counters() {
        let rows = [
            // why: a CPU child of an 8B Q4 model (working set 5,612,134,400 with
            // the 4.6 GB of mapped weights resident): the private commit, the KV
            // cache and compute buffers, is what an unload gives back
            (Some(1_187_319_808), Some(1_187_319_808)),
            // why: a CUDA child, its weights on the card: only host buffers remain
            (Some(612_368_384), Some(612_368_384)),
            // why: a process that has committed nothing yet reads zero, not unknown
            (Some(0), Some(0)),
            // why: SIZE_T's largest value, in u64 whole on a 64-bit Windows
            (Some(usize::MAX), Some(usize::MAX as u64)),
            // why: OpenProcess or GetProcessMemoryInfo failed (the child exited)
            (None, None),
        ];
        for (i, (private_usage, want)) in rows.into_iter().enumerate() {
            assert_eq!(private_commit_bytes(private_usage), want, "row {i}");
        }
    }

    /// The cheap read and the spec's read agree, in the same unit.
    #[cfg(target_os = "linux")]
    #[test]
    fn status_and_smaps_rollup_agree_on_this_process() {
        let me = std::process::id();
        let status = from_status(me).unwrap();
        let rollup = from_smaps_rollup(me).unwrap();
        let diff = status.abs_diff(rollup);
        // The two reads are moments apart in a running test binary.
        assert!(diff < 8 << 20, "status {status} vs smaps_rollup {rollup}");
    }
}
