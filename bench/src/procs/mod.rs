//! The processes the harness starts, and their cleanup.
//!
//! - [`Direct`]: llama-server started by the harness itself, with exactly the
//!   argv and environment the warden gives its child: the engine part
//!   (`-m MODEL --alias ID -c WINDOW -ngl 0`) is written here, the fixed flags
//!   and the key (`LLAMA_API_KEY` in the environment) come from the warden's
//!   own `engines::llama::spawn_spec`, the environment from its allow-list
//!   (`engines::env::inherited`). Its output goes to a file in the temp dir
//!   (never a pipe nobody reads).
//! - [`WardenProc`]: `llm-warden serve --port 0 --model PATH [--preload]`,
//!   with `WARDEN_LLAMA_SERVER` set to the same llama-server binary. Its
//!   stderr (the tracing log) is kept with the harness's receive instants, so
//!   a phase can read the log lines a measurement produced.
//!
//! Cleanup: every process is spawned from the main thread (the runtime is
//! current-thread) in its own process group, with `kill_on_drop` and the
//! parent-death signal (SIGKILL for llama-server, SIGTERM for the warden,
//! which then stops its own child; the warden's child has its own
//! parent-death signal). Every pid the harness learns (its children and the
//! warden's children, read from `/warden/status`) is registered, and
//! [`sweep`] kills whatever is still alive when the harness ends, on success,
//! error or Ctrl-C alike.

mod direct;
mod warden;

use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};
use tokio::time::Instant;

pub use direct::Direct;
pub use warden::WardenProc;

/// Every process the harness started or learned of, for [`sweep`] and the
/// foreign-load meter: (pid, start time). The start time (field 22 of
/// `/proc/PID/stat`) tells a recycled pid (pids wrap at 32768 here) from
/// ours, so the sweep never signals someone else's process.
static PIDS: Mutex<Vec<(u32, u64)>> = Mutex::new(Vec::new());

/// The start time of `pid` (clock ticks after boot), while it exists.
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// Remembers `pid` for the final sweep.
pub fn register(pid: u32) {
    let Some(start) = start_time(pid) else { return };
    let mut p = PIDS.lock().unwrap();
    if !p.contains(&(pid, start)) {
        p.push((pid, start));
    }
}

/// Every registered pid that still exists as ours (running or a zombie).
pub fn registered_all() -> Vec<u32> {
    let p = PIDS.lock().unwrap().clone();
    p.into_iter()
        .filter(|&(pid, start)| start_time(pid) == Some(start))
        .map(|(pid, _)| pid)
        .collect()
}

/// Whether `pid` runs (a zombie does not).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits (blocking, up to 5 s) for every registered process to be gone,
/// SIGKILLs the ones that are not; returns the pids it had to kill.
pub fn sweep() -> Vec<u32> {
    let ours = || -> Vec<u32> { registered_all().into_iter().filter(|&p| alive(p)).collect() };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !ours().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = ours();
    for &p in &left {
        // SAFETY: kill(2) on a process this harness (or its warden) started,
        // checked by its start time just above.
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    left
}

/// A started process.
pub struct Proc {
    /// The pid.
    pub pid: u32,
    /// The process (its pipes are taken by whoever reads them).
    pub child: Child,
}

impl Proc {
    /// Spawns `cmd` in its own process group with `kill_on_drop` and the
    /// parent-death signal `deathsig`.
    pub fn spawn(mut cmd: Command, deathsig: i32) -> anyhow::Result<Self> {
        cmd.stdin(Stdio::null()).kill_on_drop(true).process_group(0);
        // SAFETY: only prctl(2), async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, deathsig) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        let pid = child.id().context("the child exited at once")?;
        register(pid);
        Ok(Self { pid, child })
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL; returns how long the
    /// stop took.
    pub async fn stop(&mut self, grace: Duration) -> Duration {
        let t = Instant::now();
        if !self.running() {
            return Duration::ZERO;
        }
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        t.elapsed()
    }
}

/// A free loopback port (bound then released; llama-server binds it next).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// CPU time (ns, from each thread's `schedstat`) and context switches
/// (voluntary + involuntary) of every thread of `pid`, summed.
pub fn cpu_and_switches(pid: u32) -> Option<(u64, u64)> {
    let mut cpu = 0;
    let mut sw = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let dir = t.ok()?.path();
        let Ok(stat) = std::fs::read_to_string(dir.join("schedstat")) else {
            continue; // the thread just ended
        };
        cpu += stat.split_whitespace().next()?.parse::<u64>().ok()?;
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        sw += status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split(':').nth(1)?.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    Some((cpu, sw))
}

/// `VmRSS` of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
