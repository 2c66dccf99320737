//! The `llm-warden` binary, as a module of the library (`cli::main`): `serve` (the HTTP server), `chat` (a streamed
//! answer in the terminal), `run` (a conversation in the terminal), `pull` (a
//! GGUF from the Hugging Face hub), `inspect` (a model's facts and the window the
//! warden would give it here), and for a running server `status` (its whole
//! snapshot), `ps` (what is loaded), `load`, `unload`, `reload` and `models`; and
//! `worker` (this machine's devices lent to a warden through llama.cpp's
//! rpc-server).

//!
//! The binary's subcommands, one file each, and what they share.
//!
//! - `serve` runs the server; `chat` asks it (or an in-process warden) one
//!   question and `run` holds a conversation with it, both through `turns`;
//!   `inspect` reads a model file, no server involved.
//! - The client subcommands `status`, `ps`, `load`, `unload`, `reload` and `models`
//!   call a running server through `client` (which server, the key, errors
//!   that say what to do) and print with `table` (pure formatting, tested
//!   row by row), or the server's JSON with `--json`.
//! - `worker` runs this machine as an RPC worker of some warden.

pub(crate) mod chat;
pub(crate) mod client;
pub(crate) mod config;
pub(crate) mod config_check;
pub(crate) mod inspect;
pub(crate) mod inspect_workers;
pub(crate) mod load;
pub(crate) mod models;
pub(crate) mod ps;
pub(crate) mod pull;
pub(crate) mod reload;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod status;
pub(crate) mod table;
pub(crate) mod turns;
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
    /// Hold a conversation with a model in the terminal (history kept while
    /// it runs; `/?` lists the commands).
    Run(self::run::RunArgs),
    /// Fetch a GGUF model from the Hugging Face hub into its cache (ORG/NAME
    /// or ORG/NAME:QUANT), resuming a pull cut short.
    Pull(self::pull::PullArgs),
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
    /// Read the settings file and the model stores again now, and say what
    /// changed (the server also does every 2 s and on SIGHUP).
    Reload(self::reload::ReloadArgs),
    /// List the models a running server offers.
    Models(self::models::ModelsArgs),
    /// Lend this machine's devices to a warden: supervise llama.cpp's
    /// ggml-rpc-server and answer its status at /worker/status.
    Worker(self::worker::WorkerArgs),
    /// Check a settings file: what a start would refuse, with its line and
    /// column.
    #[command(subcommand)]
    Config(self::config::ConfigCommand),
}

/// The `llm-warden` binary's whole `main`: parse, run, map the error.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // A conversation in the terminal shows the answer, not the log: the
    // warden's INFO lines only when RUST_LOG asks for them.
    let quiet = matches!(cli.command, Command::Chat(_) | Command::Run(_));
    self::init_tracing(if quiet { "warn" } else { "warn,llm_warden=info" });
    let result = actix_web::rt::System::new().block_on(async move {
        match cli.command {
            Command::Serve(a) => self::serve::run(a).await,
            Command::Chat(a) => self::chat::run(a).await,
            Command::Run(a) => self::run::run(a).await,
            Command::Pull(a) => self::pull::run(a).await,
            Command::Inspect(a) => self::inspect::run(a).await,
            Command::Status(a) => self::status::run(a).await,
            Command::Ps(a) => self::ps::run(a).await,
            Command::Load(a) => self::load::run(a).await,
            Command::Unload(a) => self::unload::run(a).await,
            Command::Reload(a) => self::reload::run(a).await,
            Command::Models(a) => self::models::run(a).await,
            Command::Worker(a) => self::worker::run(a).await,
            Command::Config(c) => self::config::run(c),
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

/// `RUST_LOG` decides; else `default` (the warden's own INFO lines and
/// warnings from the rest, or warnings alone for a conversation in the
/// terminal). The child's output is at DEBUG under `crate::child`.
/// Colour only when standard error is a terminal and `NO_COLOR` is unset:
/// `./run.sh > log` and a service's journal get plain text.
pub(crate) fn init_tracing(default: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let no_color = std::env::var_os("NO_COLOR");
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(log_colour(std::io::stderr().is_terminal(), no_color.as_deref()))
        .init();
}

/// Whether log lines carry colour codes: on a terminal only, and never when
/// `NO_COLOR` is set to anything but the empty string (no-color.org).
pub(crate) fn log_colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The catalog of a models directory plus a model named by path or id,
/// which becomes the default (else SmolLM2 when present). Empty is refused
/// unless `empty_ok` (`serve`, whose reload picks up a model that arrives).
pub(crate) fn build_catalog(
    cfg: &WardenConfig,
    models_dir: Option<PathBuf>,
    model: Option<String>,
    empty_ok: bool,
) -> anyhow::Result<Catalog> {
    let dir = models_dir.unwrap_or_else(|| cfg.models_dir());
    let mut catalog = Catalog::scan(&dir);
    // The models other tools keep (Ollama, the Hugging Face cache, LM
    // Studio, llama.cpp's cache), after the warden's own.
    catalog.add_stores(&crate::catalog::stores::Stores::locate(&cfg.stores, |k| {
        std::env::var(k).ok()
    }));
    // The settings file's aliases, before `model` may name one.
    catalog.add_aliases(&cfg.models);
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
    if catalog.entries().is_empty() && !empty_ok {
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

#[cfg(test)]
mod tests {
    use super::log_colour;
    use std::ffi::OsStr;

    /// Colour only on a terminal, and never with a non-empty `NO_COLOR`.
    #[test]
    fn log_colour_table() {
        let rows: [(bool, Option<&str>, bool); 5] = [
            // why: a terminal with nothing said gets colour
            (true, None, true),
            // why: a pipe or a file (`./run.sh > log`) never gets escape codes
            (false, None, false),
            // why: NO_COLOR set to anything turns colour off (no-color.org)
            (true, Some("1"), false),
            // why: an empty NO_COLOR counts as unset (no-color.org)
            (true, Some(""), true),
            // why: NO_COLOR cannot turn colour on for a pipe
            (false, Some(""), false),
        ];
        for (i, (terminal, no_color, want)) in rows.into_iter().enumerate() {
            let got = log_colour(terminal, no_color.map(OsStr::new));
            assert_eq!(got, want, "row {i}: terminal={terminal} NO_COLOR={no_color:?}");
        }
    }
}
