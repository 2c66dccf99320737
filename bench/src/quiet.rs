//! The quiet gate: this machine is shared (2 cores, other people's test
//! runs), and llama.cpp's spinning thread pool degrades badly when another
//! process takes a core. Before each measured round the harness waits until
//! the whole machine's CPU use over a 250 ms window (from `/proc/stat`, so
//! it counts every process) is under `QUIET_BUSY` of all cores (the
//! harness's own servers are idle between rounds), at most `max_wait`. A
//! round measured after a timed-out wait is counted as "under load" and the
//! report says how many there were.
//!
//! The gate only sees the start of a round; [`Meter`] sees all of it: the
//! machine's busy time over the round (`/proc/stat`) minus the CPU time of
//! the harness's own processes (this process, and every pid registered in
//! `procs`: the direct servers, the wardens and their children, summed over
//! their threads' `schedstat`). What is left is other people's load; a
//! paired round whose foreign share exceeds `FOREIGN_MAX` is measured again
//! (a few times at most), and the report counts the rounds that stayed noisy.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The busy share of all cores under which the machine counts as quiet.
pub const QUIET_BUSY: f64 = 0.25;
/// Rounds that started on a busy machine (the gate timed out).
pub static UNDER_LOAD: AtomicUsize = AtomicUsize::new(0);
/// Gate passes.
pub static GATES: AtomicUsize = AtomicUsize::new(0);

/// Foreign load above this share of the machine during a round makes the
/// round noisy.
pub const FOREIGN_MAX: f64 = 0.10;
/// Tries of one round before a noisy one is kept anyway.
pub const TRIES: usize = 4;
/// Rounds kept although noisy.
pub static NOISY: AtomicUsize = AtomicUsize::new(0);
/// Rounds measured again because of foreign load.
pub static RETRIED: AtomicUsize = AtomicUsize::new(0);

/// Measures foreign CPU use over a span.
pub struct Meter {
    jiffies: Option<(u64, u64)>,
    ours_ns: u64,
}

/// CPU time (ns) of this process and every registered one, their reaped
/// children included (`utime + stime + cutime + cstime` of `/proc/PID/stat`,
/// in USER_HZ ticks): a server that ended during the span was reaped by this
/// process or by a warden, so its time moved into the reaper's `cutime`.
fn ours_ns() -> u64 {
    let mut pids = crate::procs::registered_all();
    pids.push(std::process::id());
    pids.into_iter().filter_map(ticks).sum::<u64>() * 10_000_000
}

/// `utime + stime + cutime + cstime` of `pid`, in ticks.
fn ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
    Some((11..=14).filter_map(|i| f.get(i)?.parse::<u64>().ok()).sum())
}

impl Meter {
    /// Starts measuring.
    pub fn start() -> Self {
        Self {
            jiffies: jiffies(),
            ours_ns: ours_ns(),
        }
    }

    /// Other processes' share of the machine since the start (0..1).
    pub fn foreign(&self) -> f64 {
        let (Some((b0, t0)), Some((b1, t1))) = (self.jiffies, jiffies()) else {
            return 0.0;
        };
        // Jiffies are USER_HZ (100 per second) on Linux.
        let busy_ns = (b1 - b0) as f64 * 1e7;
        let total_ns = (t1 - t0) as f64 * 1e7;
        let ours = ours_ns().saturating_sub(self.ours_ns) as f64;
        if total_ns <= 0.0 {
            return 0.0;
        }
        ((busy_ns - ours) / total_ns).max(0.0)
    }
}

/// Runs `round` until its foreign share is under `FOREIGN_MAX` (at most
/// `TRIES` times, waiting for quiet before each); returns its value and the
/// foreign share of the kept try.
pub async fn clean<T, F, Fut>(mut round: F) -> anyhow::Result<(T, f64)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    for i in 1..=TRIES {
        wait(crate::pairs::QUIET_MAX).await;
        let m = Meter::start();
        let v = round().await?;
        let f = m.foreign();
        if f <= FOREIGN_MAX {
            return Ok((v, f));
        }
        if i == TRIES {
            NOISY.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "  (other processes took {:.0}% of the machine during this round: kept as noisy)",
                f * 100.0
            );
            return Ok((v, f));
        }
        RETRIED.fetch_add(1, Ordering::Relaxed);
        eprintln!(
            "  (other processes took {:.0}% of the machine during this round: measuring it again)",
            f * 100.0
        );
    }
    unreachable!("the last try returns")
}

/// `(busy, total)` jiffies of the `cpu` line of `/proc/stat`.
fn jiffies() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = s
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = f.iter().take(8).sum();
    let idle = f.get(3)? + f.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// The machine's busy share over `window`.
async fn busy(window: Duration) -> Option<f64> {
    let (b0, t0) = jiffies()?;
    tokio::time::sleep(window).await;
    let (b1, t1) = jiffies()?;
    (t1 > t0).then(|| (b1 - b0) as f64 / (t1 - t0) as f64)
}

/// Waits for a quiet machine (at most `max_wait`); returns the last busy
/// share seen.
pub async fn wait(max_wait: Duration) -> f64 {
    let start = Instant::now();
    GATES.fetch_add(1, Ordering::Relaxed);
    let mut said = false;
    loop {
        let Some(b) = busy(Duration::from_millis(250)).await else {
            return f64::NAN; // no /proc/stat: no gate
        };
        if b < QUIET_BUSY {
            return b;
        }
        if start.elapsed() >= max_wait {
            UNDER_LOAD.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "  (machine still {:.0}% busy after {max_wait:?}: measuring anyway)",
                b * 100.0
            );
            return b;
        }
        if !said {
            eprintln!("  (machine {:.0}% busy: waiting for quiet)", b * 100.0);
            said = true;
        }
    }
}
