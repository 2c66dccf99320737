//! The `llm-warden` binary, as a module of the library (`cli::main`): `serve` (the HTTP server), `chat` (a streamed
//! answer in the terminal), `inspect` (a model's facts and the window the
//! warden would give it here), and for a running server `status` (its whole
//! snapshot), `ps` (what is loaded), `load`, `unload` and `models`; and
//! `worker` (this machine's devices lent to a warden through llama.cpp's
//! rpc-server).

//!
//! The binary's subcommands, one file each, and what they share.
//!
//! - `serve` runs the server; `chat` asks it (or an in-process warden) one
//!   question; `inspect` reads a model file, no server involved.
//! - The client subcommands `status`, `ps`, `load`, `unload` and `models`
//!   call a running server through `client` (which server, the key, errors
//!   that say what to do) and print with `table` (pure formatting, tested
//!   row by row), or the server's JSON with `--json`.
//! - `worker` runs this machine as an RPC worker of some warden.

pub(crate) mod chat;
pub(crate) mod client;
pub(crate) mod inspect;
pub(crate) mod inspect_workers;
pub(crate) mod load;
pub(crate) mod models;
pub(crate) mod ps;
pub(crate) mod serve;
pub(crate) mod status;
pub(crate) mod table;
pub(crate) mod unload;
pub(crate) mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{Catalog, WardenConfig};
use anyhow::{Context, bail};

/// Runs local LLM servers safely: sized windows, a memory brake, no orphans.
#[derive(Debug, Parser)]
#[command(name = "llm-warden", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the OpenAI-compatible API (and the warden's own routes).
    Serve(self::serve::ServeArgs),
    /// Ask one question and stream the answer (to a running server, or to one
    /// started in-process).
    Chat(self::chat::ChatArgs),
    /// Show a model's facts and the window the warden would choose here.
    Inspect(self::inspect::InspectArgs),
    /// Show a running server's whole status.
    Status(self::status::StatusArgs),
    /// Show what a running server has loaded: model, window, memory, when
    /// it unloads, the queue.
    Ps(self::ps::PsArgs),
    /// Load (or switch to) a model now, and wait until it is ready.
    Load(self::load::LoadArgs),
    /// Unload the model now, freeing its memory.
    Unload(self::unload::UnloadArgs),
    /// List the models a running server offers.
    Models(self::models::ModelsArgs),
    /// Lend this machine's devices to a warden: supervise llama.cpp's
    /// ggml-rpc-server and answer its status at /worker/status.
    Worker(self::worker::WorkerArgs),
}

/// The `llm-warden` binary's whole `main`: parse, run, map the error.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    self::init_tracing();
    let result = actix_web::rt::System::new().block_on(async move {
        match cli.command {
            Command::Serve(a) => self::serve::run(a).await,
            Command::Chat(a) => self::chat::run(a).await,
            Command::Inspect(a) => self::inspect::run(a).await,
            Command::Status(a) => self::status::run(a).await,
            Command::Ps(a) => self::ps::run(a).await,
            Command::Load(a) => self::load::run(a).await,
            Command::Unload(a) => self::unload::run(a).await,
            Command::Models(a) => self::models::run(a).await,
            Command::Worker(a) => self::worker::run(a).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("llm-warden: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The model build-llama.sh fetches first: the default everywhere.
pub(crate) const DEFAULT_MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";
/// Its MLX conversion (`build-llama.sh mlx`), the MLX engine's default.
pub(crate) const DEFAULT_MLX_MODEL_ID: &str = "SmolLM2-135M-Instruct";

/// `RUST_LOG` decides; by default the warden's own INFO lines and warnings
/// from the rest. The child's output is at DEBUG under `crate::child`.
pub(crate) fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,llm_warden=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// The catalog of a models directory plus a model named by path or id,
/// which becomes the default (else SmolLM2 when present).
pub(crate) fn build_catalog(
    cfg: &WardenConfig,
    models_dir: Option<PathBuf>,
    model: Option<String>,
) -> anyhow::Result<Catalog> {
    let dir = models_dir.unwrap_or_else(|| cfg.models_dir());
    let mut catalog = Catalog::scan(&dir);
    match model {
        Some(m) => {
            let path = PathBuf::from(&m);
            if path.exists() {
                catalog.add_path(&path).with_context(|| {
                    format!(
                        "{} holds no model (a .gguf file, a split family or a model directory)",
                        path.display()
                    )
                })?;
            } else if !catalog.set_default(&m) {
                bail!(
                    "no model '{m}': not a file, and not an id in {} (ids: {})",
                    dir.display(),
                    ids(&catalog)
                );
            }
        }
        None => {
            if !catalog.set_default(DEFAULT_MODEL_ID) {
                catalog.set_default(DEFAULT_MLX_MODEL_ID);
            }
        }
    }
    if catalog.entries().is_empty() {
        bail!(
            "no models in {}: run ./build-llama.sh to fetch the default models, or pass --model PATH",
            dir.display()
        );
    }
    Ok(catalog)
}

fn ids(c: &Catalog) -> String {
    let v: Vec<&str> = c.entries().iter().map(|e| e.id.as_str()).collect();
    if v.is_empty() { "none".into() } else { v.join(", ") }
}
