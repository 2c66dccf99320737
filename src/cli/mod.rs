//! The binary's subcommands, one file each, and what they share.
//!
//! - `serve` runs the server; `chat` asks it (or an in-process warden) one
//!   question; `inspect` reads a model file, no server involved.
//! - The client subcommands `status`, `ps`, `load`, `unload` and `models`
//!   call a running server through `client` (which server, the key, errors
//!   that say what to do) and print with `table` (pure formatting, tested
//!   row by row), or the server's JSON with `--json`.
//! - `worker` runs this machine as an RPC worker of some warden.

pub mod chat;
pub mod client;
pub mod inspect;
pub mod inspect_workers;
pub mod load;
pub mod models;
pub mod ps;
pub mod serve;
pub mod status;
pub mod table;
pub mod unload;
pub mod worker;

use std::path::PathBuf;

use anyhow::{Context, bail};
use llm_warden::{Catalog, WardenConfig};

/// The model build-llama.sh fetches first: the default everywhere.
pub const DEFAULT_MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";
/// Its MLX conversion (`build-llama.sh mlx`), the MLX engine's default.
pub const DEFAULT_MLX_MODEL_ID: &str = "SmolLM2-135M-Instruct";

/// `RUST_LOG` decides; by default the warden's own INFO lines and warnings
/// from the rest. The child's output is at DEBUG under `llm_warden::child`.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,llm_warden=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// The catalog of a models directory plus a model named by path or id,
/// which becomes the default (else SmolLM2 when present).
pub fn build_catalog(
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
