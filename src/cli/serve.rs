//! `llm-warden serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::catalog::ModelFormat;
use crate::status::SettingsProblem;
use crate::{Warden, WardenConfig, server};
use anyhow::Context;
use clap::Args;

/// `serve`'s options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to bind. Anything but loopback should come with WARDEN_API_KEY.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (default: the first free of 27182-27199).
    #[arg(long)]
    port: Option<u16>,
    /// The default model: a path (file, split family, directory) or a catalog id.
    #[arg(long)]
    model: Option<String>,
    /// The models directory (default: the build cache's models).
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Load the default model at start instead of at the first request.
    #[arg(long)]
    preload: bool,
    /// A web origin (`http://localhost:5173`) whose pages may call this
    /// server from a browser; repeat for more (the variable: comma-separated).
    /// `*` admits every page the browser opens. None: no CORS headers.
    #[arg(
        long = "cors-origin",
        value_name = "ORIGIN",
        env = "WARDEN_CORS_ORIGINS",
        value_delimiter = ','
    )]
    cors_origins: Vec<String>,
    /// An `llm-warden worker` (HOST:PORT of its status endpoint) whose
    /// devices take a share of the model's layers and KV cache over
    /// llama.cpp RPC; repeat for more (the variable: comma-separated).
    #[arg(
        long = "worker",
        value_name = "HOST:PORT",
        env = "WARDEN_WORKERS",
        value_delimiter = ','
    )]
    workers: Vec<String>,
    /// The settings file (default: WARDEN_CONFIG, else
    /// ~/.config/llm-warden/config.toml when it exists). See
    /// docs/configuration.md.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// What `serve` reads its settings and models from: at start, and again at
/// every reload (`warden::reload`: the watch, SIGHUP), the same way.
#[derive(Debug, Clone)]
struct Reading {
    config: Option<PathBuf>,
    cors_origins: Vec<String>,
    workers: Vec<String>,
    models_dir: Option<PathBuf>,
    model: Option<String>,
}

impl Reading {
    /// The configuration and the catalog.
    fn read(&self) -> anyhow::Result<(WardenConfig, crate::catalog::Catalog)> {
        // load has already refused a bad variable under its own name, so a
        // value refused here came from the flag; the flags (or their
        // variables) replace the file's lists only when given.
        let mut cfg = WardenConfig::load(self.config.as_deref())?;
        if !self.cors_origins.is_empty() {
            cfg.cors_origins =
                crate::config::cors_origins("--cors-origin", self.cors_origins.iter().map(String::as_str))?;
        }
        if !self.workers.is_empty() {
            cfg.workers = crate::config::workers("--worker", self.workers.iter().map(String::as_str))?;
        }
        let catalog = super::build_catalog(&cfg, self.models_dir.clone(), self.model.clone(), true)?;
        Ok((cfg, catalog))
    }

    /// As `read`, a refusal as the status says it (the file's line and
    /// column when the fault is there).
    fn reread(&self) -> Result<(WardenConfig, crate::catalog::Catalog), SettingsProblem> {
        self.read()
            .map_err(|e| match e.downcast_ref::<crate::config::SettingsError>() {
                Some(s) => SettingsProblem::from(s),
                None => SettingsProblem::said(format!("{e:#}")),
            })
    }
}

/// Why the default model's file can never load (missing, not a GGUF,
/// truncated: its header's code), said where the mistake is made rather
/// than at the first request. A header the warden cannot size but
/// llama-server may still run is no reason.
fn broken_default(e: &crate::catalog::ModelEntry) -> Option<String> {
    if e.format != ModelFormat::Gguf {
        return None;
    }
    match crate::gguf::read_model_facts(&e.path) {
        Err(err) if crate::law::header::is_fatal(&err) => Some(format!(
            "the default model '{}' cannot load: {err} ({})",
            e.id,
            err.code()
        )),
        _ => None,
    }
}

pub async fn run(a: ServeArgs) -> anyhow::Result<ExitCode> {
    let reading = Reading {
        config: a.config,
        cors_origins: a.cors_origins,
        workers: a.workers,
        models_dir: a.models_dir,
        model: a.model,
    };
    let (cfg, catalog) = reading.read()?;
    // The model `--model` names refuses the start when no load could take
    // it; a default the warden chose itself is only warned of (the others
    // still serve).
    let wanted = catalog.default_entry().filter(|_| reading.model.is_some());
    if let Some(e) = catalog.default_entry() {
        match (broken_default(&e), wanted.is_some()) {
            (Some(why), true) => anyhow::bail!("{why}; name another with --model (llm-warden models lists them)"),
            (Some(why), false) => tracing::warn!("{why}; requests that name no model will fail until it is replaced"),
            (None, _) => {}
        }
    }
    if let Some(f) = &cfg.settings_file {
        tracing::info!("settings from {}", f.display());
    }
    if catalog.entries().is_empty() {
        let dir = reading.models_dir.clone().unwrap_or_else(|| cfg.models_dir());
        let when = match cfg.watch_period.as_secs_f64() {
            0.0 => "at `llm-warden reload`".to_string(),
            s => format!("within {s} s"),
        };
        tracing::warn!(
            "no models yet in {} nor in another tool's store: put a .gguf file there (or run ./build-llama.sh); the warden picks it up {when}",
            dir.display(),
        );
    }
    let loopback = matches!(a.host.as_str(), "127.0.0.1" | "localhost" | "::1");
    if !loopback && cfg.api_key.is_none() {
        tracing::warn!(
            "binding {} without WARDEN_API_KEY: anyone who can reach this address can use the model",
            a.host
        );
    }
    let warden = Warden::builder(cfg, catalog)
        .reload_from(move || reading.reread())
        .start()?;
    if let Some(e) = &wanted
        && warden.catalog().get(&e.id).is_none()
    {
        warden.shutdown().await;
        anyhow::bail!(
            "the default model '{}' is {}, which the {} engine does not run: name another with --model (llm-warden models lists them){}",
            e.id,
            match e.format {
                ModelFormat::Gguf => "a GGUF file",
                ModelFormat::Mlx => "an MLX model directory",
            },
            warden.engine_kind().name(),
            if e.format == ModelFormat::Mlx {
                ", or run the MLX engine (WARDEN_ENGINE=mlx)"
            } else {
                ""
            }
        );
    }
    reload_on_hangup(&warden);
    let bound = server::bind(warden.clone(), &a.host, a.port).with_context(|| format!("could not bind {}", a.host))?;
    let base = format!("http://{}:{}", a.host, bound.port);
    tracing::info!("listening on {base} (OpenAI base URL: {base}/v1; status: {base}/warden/status)");
    println!("llm-warden listening on {base}");
    if a.preload {
        let w = warden.clone();
        actix_web::rt::spawn(async move {
            match w.load(None, None).await {
                Ok(s) => tracing::info!(
                    model = %s.model.as_deref().unwrap_or("-"),
                    context_tokens = s.context_tokens,
                    "preloaded"
                ),
                Err(e) => tracing::error!(code = %e.code(), "preload failed: {e}"),
            }
        });
    }
    let handle = bound.server.handle();
    let mut server = actix_web::rt::spawn(bound.server);
    let signal = tokio::select! {
        r = &mut server => {
            // The server ended on its own (an I/O error): still stop the child.
            warden.shutdown().await;
            r??;
            return Ok(ExitCode::SUCCESS);
        }
        s = stop_signal() => s,
    };
    tracing::info!("{signal} received: stopping the server and the model");
    // Connections go first: their turns see the client gone and end at
    // once, so the engine's shutdown does not wait behind a long stream.
    handle.stop(false).await;
    warden.shutdown().await;
    let _ = server.await;
    Ok(ExitCode::SUCCESS)
}

/// SIGHUP reloads the settings and the stores now (a daemon's habit; the
/// watch does the same every `WARDEN_WATCH_S`).
fn reload_on_hangup(warden: &Warden) {
    #[cfg(unix)]
    {
        use actix_web::rt::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        let w = warden.clone();
        actix_web::rt::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP received: reading the settings and the model stores again");
                let _ = w.reload().await;
            }
        });
    }
    #[cfg(not(unix))]
    let _ = warden;
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM; names the one that came (`worker`
/// stops on the same two).
pub async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use actix_web::rt::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler cannot fail at start");
        tokio::select! {
            _ = actix_web::rt::signal::ctrl_c() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = actix_web::rt::signal::ctrl_c().await;
        "Ctrl-C"
    }
}
