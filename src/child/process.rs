//! Spawning and stopping the child process: its own process group, the
//! parent-death signal, an explicit environment, output drained into
//! `tracing` and the `OutputLog`, and the one `terminate` every stop goes
//! through (unload, reap, respawn, shutdown, crash cleanup).
//!
//! Called by the engine core (through `launch::Launcher`) and the RPC
//! worker's supervisor. The `tokio::process::Child` itself lives in a wait
//! task that reaps it the moment it exits (no zombie outlives it) and
//! publishes how it ended on a `watch` channel. A `ChildProcess` may also
//! stand for an in-process fake (`child::fake`, feature `testing`): the same
//! handle, exit watch and output, with its stops sent to the fake instead of
//! the OS.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::capture::capture;
use crate::secret::ApiKey;
use super::output::OutputLog;

/// How long the exit report waits for the output pipes to reach EOF.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// What to run, fully decided by the engine.
#[derive(Clone)]
pub struct SpawnSpec {
    /// The executable (llama-server, or the MLX environment's python).
    pub program: PathBuf,
    /// Its arguments, secrets excluded (they go through `env`).
    pub args: Vec<OsString>,
    /// The child's whole environment: it starts from nothing, so the warden's
    /// own secrets (`WARDEN_API_KEY`, a cloud token) never reach it.
    pub env: Vec<(OsString, OsString)>,
    /// A short name for logs ("llama-server", "mlx_vlm.server").
    pub label: &'static str,
    /// The child's key: redacted from every line of its output before the
    /// line reaches a log or a crash tail (defence in depth; llama-server at
    /// trace verbosity prints the key's last four characters).
    pub secret: Option<ApiKey>,
}

impl std::fmt::Debug for SpawnSpec {
    /// Environment values are omitted: one of them is the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env_keys", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("label", &self.label)
            .finish()
    }
}

pub use crate::law::crash::ExitInfo;

/// A running (or just ended) child.
#[derive(Debug)]
pub struct ChildProcess {
    /// The OS pid, also the process group id (the child leads its group).
    pid: u32,
    /// `None` while running; how it ended once it did.
    exit: watch::Receiver<Option<ExitInfo>>,
    /// Where the warden's stops go.
    control: Control,
    /// Its captured output.
    output: Arc<OutputLog>,
    /// Set once the warden itself signalled the child, so its death is not
    /// mistaken for a crash or the OOM killer.
    stopped_by_us: bool,
}

/// Where a child's stops go.
#[derive(Debug)]
enum Control {
    /// An OS process leading its own group. `kill_tx` asks the wait task to
    /// kill it (the portable path; on Unix the group is signalled directly).
    Process { kill_tx: mpsc::UnboundedSender<()> },
    /// An in-process fake: its stops go down this channel, never to the OS
    /// (its pid is no process's; see `child::fake::FAKE_PID_BASE`).
    #[cfg(feature = "testing")]
    InProcess(mpsc::UnboundedSender<Stop>),
}

/// A stop as an in-process fake receives it.
#[cfg(feature = "testing")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: a graceful stop, which a wedged child may ignore.
    Term,
    /// SIGKILL: the end, which nothing ignores.
    Kill,
}

/// Starts the child described by `spec`.
///
/// Must run on a long-lived thread (an actix arbiter's): on Linux the
/// parent-death signal fires when the *spawning thread* exits.
pub fn spawn(spec: &SpawnSpec) -> std::io::Result<ChildProcess> {
    let mut child = command(spec).spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the child exited before its pid was read"))?;
    // Windows has no parent-death signal: the child joins the warden's
    // kill-on-close job instead.
    #[cfg(windows)]
    if let Some(h) = child.raw_handle() {
        super::job_windows::adopt(h, pid);
    }
    let (output, drains) = capture(&mut child, spec, pid);
    let (exit, kill_tx) = watch_exit(child, pid, drains, output.clone(), spec.label);
    tracing::debug!(pid, child = spec.label, program = %spec.program.display(), "child spawned");
    Ok(ChildProcess {
        pid,
        exit,
        control: Control::Process { kill_tx },
        output,
        stopped_by_us: false,
    })
}

/// The handle of an in-process fake child (`child::fake`): `pid` is a
/// number no process has, `exit` is published by the fake, and every stop
/// goes down `stops`.
#[cfg(feature = "testing")]
pub(crate) fn in_process(
    pid: u32,
    exit: watch::Receiver<Option<ExitInfo>>,
    stops: mpsc::UnboundedSender<Stop>,
    output: Arc<OutputLog>,
) -> ChildProcess {
    ChildProcess {
        pid,
        exit,
        control: Control::InProcess(stops),
        output,
        stopped_by_us: false,
    }
}

/// The line that ends the tail of a child killed by `sig`: a signal death
/// prints nothing of its own, so the error's `raw` says which signal, by
/// name.
pub(crate) fn record_signal_death(tail: &OutputLog, sig: i32) {
    tail.push(&format!(
        "llm-warden: the model server was killed by {}",
        crate::law::crash::describe_signal(sig)
    ));
}

/// The command of `spec`: an explicit environment, piped output, its own
/// process group and (on Linux) the parent-death signal.
fn command(spec: &SpawnSpec) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    {
        cmd.process_group(0);
    }
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs between fork and exec and calls only
        // async-signal-safe functions (prctl, getppid, _exit).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The warden may have died between fork and prctl: then no
                // signal will ever come, so leave now.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    cmd
}

/// The wait task: it owns the child, kills it when asked, reaps it the
/// moment it exits and publishes how it ended.
fn watch_exit(
    mut child: tokio::process::Child,
    pid: u32,
    drains: Vec<tokio::task::JoinHandle<()>>,
    tail: Arc<OutputLog>,
    label: &'static str,
) -> (watch::Receiver<Option<ExitInfo>>, mpsc::UnboundedSender<()>) {
    let (exit_tx, exit_rx) = watch::channel(None);
    let (kill_tx, mut kill_rx) = mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                Some(()) = kill_rx.recv() => { let _ = child.start_kill(); }
            }
        };
        let info = match status {
            Ok(s) => exit_info(s),
            Err(_) => ExitInfo {
                code: None,
                signal: None,
            },
        };
        // Publish the exit only once the output is fully captured, so a
        // crash is always classified from its last lines. Bounded: a
        // process the child left behind could hold the pipes open.
        for d in drains {
            let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, d).await;
        }
        if let Some(sig) = info.signal {
            record_signal_death(&tail, sig);
        }
        tracing::debug!(pid, child = label, "child ended: {info}");
        let _ = exit_tx.send(Some(info));
    });
    (exit_rx, kill_tx)
}

#[cfg(unix)]
fn exit_info(s: std::process::ExitStatus) -> ExitInfo {
    use std::os::unix::process::ExitStatusExt;
    ExitInfo {
        code: s.code(),
        signal: s.signal(),
    }
}

#[cfg(not(unix))]
fn exit_info(s: std::process::ExitStatus) -> ExitInfo {
    ExitInfo {
        code: s.code(),
        signal: None,
    }
}

impl ChildProcess {
    /// The OS pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its captured output.
    pub fn output(&self) -> &Arc<OutputLog> {
        &self.output
    }

    /// How it ended, or `None` while it runs.
    pub fn exit(&self) -> Option<ExitInfo> {
        *self.exit.borrow()
    }

    /// Whether the warden itself stopped it.
    pub fn stopped_by_us(&self) -> bool {
        self.stopped_by_us
    }

    /// A receiver that resolves when the child ends (for `select!`s that
    /// must notice a death while waiting on something else).
    pub fn exit_watch(&self) -> watch::Receiver<Option<ExitInfo>> {
        self.exit.clone()
    }

    /// Waits until the child ends.
    pub async fn wait(&mut self) -> ExitInfo {
        let mut rx = self.exit.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.expect("wait_for returned a Some"),
            // The wait task is gone only when the runtime shuts down.
            Err(_) => ExitInfo {
                code: None,
                signal: None,
            },
        }
    }

    /// Sends `sig` to the child's whole process group (a fake gets
    /// SIGTERM as `Stop::Term` and nothing else: its pid is no process's).
    #[cfg(unix)]
    fn signal_group(&mut self, sig: nix::sys::signal::Signal) {
        self.stopped_by_us = true;
        match &self.control {
            Control::Process { .. } => {
                let pgid = nix::unistd::Pid::from_raw(self.pid as i32);
                let _ = nix::sys::signal::killpg(pgid, sig);
            }
            #[cfg(feature = "testing")]
            Control::InProcess(stops) => {
                if sig == nix::sys::signal::Signal::SIGTERM {
                    let _ = stops.send(Stop::Term);
                }
            }
        }
    }

    /// SIGKILL to the group at once, without waiting (used by `Drop`).
    fn kill_now(&mut self) {
        self.stopped_by_us = true;
        match &self.control {
            Control::Process { kill_tx } => {
                #[cfg(unix)]
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(self.pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = kill_tx.send(());
            }
            #[cfg(feature = "testing")]
            Control::InProcess(stops) => {
                let _ = stops.send(Stop::Kill);
            }
        }
    }
}

/// Stops a child: SIGTERM to its group, up to `grace` to exit, then SIGKILL,
/// and waits until it is reaped. Every stop in the warden goes through here.
pub async fn terminate(child: &mut ChildProcess, grace: Duration) -> ExitInfo {
    if let Some(info) = child.exit() {
        return info;
    }
    #[cfg(unix)]
    {
        child.signal_group(nix::sys::signal::Signal::SIGTERM);
        // A stopped (SIGSTOPped, wedged) child cannot act on SIGTERM until
        // it runs again.
        child.signal_group(nix::sys::signal::Signal::SIGCONT);
    }
    #[cfg(not(unix))]
    child.kill_now();
    if let Ok(info) = tokio::time::timeout(grace, child.wait()).await {
        return info;
    }
    tracing::warn!(pid = child.pid, "child ignored SIGTERM for {grace:?}; killing it");
    child.kill_now();
    child.wait().await
}

impl Drop for ChildProcess {
    /// The backstop: a child whose handle is dropped without `terminate`
    /// (a panic, a runtime shutdown) is killed with its group.
    fn drop(&mut self) {
        if self.exit().is_none() {
            self.kill_now();
        }
    }
}
