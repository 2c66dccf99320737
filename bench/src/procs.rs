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

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use llm_warden::child::key::ApiKey;
use llm_warden::engines::{env, llama};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};
use tokio::time::Instant;

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

/// llama-server started directly.
pub struct Direct {
    /// The process.
    pub proc: Proc,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its key (sent as a bearer token).
    pub key: ApiKey,
    /// Where its output goes.
    pub log: PathBuf,
}

impl Direct {
    /// Starts `server` on `model` (`id` as its alias) with window `ctx`.
    pub fn spawn(server: &Path, model: &Path, id: &str, ctx: u32) -> anyhow::Result<Self> {
        let port = free_port()?;
        let key = ApiKey::mint();
        let args = vec![
            "-m".into(),
            model.as_os_str().to_owned(),
            "--alias".into(),
            id.into(),
            "-c".into(),
            ctx.to_string().into(),
            "-ngl".into(),
            "0".into(),
        ];
        let spec = llama::spawn_spec(server, args, port, &key, env::inherited());
        let log = std::env::temp_dir().join(format!("warden-bench-llama-{port}.log"));
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdout(out.try_clone()?)
            .stderr(out);
        let proc = Proc::spawn(cmd, libc::SIGKILL).with_context(|| format!("starting {}", server.display()))?;
        Ok(Self {
            proc,
            base: format!("http://127.0.0.1:{port}"),
            key,
            log,
        })
    }

    /// Polls `/health` every `poll` until 200; returns when it answered.
    pub async fn wait_healthy(&mut self, http: &reqwest::Client, poll: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + Duration::from_secs(120);
        let url = format!("{}/health", self.base);
        loop {
            if let Ok(r) = http.get(&url).timeout(Duration::from_secs(2)).send().await
                && r.status().is_success()
            {
                return Ok(Instant::now());
            }
            if !self.proc.running() {
                bail!("llama-server exited while loading (log: {})", self.log.display());
            }
            if Instant::now() > deadline {
                bail!("llama-server not healthy after 120 s (log: {})", self.log.display());
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Replaces it by a new server with the same model and window (the old
    /// one stopped first), healthy on return.
    pub async fn restart(
        &mut self,
        http: &reqwest::Client,
        server: &Path,
        model: &Path,
        id: &str,
        ctx: u32,
    ) -> anyhow::Result<()> {
        self.proc.stop(Duration::from_secs(5)).await;
        let _ = std::fs::remove_file(&self.log);
        *self = Direct::spawn(server, model, id, ctx)?;
        self.wait_healthy(http, Duration::from_millis(5)).await?;
        Ok(())
    }

    /// Its chat target.
    pub fn target(&self) -> crate::client::Target {
        crate::client::Target {
            base: self.base.clone(),
            bearer: Some(self.key.bearer()),
            conversation: None,
        }
    }

    /// Stops it; removes its log.
    pub async fn stop(mut self) -> Duration {
        let d = self.proc.stop(Duration::from_secs(5)).await;
        let _ = std::fs::remove_file(&self.log);
        d
    }
}

/// One line of the warden's stderr, with when the harness received it.
pub type LogLine = (Instant, String);

/// The `llm-warden serve` binary.
pub struct WardenProc {
    /// The process.
    pub proc: Proc,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its stderr lines so far (bounded).
    pub log: Arc<Mutex<Vec<LogLine>>>,
}

/// Lines of warden log kept (the harness reads a handful).
const LOG_KEEP: usize = 20_000;

impl WardenProc {
    /// Its chat target (the bench runs the warden without a key).
    pub fn target(&self) -> crate::client::Target {
        crate::client::Target {
            base: self.base.clone(),
            bearer: None,
            conversation: None,
        }
    }

    /// Starts the warden on `model` over `server`, with `envs` added.
    pub async fn spawn(
        bin: &Path,
        server: &Path,
        model: &Path,
        preload: bool,
        envs: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--port", "0", "--model"]).arg(model);
        if preload {
            cmd.arg("--preload");
        }
        cmd.env("WARDEN_LLAMA_SERVER", server)
            // Never reaped in the middle of a run.
            .env("WARDEN_IDLE_TIMEOUT_S", "86400")
            // Plain log lines (tracing-subscriber honours NO_COLOR).
            .env("NO_COLOR", "1")
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut proc = Proc::spawn(cmd, libc::SIGTERM).with_context(|| format!("starting {}", bin.display()))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let err = proc.child.stderr.take().expect("piped");
        let sink = log.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(err).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let now = Instant::now();
                let mut v = sink.lock().unwrap();
                if v.len() < LOG_KEEP {
                    v.push((now, strip_ansi(&l)));
                }
            }
        });
        let mut lines = tokio::io::BufReader::new(proc.child.stdout.take().expect("piped")).lines();
        let base = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(l)) = lines.next_line().await {
                if let Some(u) = l.strip_prefix("llm-warden listening on ") {
                    return Some(u.trim().to_string());
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let Some(base) = base else {
            let tail: Vec<String> = log.lock().unwrap().iter().rev().take(10).map(|l| l.1.clone()).collect();
            bail!("the warden did not start listening; its log ends with: {tail:?}");
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { proc, base, log })
    }

    /// `GET /warden/status` (registers the child pid it names).
    pub async fn status(&self, http: &reqwest::Client) -> anyhow::Result<serde_json::Value> {
        let v: serde_json::Value = http
            .get(format!("{}/warden/status", self.base))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if let Some(pid) = v["child_pid"].as_u64() {
            register(pid as u32);
        }
        Ok(v)
    }

    /// Waits until a child is loaded and the engine is ready; its status.
    pub async fn wait_ready(&self, http: &reqwest::Client) -> anyhow::Result<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let s = self.status(http).await?;
            if !s["child_pid"].is_null() && s["state"] == "ready" {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("the warden has no ready model after 120 s: {s}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the warden has no model loaded (after a `keep_alive: 0`
    /// turn, whose unload runs after its answer).
    pub async fn wait_unloaded(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.status(http).await?;
            if s["model"].is_null() && s["state"] == "idle" {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the model is still loaded 30 s after a keep_alive 0 turn: {s}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `POST` a warden route, to completion.
    pub async fn post(&self, http: &reqwest::Client, path: &str) -> anyhow::Result<serde_json::Value> {
        Ok(http
            .post(format!("{}{path}", self.base))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Makes the warden replace its child (unload, then load), ready on
    /// return.
    pub async fn reload(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        self.post(http, "/warden/unload").await?;
        self.post(http, "/warden/load").await?;
        self.wait_ready(http).await?;
        Ok(())
    }

    /// The log lines received since `since` that contain `needle`.
    pub fn log_since(&self, since: Instant, needle: &str) -> Vec<LogLine> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, l)| *t >= since && l.contains(needle))
            .cloned()
            .collect()
    }

    /// VmRSS of the warden process itself, in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.proc.pid)
    }

    /// Stops it (SIGTERM: the warden stops its child first).
    pub async fn stop(mut self) -> Duration {
        self.proc.stop(Duration::from_secs(15)).await
    }
}

/// `line` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
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
