//! The quiet gate: this machine is shared (2 cores, other people's test
//! runs), and llama.cpp's spinning thread pool degrades badly when another
//! process takes a core. Before each measured round the harness waits until
//! the whole machine's CPU use over a 250 ms window (from `/proc/stat`, so
//! it counts every process) is under `QUIET_BUSY` of all cores (the
//! harness's own servers are idle between rounds), at most `max_wait`. A
//! round measured after a timed-out wait is counted as "under load" and the
//! report says how many there were.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The busy share of all cores under which the machine counts as quiet.
pub const QUIET_BUSY: f64 = 0.25;
/// Rounds that started on a busy machine (the gate timed out).
pub static UNDER_LOAD: AtomicUsize = AtomicUsize::new(0);
/// Gate passes.
pub static GATES: AtomicUsize = AtomicUsize::new(0);

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
