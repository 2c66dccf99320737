//! The warden's side of its workers: their addresses, one reading of a
//! worker's status, and the watch that polls every worker so a lost one is
//! known within a second (`law::workers::is_lost`). The key that reads a
//! worker's status is `WARDEN_WORKER_KEY` (or the worker's own key file on
//! a shared machine); it is never logged.

use std::fmt;
use std::time::Duration;

use tokio::sync::watch;

use super::status::{STATUS_PATH, WorkerStatus};
use crate::secret::ApiKey;

/// How often the watch reads every worker.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Bound of one reading on the watch (a LAN answers in a millisecond).
pub const POLL_TIMEOUT: Duration = Duration::from_millis(300);
/// Bound of the readings before a load.
pub const LOAD_READ_TIMEOUT: Duration = Duration::from_secs(2);

pub use crate::law::worker_status::WorkerAddr;

/// Reads workers' statuses.
#[derive(Clone)]
pub struct Remote {
    http: reqwest::Client,
    key: Option<ApiKey>,
}

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote")
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Remote {
    /// A reader with the workers' key.
    pub fn new(key: Option<ApiKey>) -> Self {
        Self {
            http: reqwest::Client::builder()
                .no_proxy()
                .pool_max_idle_per_host(1)
                .build()
                .expect("a plain HTTP client builds"),
            key,
        }
    }

    /// One reading of `addr`, bounded by `timeout`; `Err` says why, for a
    /// person (never with the key).
    pub async fn read(&self, addr: &WorkerAddr, timeout: Duration) -> Result<WorkerStatus, String> {
        let url = format!("http://{addr}{STATUS_PATH}");
        let mut req = self.http.get(&url).timeout(timeout);
        if let Some(k) = &self.key {
            req = req.header(reqwest::header::AUTHORIZATION, k.bearer());
        }
        let resp = req.send().await.map_err(|e| {
            if e.is_timeout() {
                format!("no answer within {} ms", timeout.as_millis())
            } else if e.is_connect() {
                "connection refused or unreachable".to_string()
            } else {
                "the connection failed".to_string()
            }
        })?;
        match resp.status().as_u16() {
            200 => resp
                .json::<WorkerStatus>()
                .await
                .map_err(|_| "its status is not a worker's status (another program on that port?)".into()),
            401 => Err("it refused the key: set WARDEN_WORKER_KEY to the worker's key".into()),
            s => Err(format!("it answered HTTP {s}")),
        }
    }

    /// Every worker's reading, concurrently.
    pub async fn read_all(&self, addrs: &[WorkerAddr], timeout: Duration) -> Vec<Result<WorkerStatus, String>> {
        futures::future::join_all(addrs.iter().map(|a| self.read(a, timeout))).await
    }
}

pub use crate::law::worker_status::WorkerView;

/// Starts the watch: every `POLL_INTERVAL` each worker is read and the views
/// published; `on_change` runs whenever a worker's reading fails or changes
/// its rpc-server (the warden sends its engine `WorkerCheck`), so an engine
/// with no turn running retires a child whose
/// worker is gone. Must run inside a tokio runtime (the actix System).
pub fn start_watch(
    remote: Remote,
    addrs: Vec<WorkerAddr>,
    tx: watch::Sender<Vec<WorkerView>>,
    on_change: impl Fn() + Send + 'static,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let readings = remote.read_all(&addrs, POLL_TIMEOUT).await;
            let mut changed = false;
            tx.send_modify(|views| {
                for (v, r) in views.iter_mut().zip(readings) {
                    v.polls += 1;
                    match r {
                        Ok(s) => {
                            changed |= v.misses > 0 || v.status.as_ref().is_none_or(|o| o.rpc != s.rpc);
                            v.status = Some(s);
                            v.misses = 0;
                            v.error = None;
                        }
                        Err(e) => {
                            // Told on the way to lost, not at every miss after.
                            changed |= v.misses < crate::law::workers::LOST_AFTER_MISSES;
                            v.misses = v.misses.saturating_add(1);
                            v.error = Some(e);
                        }
                    }
                }
            });
            if tx.is_closed() {
                return;
            }
            if changed {
                on_change();
            }
        }
    });
}

/// The views before any reading.
pub fn initial_views(addrs: &[WorkerAddr]) -> Vec<WorkerView> {
    addrs
        .iter()
        .map(|a| WorkerView {
            addr: a.to_string(),
            status: None,
            misses: 0,
            error: None,
            polls: 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addr_rows() {
        let rows = [
            // why: the usual form
            ("10.0.0.2:50053", Some(("10.0.0.2", 50053))),
            // why: the port defaults to the worker's
            ("gpu-box", Some(("gpu-box", 50053))),
            // why: llama.cpp's --rpc cannot reach an IPv6 literal
            ("[fd00::2]:6000", None),
            ("fd00::2", None),
            ("host:0", None),
            ("host:x", None),
            (":50053", None),
        ];
        for (i, (text, want)) in rows.iter().enumerate() {
            let got = text.parse::<WorkerAddr>().ok().map(|a| (a.host.clone(), a.port));
            assert_eq!(got, want.map(|(h, p)| (h.to_string(), p)), "row {i}");
        }
        let a: WorkerAddr = "gpu-box:6000".parse().unwrap();
        assert_eq!(a.to_string(), "gpu-box:6000");
        assert_eq!(a.rpc_endpoint(50052), "gpu-box:50052");
        let e = "[fd00::2]:6000".parse::<WorkerAddr>().unwrap_err();
        assert!(e.contains("IPv6"), "{e}");
    }
}
