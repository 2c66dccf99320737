//! `llm-warden inspect <model>`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// `inspect`'s options.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A model path or catalog id.
    model: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The models directory (for ids).
    #[arg(long)]
    models_dir: Option<PathBuf>,
}

pub fn run(_a: InspectArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("inspect lands with the GGUF reader")
}
