//! `llm-warden config check FILE`: what a start with the settings file
//! would refuse, said before anyone starts, every problem at its line and
//! column (`config_check`): a file that does not parse, a key or a model
//! setting the warden does not know (with the nearest known one), a value
//! of the wrong kind or one the warden refuses; and, as a warning, a model
//! id the catalog does not hold (with the nearest id). The environment's
//! variables are not consulted: the file is checked alone.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use crate::config::WardenConfig;
use crate::config::file::{self, FileError};

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
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: cannot read it ({e})", path.display());
            return Ok(ExitCode::FAILURE);
        }
    };
    // The file as a start reads it: its refusal past the text (a template
    // file that is not there) is said below; its configuration gives the
    // catalog the ids are checked against (the default models directory,
    // the stores and the file's own aliases).
    let loaded = file::load(&path)
        .map_err(crate::config::SettingsError::from)
        .and_then(|f| WardenConfig::from_sources(|_| None, Some((f, path.clone()))));
    let base = loaded.as_ref().ok().cloned().unwrap_or_default();
    let ids: Vec<String> = super::build_catalog(&base, None, None, true)
        .map(|c| {
            c.entries()
                .iter()
                .map(|e| e.id.clone())
                .chain(c.alias_names())
                .collect()
        })
        .unwrap_or_default();
    let mut findings = super::config_check::check(&text, &ids);
    // What a start checks past the text (a template file that is not
    // there), once the text itself is clean.
    if findings.iter().all(|f| !f.error)
        && let Err(e) = &loaded
    {
        eprintln!("{e}");
        return Ok(ExitCode::FAILURE);
    }
    let errors = findings.iter().filter(|f| f.error).count();
    for f in &mut findings {
        f.at.path = Some(path.clone());
        let kind = if f.error { "" } else { "warning: " };
        let FileError {
            line, column, message, ..
        } = &f.at;
        eprintln!("{}: line {line}, column {column}: {kind}{message}", path.display());
    }
    let warnings = findings.len() - errors;
    let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
    if errors > 0 {
        eprintln!(
            "{}: {} a start would refuse{}",
            path.display(),
            plural(errors, "error"),
            if warnings > 0 {
                format!(", {}", plural(warnings, "warning"))
            } else {
                String::new()
            }
        );
        return Ok(ExitCode::FAILURE);
    }
    let models: Vec<&String> = base.models.keys().collect();
    println!(
        "{}: ok ({} model setting(s){}){}",
        path.display(),
        models.len(),
        if models.is_empty() {
            String::new()
        } else {
            format!(": {}", models.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", "))
        },
        if warnings > 0 {
            format!(", {}", plural(warnings, "warning"))
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}
