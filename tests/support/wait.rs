//! Waiting for a state no event announces (a gauge, the process table, a
//! socket's queues): polled with a bound, failing with what was awaited.
//! Where an event says it (`event_or_fail`, `recv_or_fail`), wait for that.
use std::time::{Duration, Instant};

/// How often `poll_until` looks.
const POLL_EVERY: Duration = Duration::from_millis(20);

/// Polls `done` until it holds, or fails after `within` (real time) naming
/// `what` and what `state` says then.
pub async fn poll_until(what: &str, within: Duration, mut done: impl FnMut() -> bool, state: impl Fn() -> String) {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() >= deadline {
            panic!("timed out waiting {within:?} for {what}; {}", state());
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}
