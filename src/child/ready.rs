//! The readiness probe: `/health` until it answers 200, then the one-token
//! ping (the spec's "/health + chat-ping probe"), while watching the child
//! for an early exit and the deadline. The ping is engine-specific: on
//! llama-server an empty raw `/completion` (see `engines::llama::ping`: a
//! chat ping's template made "ping" 31 tokens, ~250 ms of every cold load,
//! measured by the bench), on mlx_vlm.server a one-token chat request.
//!
//! No coarse poll: the child's own "model loaded" / "listening on" line
//! (`OutputLog::ready_line`) wakes the probe the moment it is printed, and a
//! fast poll (`READY_POLL`) covers children that print nothing. Cold-load
//! latency through the warden is thus llama-server's own plus one loopback
//! round trip and the ping.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::client::{ChildClient, Health};
use super::process::{ChildProcess, ExitInfo};

/// The fallback poll interval of `/health` while loading: short enough to add
/// at most this much to a load, long enough to cost nothing measurable.
pub const READY_POLL: Duration = Duration::from_millis(20);
/// Bound of one `/health` call (loopback; a slow answer means a busy child).
const HEALTH_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// The readiness ping: the cheapest request that makes the child run its
/// model once (and proves the server on the port is ours: it needs our key).
#[derive(Debug, Clone)]
pub struct Ping {
    /// The route.
    pub path: &'static str,
    /// The JSON body.
    pub body: Bytes,
}

/// Why a child did not become ready.
#[derive(Debug)]
pub enum NotReady {
    /// It exited while loading.
    Exited(ExitInfo),
    /// The deadline passed.
    TimedOut,
    /// `/health` said ready but the ping failed (status or transport).
    PingFailed(String),
    /// Another server answered on the child's port (our key was refused);
    /// resolved inside `probe_ready` into `Exited` or `PingFailed`.
    Foreign,
}

/// Waits until `child` answers `/health` with 200 and then the ping, or fails.
pub async fn probe_ready(
    child: &ChildProcess,
    client: &ChildClient,
    timeout: Duration,
    ping: Ping,
) -> Result<(), NotReady> {
    let deadline = Instant::now() + timeout;
    let mut exit = child.exit_watch();
    let output = child.output().clone();
    loop {
        if let Some(info) = child.exit() {
            return Err(NotReady::Exited(info));
        }
        if client.health(HEALTH_CALL_TIMEOUT).await == Health::Ready {
            break;
        }
        tokio::select! {
            _ = exit.wait_for(Option::is_some) => {}
            _ = output.ready_line.notified() => {}
            _ = tokio::time::sleep(READY_POLL) => {}
            _ = tokio::time::sleep_until(deadline) => return Err(NotReady::TimedOut),
        }
    }
    let remaining = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    let ping_call = tokio::time::timeout(remaining, async {
        let resp = client
            .post_json(ping.path, ping.body)
            .await
            .map_err(|e| NotReady::PingFailed(transport(&e)))?;
        let status = resp.status();
        // Drain the body so the connection returns to the pool.
        let _ = resp.bytes().await;
        if status.is_success() {
            Ok(())
        } else if status.as_u16() == 401 {
            // Not our key: another server holds the port and our child lost
            // the bind; its exit (port in use) tells the engine to retry.
            Err(NotReady::Foreign)
        } else {
            Err(NotReady::PingFailed(format!("HTTP {}", status.as_u16())))
        }
    });
    let result = tokio::select! {
        r = ping_call => r.unwrap_or(Err(NotReady::TimedOut)),
        _ = exit.wait_for(Option::is_some) => Err(NotReady::Exited(child.exit().unwrap_or(ExitInfo { code: None, signal: None }))),
    };
    match result {
        Err(NotReady::Foreign) => {
            let ended = tokio::time::timeout(FOREIGN_EXIT_WAIT, exit.wait_for(Option::is_some)).await;
            match (ended, child.exit()) {
                (Ok(_), Some(info)) => Err(NotReady::Exited(info)),
                _ => Err(NotReady::PingFailed("HTTP 401 from the child's port".into())),
            }
        }
        other => other,
    }
}

/// How long to wait for our child's exit after a foreign server answered on
/// its port (a lost bind exits within milliseconds).
const FOREIGN_EXIT_WAIT: Duration = Duration::from_secs(5);

/// A transport error named by its kind, never its URL or headers.
pub fn transport(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connection refused".into()
    } else {
        "connection error".into()
    }
}
