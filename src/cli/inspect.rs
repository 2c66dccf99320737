//! `llm-warden inspect <model>`: what the warden reads from a model's header
//! and the window it would give the model on this machine (CPU law), as a
//! table or `--json`; with `--worker` (or `WARDEN_WORKERS`) also the plan
//! over those RPC workers, per device (`inspect_workers`). A broken file is
//! an error with its code (exit 2).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use llm_warden::WardenConfig;
use llm_warden::catalog::{self, ModelFormat};
use llm_warden::gguf::{self, ModelFacts};
use llm_warden::law::{kv, window};
use llm_warden::sensors::ram;
use serde_json::json;

/// `inspect`'s options.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A model path (file, split family's first part, directory) or catalog id.
    model: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The models directory (for ids).
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// An `llm-warden worker` (HOST:PORT) to plan the split over; repeat for
    /// more. Replaces WARDEN_WORKERS.
    #[arg(long = "worker", value_name = "HOST:PORT")]
    workers: Vec<String>,
}

pub async fn run(a: InspectArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = WardenConfig::from_env()?;
    if !a.workers.is_empty() {
        cfg.workers = llm_warden::config::workers("--worker", a.workers.iter().map(String::as_str))?;
    }
    let path = PathBuf::from(&a.model);
    let entry = if path.exists() {
        catalog::entry_for(&path)
    } else {
        let dir = a.models_dir.clone().unwrap_or_else(|| cfg.models_dir());
        catalog::Catalog::scan(&dir).get(&a.model).map(|e| (*e).clone())
    };
    let (model_path, mmproj) = match &entry {
        Some(e) if e.format == ModelFormat::Mlx => {
            anyhow::bail!(
                "{} is an MLX model directory: inspect reads GGUF models",
                e.path.display()
            )
        }
        Some(e) => (e.path.clone(), e.mmproj.clone()),
        // Not a recognised model: read it anyway, so the reader says why.
        None => (path, None),
    };
    if entry.is_none() && model_path.is_dir() {
        let msg = format!(
            "{} holds no GGUF model (no .gguf file other than mmproj sidecars)",
            model_path.display()
        );
        return Ok(fail(a.json, "no_model_in_directory", &msg));
    }
    let facts = match gguf::read_model_facts(&model_path) {
        Ok(f) => f,
        Err(e) => return Ok(fail(a.json, e.code(), &e.to_string())),
    };
    let mmproj_bytes = mmproj
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    let report = Report::new(&cfg, facts, mmproj_bytes);
    let split = if cfg.workers.is_empty() {
        None
    } else {
        Some(super::inspect_workers::plan(&cfg, &model_path, report.facts.clone(), report.shape, report.ram).await)
    };
    if a.json {
        let mut j = report.to_json();
        if let Some(s) = &split {
            j["workers"] = super::inspect_workers::to_json(s);
        }
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        report.print_table(&model_path);
        if let Some(s) = &split {
            super::inspect_workers::print(s);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Reports an error (exit status 2): JSON on stdout with `--json`, else stderr.
fn fail(json_out: bool, code: &str, message: &str) -> ExitCode {
    if json_out {
        println!("{}", json!({"error": {"code": code, "message": message}}));
    } else {
        eprintln!("error ({code}): {message}");
    }
    ExitCode::from(2)
}

/// Everything `inspect` shows.
struct Report {
    facts: ModelFacts,
    shape: window::ModelShape,
    ram: ram::RamTotal,
    budget: i64,
    window: window::Window,
}

impl Report {
    fn new(cfg: &WardenConfig, facts: ModelFacts, mmproj_bytes: u64) -> Self {
        let shape = window::shape_of(&facts, mmproj_bytes);
        let ram = ram::ram_total(cfg.ram_override_bytes);
        let budget = window::cpu_budget(ram.bytes, shape.weights_bytes);
        let window = window::cpu(&shape, ram.bytes, None, cfg.ctx_pin);
        Self {
            facts,
            shape,
            ram,
            budget,
            window,
        }
    }

    fn footprint(&self) -> Option<u64> {
        self.window.ctx().map(|w| window::footprint_bytes(&self.shape, w))
    }

    fn kv_heads(&self) -> String {
        let h = &self.facts.kv_heads;
        match (h.iter().min(), h.iter().max()) {
            (Some(a), Some(b)) if a == b => a.to_string(),
            (Some(a), Some(b)) => format!("{a}-{b} (per layer)"),
            _ => "-".into(),
        }
    }

    fn to_json(&self) -> serde_json::Value {
        let f = &self.facts;
        json!({
            "architecture": f.architecture,
            "name": f.name,
            "file_type": f.file_type_name(),
            "layers": f.block_count,
            "kv_heads": f.kv_heads,
            "key_length": f.key_length,
            "value_length": f.value_length,
            "kv_bytes_per_token": self.shape.kv_per_token,
            "sliding_window": f.sliding_window,
            "mla": kv::is_mla(f),
            "trained_window": f.trained_window,
            "weights_bytes": self.shape.weights_bytes,
            "parts": f.parts,
            "chat_template": f.has_chat_template,
            "ram_bytes": self.ram.bytes,
            "ram_source": self.ram.source,
            "budget_bytes": self.budget,
            "window": self.window,
            "context_tokens": self.window.ctx(),
            "memory_bound": self.window.memory_bound().is_some(),
            "predicted_footprint_bytes": self.footprint(),
        })
    }

    fn print_table(&self, path: &std::path::Path) {
        let f = &self.facts;
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
        let window = match self.window {
            window::Window::Sized { ctx, .. } => format!("{ctx} tokens (-c {ctx})"),
            window::Window::Pinned { ctx } => format!("{ctx} tokens (pinned by WARDEN_CTX)"),
            window::Window::Unsized => "no -c (MLA: llama-server's fit sizes it)".into(),
        };
        let rows: Vec<(&str, String)> = vec![
            ("model", path.display().to_string()),
            ("architecture", f.architecture.clone()),
            ("quantization", f.file_type_name().unwrap_or("unknown").into()),
            ("layers", f.block_count.to_string()),
            ("KV heads", self.kv_heads()),
            ("key / value length", format!("{} / {}", f.key_length, f.value_length)),
            ("KV bytes per token", format!("{} B", self.shape.kv_per_token)),
            (
                "sliding window",
                f.sliding_window
                    .map_or("none".into(), |w| format!("{w} (full formula used: an over-estimate)")),
            ),
            (
                "trained window",
                f.trained_window.map_or("unknown".into(), |t| t.to_string()),
            ),
            (
                "weights",
                format!("{} ({} file(s))", mib(self.shape.weights_bytes), f.parts.len()),
            ),
            (
                "RAM",
                format!("{} ({})", mib(self.ram.bytes), self.ram.source.describe()),
            ),
            (
                "budget (0.75 x RAM - weights - 256 MiB)",
                format!("{:.1} MiB", self.budget as f64 / (1u64 << 20) as f64),
            ),
            ("window chosen here", window),
            (
                "memory-bound",
                if self.window.memory_bound().is_some() {
                    "yes"
                } else {
                    "no"
                }
                .into(),
            ),
            ("predicted footprint", self.footprint().map_or("-".into(), mib)),
        ];
        let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in rows {
            println!("{k:<w$}  {v}");
        }
    }
}
