//! `llm-warden config check FILE`: what a start with the settings file
//! would refuse, said before anyone starts: a file that does not parse, a
//! key the warden does not know, a value of the wrong kind (each with its
//! line and column), or a value the warden refuses (named by its key).
//! The environment is not consulted: the file is checked alone.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use crate::config::{WardenConfig, file};

/// `config`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a settings file; exit 1, saying where, when a start would refuse it.
    Check {
        /// The file.
        file: PathBuf,
    },
}

pub fn run(c: ConfigCommand) -> anyhow::Result<ExitCode> {
    let ConfigCommand::Check { file: path } = c;
    let checked = file::load(&path)
        .map_err(crate::config::SettingsError::from)
        .and_then(|f| WardenConfig::from_sources(|_| None, Some((f, path.clone()))));
    match checked {
        Ok(cfg) => {
            println!(
                "{}: ok ({} model setting(s){})",
                path.display(),
                cfg.models.len(),
                if cfg.models.is_empty() {
                    String::new()
                } else {
                    format!(": {}", cfg.models.keys().cloned().collect::<Vec<_>>().join(", "))
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
