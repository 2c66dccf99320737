//! The idle reap: a model idle for longer than the timeout, counted from the
//! end of its last turn, is unloaded. The spec's 300 s, ticked every 30 s, so
//! a model goes 300 to 330 s after its last use. Pure: the idle time comes in.

use std::time::Duration;

/// Whether a loaded model idle for `idle_for` should be unloaded.
pub fn should_reap(loaded: bool, busy: bool, idle_for: Duration, timeout: Duration) -> bool {
    let busy = busy && !crate::law::broken!(ReapBusy);
    loaded && !busy && idle_for > timeout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaps_only_a_loaded_idle_model_past_the_timeout() {
        let t = Duration::from_secs(300);
        let rows = [
            // why: idle past the timeout: reap
            (true, false, Duration::from_secs(301), true),
            // why: exactly at the timeout is not "longer than"
            (true, false, Duration::from_secs(300), false),
            // why: nothing loaded, nothing to reap
            (false, false, Duration::from_secs(999), false),
            // why: a turn in flight is never reaped (its end resets the clock)
            (true, true, Duration::from_secs(999), false),
        ];
        for (i, (loaded, busy, idle, want)) in rows.into_iter().enumerate() {
            assert_eq!(should_reap(loaded, busy, idle, t), want, "row {i}");
        }
    }
}
