//! The dashboard's memory history: a bounded ring of samples (pressure
//! level, available memory, the child's footprint, the allocated window),
//! taken every `WARDEN_UI_SAMPLE_S` (5 s) and at once when the loaded model
//! or its window changes, so a brake's shrink and the pressure that caused
//! it sit side by side in `/warden/ui`'s chart.
//!
//! `HISTORY_CAPACITY` (360) samples hold 30 minutes at the default period
//! (about 40 KiB). The sampler is a plain thread: the level and the
//! available memory are the `SensorActor`'s latest reading (what the brake
//! sees, the QA seam included), the footprint is the child's `smaps_rollup`
//! (5-6 ms). It never touches the engine's mailbox or the brake's paging
//! window, and stops when the warden is dropped or its engine ends.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio::sync::watch;

use crate::sensors::view::Latest;
use crate::status::EngineStatus;

/// Samples kept: 30 minutes at the default 5 s.
pub const HISTORY_CAPACITY: usize = 360;
/// How often the sampler looks for a changed window.
const POLL: Duration = Duration::from_millis(100);

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// When (Unix milliseconds).
    pub t_ms: u64,
    /// `calm`, `warning` or `critical`; `None` without a memory sensor.
    pub level: Option<&'static str>,
    /// Memory available (the cgroup's when it bounds the warden).
    pub available_bytes: Option<u64>,
    /// The child's anonymous memory.
    pub footprint_bytes: Option<u64>,
    /// The allocated window (`None`: no model loaded).
    pub context_tokens: Option<u32>,
    /// The loaded model.
    pub model: Option<String>,
}

/// The ring.
#[derive(Debug)]
pub struct History {
    ring: Mutex<VecDeque<Sample>>,
    /// The sampling period (zero: the sampler does not run).
    pub interval: Duration,
}

impl History {
    /// An empty history sampled every `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            ring: Mutex::new(VecDeque::with_capacity(HISTORY_CAPACITY)),
            interval,
        }
    }

    /// The samples, oldest first.
    pub fn snapshot(&self) -> Vec<Sample> {
        self.lock().iter().cloned().collect()
    }

    /// The newest sample.
    pub fn latest(&self) -> Option<Sample> {
        self.lock().back().cloned()
    }

    /// Adds a sample, dropping the oldest past the capacity.
    pub fn push(&self, s: Sample) {
        let mut r = self.lock();
        if r.len() == HISTORY_CAPACITY {
            r.pop_front();
        }
        r.push_back(s);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        // The ring stays valid whatever panicked while holding it.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts the sampler thread over `status` and the sensor's `latest`
/// reading (`None`: a warden whose brake reads a script has none, and the
/// chart shows no level); it holds the history weakly.
pub fn start(
    history: &Arc<History>,
    mut status: watch::Receiver<EngineStatus>,
    latest: Option<watch::Receiver<Latest>>,
) {
    if history.interval.is_zero() {
        return;
    }
    let weak: Weak<History> = Arc::downgrade(history);
    let interval = history.interval;
    let spawned = std::thread::Builder::new()
        .name("warden-history".into())
        .spawn(move || {
            let mut last: Option<(Instant, Option<String>, Option<u32>)> = None;
            loop {
                std::thread::sleep(POLL.min(interval));
                let Some(history) = weak.upgrade() else { return };
                if status.has_changed().is_err() {
                    return; // the engine is gone
                }
                let (model, window, pid) = {
                    let s = status.borrow_and_update();
                    (s.model.clone(), s.context_tokens, s.child_pid)
                };
                let due = match &last {
                    None => true,
                    Some((at, m, w)) => at.elapsed() >= interval || *m != model || *w != window,
                };
                if !due {
                    continue;
                }
                let reading = latest.as_ref().map(|rx| rx.borrow().clone());
                history.push(Sample {
                    t_ms: unix_ms(),
                    level: reading.as_ref().and_then(|r| r.level.as_ref().ok()).map(|l| l.as_str()),
                    available_bytes: reading.and_then(|r| r.available_bytes),
                    footprint_bytes: pid.and_then(crate::sensors::footprint::anon_bytes),
                    context_tokens: window,
                    model: model.clone(),
                });
                last = Some((Instant::now(), model, window));
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("the dashboard's memory history could not start ({e}); /warden/ui shows no chart");
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t_ms: u64) -> Sample {
        Sample {
            t_ms,
            level: None,
            available_bytes: None,
            footprint_bytes: None,
            context_tokens: None,
            model: None,
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_capacity_samples() {
        let h = History::new(Duration::from_secs(5));
        for t in 0..(HISTORY_CAPACITY as u64 + 10) {
            h.push(at(t));
        }
        let s = h.snapshot();
        assert_eq!(s.len(), HISTORY_CAPACITY);
        assert_eq!(
            (s[0].t_ms, s[HISTORY_CAPACITY - 1].t_ms),
            (10, HISTORY_CAPACITY as u64 + 9)
        );
    }
}
