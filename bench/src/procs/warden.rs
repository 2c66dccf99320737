//! [`WardenProc`]: `llm-warden serve` started by the harness, its stderr
//! kept line by line for the phases that read its log (see the parent
//! module).

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;
use tokio::time::Instant;

use super::{Proc, register, rss_kib};

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
    /// The settings file it reads (`GEMMA_SETTINGS`), removed with it.
    _settings: tempfile::TempPath,
}

/// The settings the harness's warden runs with: Gemma 3 270M's GGUF has no
/// chat template, so the warden serves it completions only unless one is
/// named; the bench names ChatML, the template llama-server driven
/// directly falls back to, so both sides render the same prompts.
const GEMMA_SETTINGS: &str = "[models.\"gemma-3-270m-q4_k_m\"]\nchat_template = \"chatml\"\n";

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
        Self::spawn_with(bin, server, model, preload, envs, &[]).await
    }

    /// As `spawn`, with `args` added to `serve`'s (a models directory).
    pub async fn spawn_with(
        bin: &Path,
        server: &Path,
        model: &Path,
        preload: bool,
        envs: &[(&str, &str)],
        args: &[&str],
    ) -> anyhow::Result<Self> {
        let settings = tempfile::Builder::new().suffix(".toml").tempfile()?.into_temp_path();
        std::fs::write(&settings, GEMMA_SETTINGS)?;
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--port", "0", "--model"]).arg(model).args(args);
        cmd.env("WARDEN_CONFIG", &settings);
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
        Ok(Self {
            proc,
            base,
            log,
            _settings: settings,
        })
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
        // Every resident's child is swept on the way out too.
        for r in v["residents"].as_array().into_iter().flatten() {
            if let Some(pid) = r["child_pid"].as_u64() {
                register(pid as u32);
            }
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
