//! [`Direct`]: llama-server started by the harness itself, the warden's
//! child's argv and environment without the warden (see the parent module).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use llm_warden::engines::{env, llama};
use llm_warden::secret::ApiKey;
use tokio::process::Command;
use tokio::time::Instant;

use super::{Proc, free_port};

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
        let mut args = by_hand(model, id, ctx);
        // llama-server's own `-np auto` (4 slots over one pool), which is
        // also the warden's default: the same argv as its child.
        let slots = llm_warden::law::slots::AUTO_SLOTS;
        args.extend([
            "-np".into(),
            slots.to_string().into(),
            "--kv-unified".into(),
            "--threads-http".into(),
            llama::child_http_threads(slots).to_string().into(),
        ]);
        let spec = llama::spawn_spec(server, args, port, &key, env::inherited());
        Self::start(&spec.program, &spec.args, spec.env, port, key)
    }

    /// Starts `server` on `model` as a person would start it by hand, with
    /// nothing of the warden's fixed flags: `-m MODEL --alias ID -c ctx
    /// -ngl 0` and `flags` (`&[]`: llama-server's own defaults, 4 slots over
    /// one pool with its idle slots cached in host memory), the key in the
    /// environment as for the others.
    pub fn spawn_plain(server: &Path, model: &Path, id: &str, ctx: u32, flags: &[&str]) -> anyhow::Result<Self> {
        let port = free_port()?;
        let key = ApiKey::mint();
        let mut args = by_hand(model, id, ctx);
        args.extend(["--no-webui", "--host", "127.0.0.1", "--port"].map(Into::into));
        args.push(port.to_string().into());
        args.extend(flags.iter().map(Into::into));
        let mut env = env::inherited();
        env.push(("LLAMA_API_KEY".into(), key.expose().into()));
        Self::start(server, &args, env, port, key)
    }

    /// Runs `program` with `args` and exactly `env`, its output in a log of
    /// its own.
    fn start(
        program: &Path,
        args: &[OsString],
        env: Vec<(OsString, OsString)>,
        port: u16,
        key: ApiKey,
    ) -> anyhow::Result<Self> {
        let log = std::env::temp_dir().join(format!("warden-bench-llama-{port}.log"));
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(env)
            .stdout(out.try_clone()?)
            .stderr(out);
        let proc = Proc::spawn(cmd, libc::SIGKILL).with_context(|| format!("starting {}", program.display()))?;
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

/// What a person types first: the model, its alias, the window, no GPU.
fn by_hand(model: &Path, id: &str, ctx: u32) -> Vec<OsString> {
    vec![
        "-m".into(),
        model.as_os_str().to_owned(),
        "--alias".into(),
        id.into(),
        "-c".into(),
        ctx.to_string().into(),
        "-ngl".into(),
        "0".into(),
    ]
}
