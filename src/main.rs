//! The `llm-warden` binary: `serve` (the HTTP server), `chat` (a streamed
//! answer in the terminal), `inspect` (a model's facts and the window the
//! warden would give it here), and for a running server `status` (its whole
//! snapshot), `ps` (what is loaded), `load`, `unload` and `models`; and
//! `worker` (this machine's devices lent to a warden through llama.cpp's
//! rpc-server).

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Serve(cli::serve::ServeArgs),
    /// Ask one question and stream the answer (to a running server, or to one
    /// started in-process).
    Chat(cli::chat::ChatArgs),
    /// Show a model's facts and the window the warden would choose here.
    Inspect(cli::inspect::InspectArgs),
    /// Show a running server's whole status.
    Status(cli::status::StatusArgs),
    /// Show what a running server has loaded: model, window, memory, when
    /// it unloads, the queue.
    Ps(cli::ps::PsArgs),
    /// Load (or switch to) a model now, and wait until it is ready.
    Load(cli::load::LoadArgs),
    /// Unload the model now, freeing its memory.
    Unload(cli::unload::UnloadArgs),
    /// List the models a running server offers.
    Models(cli::models::ModelsArgs),
    /// Lend this machine's devices to a warden: supervise llama.cpp's
    /// ggml-rpc-server and answer its status at /worker/status.
    Worker(cli::worker::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_tracing();
    let result = actix_web::rt::System::new().block_on(async move {
        match cli.command {
            Command::Serve(a) => cli::serve::run(a).await,
            Command::Chat(a) => cli::chat::run(a).await,
            Command::Inspect(a) => cli::inspect::run(a).await,
            Command::Status(a) => cli::status::run(a).await,
            Command::Ps(a) => cli::ps::run(a).await,
            Command::Load(a) => cli::load::run(a).await,
            Command::Unload(a) => cli::unload::run(a).await,
            Command::Models(a) => cli::models::run(a).await,
            Command::Worker(a) => cli::worker::run(a).await,
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
