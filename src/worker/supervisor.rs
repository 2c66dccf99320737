//! The worker's one child, `ggml-rpc-server`: spawned through
//! `child::process` (its own process group, the parent-death signal, its
//! output captured), watched, restarted after a crash with `restart`'s
//! backoff, stopped through `terminate` like every child of the crate.
//!
//! What it knows is published on a `watch` channel (`RpcView`): the status
//! endpoint (`server`) reads it on every request, `run` waits on it for the
//! ready line. The task runs on the thread that started the worker (the
//! actix System's): on Linux the child's parent-death signal fires when the
//! *spawning thread* exits, so a worker killed outright takes rpc-server
//! with it.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::banner::{self, ACCEPTED_LINE, BannerDevice};
use super::restart::{self, BACKOFF_MAX, Backoff};
use crate::child::output::OUTPUT_RING_LINES;
use crate::child::process::{self, ChildProcess, SpawnSpec};
use crate::law::crash::Hints;
use crate::rpc::status::RpcState;

/// How long rpc-server gets to leave after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How often the readiness probe connects until rpc-server accepts.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// One probe connect's bound (a filtered port must not stall the loop).
const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What the supervisor knows of rpc-server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcView {
    /// The wire's view: up, pid, starts, last exit.
    pub state: RpcState,
    /// The protocol its banner announced (kept across restarts: same binary).
    pub protocol: Option<String>,
    /// Its devices, in its order (kept across restarts).
    pub devices: Vec<BannerDevice>,
}

impl RpcView {
    /// Before the first start: down, nothing known.
    pub fn default_for(port: u16) -> Self {
        Self {
            state: RpcState {
                up: false,
                port,
                pid: None,
                starts: 0,
                last_exit: None,
            },
            protocol: None,
            devices: Vec::new(),
        }
    }
}

/// How rpc-server is started.
#[derive(Debug, Clone)]
pub struct RpcLaunch {
    /// Address it binds (the status endpoint's host).
    pub host: String,
    /// Port it binds.
    pub port: u16,
    /// `-t`: CPU threads (rpc-server's default is 1).
    pub threads: Option<u32>,
    /// `-d`: the devices to expose (none: all).
    pub devices: Vec<String>,
    /// `-c`: rpc-server's local tensor cache.
    pub cache: bool,
}

/// rpc-server's argv (no secrets: it takes none).
pub fn args(l: &RpcLaunch) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "-H".into(),
        l.host.clone().into(),
        "-p".into(),
        l.port.to_string().into(),
    ];
    if let Some(t) = l.threads {
        a.push("-t".into());
        a.push(t.to_string().into());
    }
    if !l.devices.is_empty() {
        a.push("-d".into());
        a.push(l.devices.join(",").into());
    }
    if l.cache {
        a.push("-c".into());
    }
    a
}

/// The full spawn: the allow-listed environment, plus what rpc-server's own
/// cache (`-c`) and CUDA read; CUDA numbers devices in PCI order, as NVML
/// does, so `CUDA<n>` in the banner is the n-th visible NVML device.
pub fn spawn_spec(binary: &Path, l: &RpcLaunch, cuda_visible: Option<&str>) -> SpawnSpec {
    let mut env = crate::engines::env::inherited();
    for name in ["LLAMA_CACHE", "XDG_CACHE_HOME"] {
        if let Some(v) = std::env::var_os(name) {
            env.push((name.into(), v));
        }
    }
    if let Some(v) = cuda_visible {
        env.push(("CUDA_VISIBLE_DEVICES".into(), v.into()));
    }
    env.push(("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()));
    SpawnSpec {
        program: binary.to_path_buf(),
        args: args(l),
        env,
        label: "ggml-rpc-server",
        secret: None,
    }
}

/// Where the readiness probe connects for a bind address: a wildcard bind
/// is reached on loopback.
pub fn probe_host(host: &str) -> &str {
    match host.trim_start_matches('[').trim_end_matches(']') {
        "0.0.0.0" | "" => "127.0.0.1",
        "::" => "::1",
        h => h,
    }
}

/// The running supervisor: the way to stop it.
pub struct Supervisor {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Supervisor {
    /// Starts supervising, publishing on `view`; must be called on the
    /// long-lived thread that owns the worker (see the module doc).
    pub fn start(spec: SpawnSpec, launch: &RpcLaunch, view: watch::Sender<RpcView>) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let run = Run {
            spec,
            endpoint: format!("{}:{}", launch.host, launch.port),
            probe: (probe_host(&launch.host).to_string(), launch.port),
            view,
        };
        let task = actix_web::rt::spawn(run.run(stop_rx));
        Self { stop, task }
    }

    /// Stops rpc-server (SIGTERM, then SIGKILL after the grace) and waits
    /// until it is reaped and the supervisor has ended.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The supervising task's state.
struct Run {
    spec: SpawnSpec,
    /// `host:port`, for messages.
    endpoint: String,
    probe: (String, u16),
    view: watch::Sender<RpcView>,
}

impl Run {
    /// Start, watch, restart, until told to stop.
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut backoff = Backoff::default();
        loop {
            let started = Instant::now();
            let last_exit = match process::spawn(&self.spec) {
                Ok(child) => match self.supervise(child, &mut stop).await {
                    Some(e) => e,
                    None => return,
                },
                Err(e) => format!("spawn_failed ({}: {e})", self.spec.program.display()),
            };
            let retry = backoff.after_run(started.elapsed());
            self.view.send_modify(|v| {
                v.state.up = false;
                v.state.pid = None;
                v.state.last_exit = Some(last_exit.clone());
            });
            if retry.now_failing {
                tracing::error!(
                    endpoint = %self.endpoint,
                    "rpc-server failed {} times in a row ({last_exit}); retrying every {BACKOFF_MAX:?}",
                    backoff.short_runs
                );
            } else if backoff.short_runs < restart::FAILING_AFTER {
                tracing::warn!(endpoint = %self.endpoint, "rpc-server ended: {last_exit}; restarting in {:?}", retry.delay);
            } else {
                // Said once at ERROR already; the status carries each one.
                tracing::debug!(endpoint = %self.endpoint, "rpc-server ended again: {last_exit}");
            }
            tokio::select! {
                _ = tokio::time::sleep(retry.delay) => {}
                _ = stopped(&mut stop) => return,
            }
        }
    }

    /// One run of the child: `Some(last_exit)` once it ended on its own,
    /// `None` when the worker stopped it.
    async fn supervise(&mut self, mut child: ChildProcess, stop: &mut watch::Receiver<bool>) -> Option<String> {
        let oom_before = crate::sensors::ram::oom_kill_count();
        let pid = child.pid();
        self.view.send_modify(|v| {
            v.state.starts += 1;
            v.state.pid = Some(pid);
        });
        let up = tokio::select! {
            up = probe_until_up(&child, &self.probe) => up,
            _ = stopped(stop) => {
                process::terminate(&mut child, STOP_GRACE).await;
                return None;
            }
        };
        if up {
            self.mark_up(&child);
        }
        let exit = tokio::select! {
            exit = child.wait() => exit,
            _ = stopped(stop) => {
                process::terminate(&mut child, STOP_GRACE).await;
                return None;
            }
        };
        let tail = child.output().tail(OUTPUT_RING_LINES);
        let hints = Hints {
            stopped_by_us: child.stopped_by_us(),
            oom_kill_seen: matches!(
                (oom_before, crate::sensors::ram::oom_kill_count()),
                (Some(a), Some(b)) if b > a
            ),
            ..Hints::default()
        };
        let code = restart::exit_code(&tail, exit, hints);
        Some(restart::describe_exit(code, exit, &self.endpoint))
    }

    /// Publishes `up` with what the banner (flushed by the probe's accept) said.
    fn mark_up(&self, child: &ChildProcess) {
        let tail = child.output().tail(OUTPUT_RING_LINES);
        let protocol = banner::protocol(&tail);
        let devices = banner::devices(&tail);
        self.view.send_modify(|v| {
            v.state.up = true;
            if protocol.is_some() {
                v.protocol = protocol;
            }
            if !devices.is_empty() {
                v.devices = devices;
            }
        });
        let v = self.view.borrow();
        tracing::info!(pid = child.pid(), starts = v.state.starts, endpoint = %self.endpoint, "rpc-server up");
    }
}

/// Connects until the child prints that it accepted a connection (`true`),
/// or until it exits (`false`). A connect alone proves nothing: another
/// process holding the port accepts it too, while our child fails to bind.
async fn probe_until_up(child: &ChildProcess, (host, port): &(String, u16)) -> bool {
    loop {
        if child.exit().is_some() {
            return false;
        }
        if child
            .output()
            .tail(OUTPUT_RING_LINES)
            .iter()
            .any(|l| l == ACCEPTED_LINE)
        {
            return true;
        }
        let connect = tokio::net::TcpStream::connect((host.as_str(), *port));
        // The stream is dropped at once: rpc-server reads an EOF where it
        // expected its hello and goes back to accepting.
        let _ = tokio::time::timeout(PROBE_CONNECT_TIMEOUT, connect).await;
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// Resolves once a stop is asked (or its sender is gone).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_rows() {
        let base = RpcLaunch {
            host: "127.0.0.1".into(),
            port: 50052,
            threads: None,
            devices: vec![],
            cache: false,
        };
        let rows: Vec<(RpcLaunch, &str)> = vec![
            (base.clone(), "-H 127.0.0.1 -p 50052"),
            // why: every option, devices joined the way rpc-server's -d reads them
            (
                RpcLaunch {
                    host: "10.0.0.2".into(),
                    port: 1,
                    threads: Some(8),
                    devices: vec!["CUDA0".into(), "CPU".into()],
                    cache: true,
                },
                "-H 10.0.0.2 -p 1 -t 8 -d CUDA0,CPU -c",
            ),
        ];
        for (i, (l, want)) in rows.iter().enumerate() {
            let got: Vec<String> = args(l).iter().map(|a| a.to_string_lossy().into_owned()).collect();
            assert_eq!(got.join(" "), *want, "row {i}");
        }
    }

    #[test]
    fn probe_host_rows() {
        let rows = [
            ("127.0.0.1", "127.0.0.1"),
            // why: a wildcard bind answers on loopback
            ("0.0.0.0", "127.0.0.1"),
            ("::", "::1"),
            ("[::]", "::1"),
            ("10.1.2.3", "10.1.2.3"),
            ("[::1]", "::1"),
        ];
        for (i, (host, want)) in rows.iter().enumerate() {
            assert_eq!(probe_host(host), *want, "row {i}");
        }
    }
}
