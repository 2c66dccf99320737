//! `llm-warden inspect <model>`: what the warden reads from a model's header
//! and the window a load would give the model on this machine, planned by
//! the engine a warden here would run (`warden::plan::plan_here`, so a CUDA machine
//! shows the CUDA plan; the CPU engine's where the chosen one runs no GGUF
//! or no llama-server is found), as a table or `--json`; with `--worker`
//! (or `WARDEN_WORKERS`) also the CPU engine's plan over those RPC workers,
//! per device (`inspect_workers`). A broken file is an error with its code
//! (exit 2).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use crate::WardenConfig;
use crate::catalog::{self, ModelEntry, ModelFormat};
use crate::gguf::{self, ModelFacts};
use crate::law::cuda::CudaPlacement;
use crate::law::{kv, window};
use crate::status::EngineKind;
use crate::warden::plan;
use crate::warden::plan::SpawnPlan;
use clap::Args;
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
    /// more (the variable: comma-separated).
    #[arg(
        long = "worker",
        value_name = "HOST:PORT",
        env = "WARDEN_WORKERS",
        value_delimiter = ','
    )]
    workers: Vec<String>,
}

pub async fn run(a: InspectArgs) -> anyhow::Result<ExitCode> {
    // from_env has already refused a bad WARDEN_WORKERS under its own name.
    let mut cfg = WardenConfig::load(None)?;
    if !a.workers.is_empty() {
        cfg.workers = crate::config::workers("--worker", a.workers.iter().map(String::as_str))?;
    }
    let entry = match entry_of(&a, &cfg)? {
        Ok(e) => e,
        Err(exit) => return Ok(exit),
    };
    let model_path = entry.path.clone();
    let facts = match gguf::read_model_facts(&model_path) {
        Ok(f) => Arc::new(f),
        Err(e) => return Ok(fail(a.json, e.code(), &e.to_string())),
    };
    let entry = Arc::new(entry);
    let (kind, plan) = plan::plan_here(&cfg, entry.clone(), facts.clone());
    let report = Report { kind, plan, facts };
    let split = if cfg.workers.is_empty() {
        None
    } else {
        // Only the CPU engine splits over workers.
        let base = match report.kind {
            EngineKind::Cpu => report.plan.clone(),
            _ => plan::plan_cpu(&cfg, entry, report.facts.clone()),
        };
        Some(plan::plan_over_workers(&cfg, base).await)
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

/// The model `a.model` names (a path, a catalog id or an alias); `Err` is the exit
/// of a directory that holds no GGUF model.
fn entry_of(a: &InspectArgs, cfg: &WardenConfig) -> anyhow::Result<Result<ModelEntry, ExitCode>> {
    let path = PathBuf::from(&a.model);
    let entry = if path.exists() {
        catalog::entry_for(&path)
    } else {
        // The catalog a server would have: the directory, other tools'
        // stores and the settings file's aliases.
        super::build_catalog(cfg, a.models_dir.clone(), None, true)?
            .get(&a.model)
            .map(|e| (*e).clone())
    };
    Ok(match entry {
        Some(e) if e.format == ModelFormat::Mlx => {
            anyhow::bail!(
                "{} is an MLX model directory: inspect reads GGUF models",
                e.path.display()
            )
        }
        Some(e) => Ok(e),
        None if path.is_dir() => {
            let msg = format!(
                "{} holds no GGUF model (no .gguf file other than mmproj sidecars)",
                path.display()
            );
            Err(fail(a.json, "no_model_in_directory", &msg))
        }
        // Not a recognised model: read it anyway, so the reader says why.
        None => Ok(ModelEntry {
            id: path.display().to_string(),
            format: ModelFormat::Gguf,
            path,
            mmproj: None,
        }),
    })
}

/// Reports an error (exit status 2): JSON on stdout with `--json`, else stderr.
fn fail(json_out: bool, code: &str, message: &str) -> ExitCode {
    if json_out {
        println!("{}", json!({"error": {"code": code, "message": message}}));
    } else {
        eprintln!("llm-warden: error: {message} ({code})");
    }
    ExitCode::from(2)
}

/// Everything `inspect` shows.
struct Report {
    kind: EngineKind,
    facts: Arc<ModelFacts>,
    plan: SpawnPlan,
}

impl Report {
    fn shape(&self) -> window::ModelShape {
        // Planned with the facts: the plan has their shape.
        self.plan.shape.expect("planned with facts")
    }

    fn footprint(&self) -> Option<u64> {
        self.plan
            .window
            .ctx()
            .map(|w| window::footprint_bytes(&self.shape(), w))
    }

    fn kv_heads(&self) -> String {
        let h = &self.facts.kv_heads;
        match (h.iter().min(), h.iter().max()) {
            (Some(a), Some(b)) if a == b => a.to_string(),
            (Some(a), Some(b)) => format!("{a}-{b} (per layer)"),
            _ => "-".into(),
        }
    }

    fn ram(&self) -> crate::sensors::ram::RamTotal {
        // Every engine's plan records the RAM total it read.
        self.plan.ram.expect("every plan reads the RAM total")
    }

    /// Why the window is what it is (`window_reason`).
    fn why(&self) -> String {
        window_reason(&WindowWhy {
            window: self.plan.window,
            trained: self.shape().trained,
            budget_bytes: self.plan.budget_bytes,
            kv_per_token: self.shape().kv_per_token,
            cuda: self.plan.cuda().is_some(),
            slots: self.plan.slots,
        })
    }

    fn to_json(&self) -> serde_json::Value {
        let f = &self.facts;
        let (shape, ram, w) = (self.shape(), self.ram(), self.plan.window);
        let mut j = json!({
            "architecture": f.architecture,
            "name": f.name,
            "file_type": f.file_type_name(),
            "layers": f.block_count,
            "kv_heads": f.kv_heads,
            "key_length": f.key_length,
            "value_length": f.value_length,
            "kv_bytes_per_token": shape.kv_per_token,
            "sliding_window": f.sliding_window,
            "mla": kv::is_mla(f),
            "trained_window": f.trained_window,
            "weights_bytes": shape.weights_bytes,
            "parts": f.parts,
            "chat_template": f.has_chat_template,
            "engine": self.kind,
            "ram_bytes": ram.bytes,
            "ram_source": ram.source,
            "budget_bytes": self.plan.budget_bytes,
            "window": w,
            "context_tokens": w.ctx(),
            "memory_bound": w.memory_bound().is_some(),
            "window_reason": self.why(),
            "slots": self.plan.slots,
            "predicted_footprint_bytes": self.footprint(),
        });
        if let Some(c) = self.plan.cuda() {
            j["cuda"] = json!(c);
        }
        j
    }

    fn print_table(&self, path: &std::path::Path) {
        let mut rows = self.fact_rows(path);
        rows.extend(self.plan_rows());
        let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in rows {
            println!("{k:<w$}  {v}");
        }
    }

    /// The header's rows.
    fn fact_rows(&self, path: &std::path::Path) -> Vec<(&'static str, String)> {
        let f = &self.facts;
        let shape = self.shape();
        vec![
            ("model", path.display().to_string()),
            ("architecture", f.architecture.clone()),
            ("quantization", f.file_type_name().unwrap_or("unknown").into()),
            ("layers", f.block_count.to_string()),
            ("KV heads", self.kv_heads()),
            ("key / value length", format!("{} / {}", f.key_length, f.value_length)),
            ("KV bytes per token", format!("{} B", shape.kv_per_token)),
            (
                "sliding window",
                f.sliding_window.map_or("none".into(), |w| {
                    sliding_note(w, kv::is_over_estimated(f), self.plan.swa)
                }),
            ),
            (
                "trained window",
                f.trained_window.map_or("unknown".into(), |t| t.to_string()),
            ),
            (
                "weights",
                format!("{} ({} file(s))", mib(shape.weights_bytes), f.parts.len()),
            ),
        ]
    }

    /// The plan's rows: the memory it was sized on, the window, the footprint.
    fn plan_rows(&self) -> Vec<(&'static str, String)> {
        let ram = self.ram();
        let w = self.plan.window;
        let window = match w {
            window::Window::Sized { ctx, .. } => format!("{ctx} tokens (-c {ctx})"),
            window::Window::Pinned { ctx } => format!("{ctx} tokens (pinned by WARDEN_CTX)"),
            window::Window::Unsized if self.shape().mla => "no -c (MLA: llama-server's fit sizes it)".into(),
            window::Window::Unsized => "no -c (no GPU to size on: llama-server's fit sizes it)".into(),
        };
        let budget = self
            .plan
            .budget_bytes
            .map_or("-".into(), |b| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64));
        let mut rows = vec![("RAM", format!("{} ({})", mib(ram.bytes), ram.source.describe()))];
        match self.plan.cuda() {
            None => rows.push(("budget (0.75 x RAM - weights - 256 MiB)", budget)),
            Some(c) => {
                rows.push(("engine", "CUDA (the GPU's memory sizes the window)".into()));
                rows.push(("GPU", gpu_row(&c.placement)));
                rows.push((
                    "Flash Attention",
                    if c.flash_attention {
                        "proven (1 KiB per token)"
                    } else {
                        "not proven (non-FA scores per token)"
                    }
                    .into(),
                ));
                rows.push(("budget (min(0.9 x VRAM, free) - 1 GiB - weights - 768 MiB)", budget));
            }
        }
        rows.push(("window chosen here", window));
        rows.push(("why", self.why()));
        rows.push((
            "memory-bound",
            if w.memory_bound().is_some() { "yes" } else { "no" }.into(),
        ));
        rows.push(("predicted footprint", self.footprint().map_or("-".into(), mib)));
        rows
    }
}

/// What the window's reasoning is read from.
struct WindowWhy {
    window: window::Window,
    trained: Option<u32>,
    budget_bytes: Option<i64>,
    kv_per_token: u64,
    cuda: bool,
    slots: u32,
}

/// Why the window is what it is, for a person: the trained window, what
/// memory alone would allow (the CPU law's budget over each token's KV and
/// compute), which bound won, and the conversations that share it.
fn window_reason(w: &WindowWhy) -> String {
    let per_token = w.kv_per_token + window::FA_COMPUTE_BYTES_PER_TOKEN;
    let memory_allows = w
        .budget_bytes
        .filter(|_| !w.cuda)
        .map(|b| (b.max(0) as u64 / per_token.max(1)).min(u64::from(u32::MAX)));
    let trained = w.trained.map_or("unknown".to_string(), |t| t.to_string());
    let mut why = match w.window {
        window::Window::Pinned { ctx } => match w.trained {
            Some(t) if ctx > t => format!(
                "pinned (WARDEN_CTX or the model's ctx setting), beyond the trained window of {t}: past it the answers degrade"
            ),
            _ => "pinned (WARDEN_CTX or the model's ctx setting)".to_string(),
        },
        window::Window::Sized {
            memory_bound: false, ..
        } => match memory_allows {
            Some(m) => format!("the trained window ({trained}) bounds it; memory alone would allow about {m} tokens"),
            None => format!("the trained window ({trained}) bounds it; memory allows more"),
        },
        window::Window::Sized {
            ctx,
            memory_bound: true,
            ..
        } => match memory_allows {
            Some(m) if u64::from(ctx) > m => format!(
                "memory bounds it below the floor (about {m} tokens fit the budget): the model loads at the {ctx}-token floor all the same; the trained window is {trained}"
            ),
            Some(m) => format!("memory bounds it: about {m} tokens fit the budget; the trained window is {trained}"),
            None => format!("memory bounds it; the trained window is {trained}"),
        },
        window::Window::Unsized => "llama-server sizes it at load (--fit)".to_string(),
    };
    if w.slots > 1 && w.window.ctx().is_some() {
        why.push_str(&format!(
            "; {} conversations at once share it (WARDEN_PARALLEL), each up to the whole window",
            w.slots
        ));
    }
    why
}

/// The sliding-window row: what the law now does with the window. A model
/// run with `--swa-full` allocates the full formula exactly; only one whose
/// child keeps just the window's cells is over-estimated (on the safe side).
fn sliding_note(window: u32, over_estimated: bool, swa: kv::SwaCache) -> String {
    match (over_estimated, swa) {
        (true, _) => format!("{window} (the child keeps only these cells; the full formula used: an over-estimate)"),
        (false, kv::SwaCache::Full) => format!(
            "{window} (run with --swa-full: every layer holds the whole window, the formula is exact, conversations are kept across unloads)"
        ),
        (false, kv::SwaCache::Window) => format!(
            "{window} (the sliding layers keep only their window, sized by their own exact formula, so that a larger window fits memory; conversations are re-read after an unload)"
        ),
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

/// The GPU a CUDA plan sized on, or why none.
fn gpu_row(p: &CudaPlacement) -> String {
    match p {
        CudaPlacement::Sized { device, pin } => format!(
            "{} ({}): {} total, {} free{}",
            device.name,
            device.uuid,
            mib(device.total_bytes),
            mib(device.free_bytes),
            if pin.is_some() { ", the child pinned to it" } else { "" }
        ),
        CudaPlacement::Unsized => "none sized on (several devices named, or NVML unreadable)".into(),
        CudaPlacement::NoDevice => "none the child may see".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::{self, GpuSource, Site};
    use crate::law::cuda::GpuDevice;

    /// The window's reason names the bound that won and what memory alone
    /// would allow.
    #[test]
    fn the_window_says_why() {
        let why = |window, trained, budget: Option<i64>, slots| {
            window_reason(&WindowWhy {
                window,
                trained,
                budget_bytes: budget,
                kv_per_token: 23_040,
                cuda: false,
                slots,
            })
        };
        let sized = |ctx, memory_bound| window::Window::Sized {
            ctx,
            memory_bound,
            budget_bytes: 0,
        };
        const MIB: i64 = 1 << 20;
        let rows = [
            // why: 17,729 MiB / (23,040 + 1,024) B = 772,531 tokens: the trained 8192 wins
            (
                why(sized(8192, false), Some(8192), Some(17_729 * MIB), 4),
                "the trained window (8192) bounds it; memory alone would allow about 772531 tokens; 4 conversations at once share it (WARDEN_PARALLEL), each up to the whole window",
            ),
            // why: a negative budget (0.3 GB of RAM): the floor, said
            (
                why(sized(4096, true), Some(8192), Some(-267 * MIB), 1),
                "memory bounds it below the floor (about 0 tokens fit the budget): the model loads at the 4096-token floor all the same; the trained window is 8192",
            ),
            (
                why(sized(6144, true), Some(32_768), Some(150 * MIB), 1),
                "memory bounds it: about 6536 tokens fit the budget; the trained window is 32768",
            ),
            (
                why(window::Window::Pinned { ctx: 100_000 }, Some(8192), None, 1),
                "pinned (WARDEN_CTX or the model's ctx setting), beyond the trained window of 8192: past it the answers degrade",
            ),
        ];
        for (i, (got, want)) in rows.iter().enumerate() {
            assert_eq!(got, want, "row {i}");
        }
    }

    /// The sliding row says what the law does: exact with `--swa-full`, the
    /// small cache's own formula where memory chose it, an over-estimate
    /// only where the child keeps just the window and the law cannot size it.
    #[test]
    fn the_sliding_row_says_what_the_law_does() {
        use kv::SwaCache::{Full, Window};
        assert!(sliding_note(512, false, Full).contains("the formula is exact"));
        assert!(!sliding_note(512, false, Full).contains("over-estimate"));
        assert!(sliding_note(512, false, Window).contains("re-read after an unload"));
        assert!(!sliding_note(512, false, Window).contains("over-estimate"));
        assert!(sliding_note(512, true, Full).contains("over-estimate"));
    }

    /// On a CUDA machine the report is the CUDA engine's plan: the card's
    /// budget and window, the GPU and the Flash-Attention proof.
    #[test]
    fn a_cuda_machine_shows_the_cuda_plan() {
        const GIB: u64 = 1 << 30;
        let gpus = GpuSource::Fixed(vec![GpuDevice {
            index: 0,
            uuid: "GPU-x".into(),
            name: "Card".into(),
            total_bytes: 8 * GIB,
            free_bytes: 2 * GIB,
        }]);
        // SmolLM2-135M's shape: 23,040 B of KV per token, 64/64 heads.
        let facts = Arc::new(ModelFacts {
            architecture: "llama".into(),
            block_count: 30,
            trained_window: Some(8192),
            head_count: vec![9; 30],
            kv_heads: vec![3; 30],
            key_length: 64,
            value_length: 64,
            weights_bytes: 98_362_432,
            ..ModelFacts::default()
        });
        let entry = Arc::new(ModelEntry {
            id: "m".into(),
            format: ModelFormat::Gguf,
            path: "/m/m.gguf".into(),
            mmproj: None,
        });
        let cfg = WardenConfig::default();
        let report = Report {
            kind: EngineKind::Cuda,
            plan: engines::plan::plan(Site::Cuda(&gpus), &cfg, entry, Some(facts.clone()), None, 0),
            facts,
        };
        let j = report.to_json();
        // 2 GiB free: 1 GiB - weights - 768 MiB = 170,073,024 B / 24,064 B -> 6912.
        assert_eq!(j["engine"], "cuda");
        assert_eq!(j["budget_bytes"], 170_073_024);
        assert_eq!(j["context_tokens"], 6912, "{j}");
        assert_eq!(j["memory_bound"], true);
        assert_eq!(j["cuda"]["placement"]["pin"], "GPU-x", "{j}");
        let rows = report.plan_rows();
        let row = |k: &str| rows.iter().find(|(r, _)| *r == k).map(|(_, v)| v.clone());
        assert!(row("GPU").is_some_and(|g| g.starts_with("Card (GPU-x)")), "{rows:?}");
        assert_eq!(row("Flash Attention").as_deref(), Some("proven (1 KiB per token)"));
        assert_eq!(row("window chosen here").as_deref(), Some("6912 tokens (-c 6912)"));
        assert!(row("budget (0.75 x RAM - weights - 256 MiB)").is_none(), "{rows:?}");
    }
}
