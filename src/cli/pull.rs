//! `llm-warden pull ORG/NAME[:QUANT]`: fetches a GGUF model from the
//! Hugging Face hub into the hub's own cache (`catalog::pull`), with a
//! progress bar on a terminal; a pull cut short resumes where it stopped.
//! A running warden serves it within its watch period (2 s) as `ORG/NAME`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Args;

use super::table::human_bytes;
use crate::WardenConfig;
use crate::catalog::pull::{Puller, parse};

/// `pull`'s options.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// The model: ORG/NAME (the quant this machine fits best) or
    /// ORG/NAME:QUANT (hf.co/ORG/NAME:QUANT as Ollama writes it works too).
    name: String,
}

pub async fn run(a: PullArgs) -> anyhow::Result<ExitCode> {
    let want = parse(&a.name).map_err(anyhow::Error::msg)?;
    let cfg = WardenConfig::load(None)?;
    let ram = crate::sensors::ram::ram_total(cfg.ram_override_bytes).bytes;
    let (puller, cache) = Puller::from_env(std::io::stderr().is_terminal()).map_err(anyhow::Error::msg)?;
    eprintln!("pulling {}…", a.name.trim());
    let pulled = puller.pull(&want, ram).await?;
    let file = pulled
        .path
        .file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    println!(
        "pulled {} ({file}, {}) into {}",
        pulled.id,
        human_bytes(pulled.bytes),
        cache.display()
    );
    match &pulled.shadowed_by {
        None => println!("run it: llm-warden run {}", pulled.id),
        Some(other) => println!(
            "note: {} also holds {other}, which the warden serves under that id first (its quant order): remove it from the snapshot to serve this one",
            pulled.id
        ),
    }
    Ok(ExitCode::SUCCESS)
}
