//! warden-bench: llm-warden against llama-server direct, in one run.
//!
//! Run it through `./bench/run.sh [--model M] [--rounds N]`, which builds
//! both binaries in release mode first. Phases, in order (each module's docs
//! say what it measures and how):
//!
//! 1. `gguf`: header read time of every real model (`read_model_facts`).
//! 2. The warden starts (`serve --preload`) on the model; the window it
//!    chose (`context_tokens` of `/warden/status`) is given to a llama-server
//!    started directly with the same binary, argv and key mechanism
//!    (`procs`). One warm turn, a second of quiet, the warden's `VmRSS`:
//!    "at rest".
//! 3. `pairs`: warm decode rate and TTFT, interleaved, per-round ratios, on
//!    fresh processes every round (the direct server restarted, the warden's
//!    child reloaded, in alternating order).
//! 4. `relay` (diagnostic): the same pairs through a bare TCP relay in front
//!    of the direct server: what one extra hop costs here.
//! 5. `aa` (diagnostic): the same pairs against a second direct server: the
//!    noise floor of a pair (two identical llama-servers differ by several %).
//! 6. `status`: `/warden/status` latency at rest and while a stream runs.
//! 7. `cold`: request to first token from nothing loaded.
//! 8. `rss` (`memory`): `VmRSS` growth over many short turns.
//! 9. `brake`: the memory brake's warm shrink+respawn, on fresh wardens.
//! 10. `kv`: the next turn after a reap and a conversation switch, restored
//!     or re-read.
//! 11. `residents`: a switch between resident models against today's
//!     one-model switch, chat beside an embedding batch, the warden's RSS
//!     with three residents.
//! 12. `rpc`: a split over loopback RPC workers.
//! 13. `concurrency`: 1, 4 and 8 clients at once on one model, against
//!     llama-server's own defaults (4 slots over one pool).
//! 14. `lone`: one person's conversations one after another: a lone stream
//!     after N held conversations, and a return, against llama-server with
//!     one slot and with its own defaults.
//! 15. `lone-paired`: the lone stream's decode settled beyond the noise:
//!     the three sides of `lone` alive at once, taking turns, 8 pairs a
//!     round.
//! 16. `contention`: two models that cannot both be resident, clients per
//!     model at different rates, the scheduler against first come, first
//!     served.
//!
//! Noise (`quiet`): each round waits for a quiet machine and is measured
//! again when other processes took CPU during it.
//!
//! `phases` runs them in this order over one shared context. Progress goes
//! to stderr; the markdown table and, last, the one machine-readable line
//! go to stdout; `report` writes the files. Every process is cleaned up on
//! the way out, Ctrl-C included (`procs::sweep`).
//! The run exits 0 when every phase ran, whether or not targets were met.

mod brake;
mod chart;
mod client;
mod cold;
mod concurrency;
mod contention;
mod gguf;
mod kv;
mod lone;
mod lone_paired;
mod memory;
mod pairs;
mod phases;
mod procs;
mod quiet;
mod relay;
mod report;
mod residents;
mod rpc;
mod stats;
mod status;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::Parser;
use llm_warden::WardenConfig;
use llm_warden::engines::llama::{Flavour, find_llama_server};

use phases::Run;

/// Benchmarks llm-warden against llama-server direct.
#[derive(Debug, Parser)]
#[command(name = "warden-bench")]
struct Args {
    /// The model: a path, or a file name (or id) in the models directory.
    #[arg(long, default_value = "SmolLM2-135M-Instruct.Q4_1.gguf")]
    model: String,
    /// Rounds of each paired measure (pairs, cold, brake).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Rounds of the lone-paired phase (each three fresh servers and 8
    /// pairs; about 2.5 minutes a round here).
    #[arg(long, default_value_t = 2)]
    lone_paired_rounds: usize,
    /// Tokens generated per warm decode turn.
    #[arg(long, default_value_t = 128)]
    max_tokens: u32,
    /// Short turns of the memory-growth phase.
    #[arg(long, default_value_t = 1000)]
    turns: usize,
    /// `/warden/status` requests per latency sample set.
    #[arg(long, default_value_t = 300)]
    status_n: usize,
    /// Timed reads per model of the GGUF phase.
    #[arg(long, default_value_t = 20)]
    gguf_n: usize,
    /// `WARDEN_RAM_OVERRIDE_GB` of the brake phase.
    #[arg(long, default_value = "0.65")]
    brake_ram_gb: String,
    /// Phases to run (comma-separated): gguf,pairs,relay,aa,status,cold,rss,brake,kv,residents,rpc,concurrency,lone,lone-paired,contention.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "gguf,pairs,relay,aa,status,cold,rss,brake,kv,residents,rpc,concurrency,lone,lone-paired,contention"
    )]
    phases: Vec<String>,
    /// The llm-warden binary (default: next to this one).
    #[arg(long)]
    warden_bin: Option<PathBuf>,
    /// The llama-server binary (default: the one the warden would find).
    #[arg(long)]
    llama_server: Option<PathBuf>,
    /// Where results go (default: bench/results).
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

/// What every phase shares.
pub struct Setup {
    /// llama-server.
    pub server: PathBuf,
    /// llm-warden.
    pub warden_bin: PathBuf,
    /// The model file.
    pub model: PathBuf,
    /// Its catalog id (the direct server's alias too).
    pub model_id: String,
    /// The window the warden chose (tokens).
    pub window: u32,
}

impl Setup {
    /// The binaries and the model of `args`; the window and the id are
    /// learnt from the shared warden.
    fn resolve(args: &Args, cfg: &WardenConfig) -> anyhow::Result<Self> {
        let server = match &args.llama_server {
            Some(p) => p.clone(),
            None => find_llama_server(cfg, Flavour::Cpu)?,
        };
        let warden_bin = match &args.warden_bin {
            Some(p) => p.clone(),
            None => std::env::current_exe()?.with_file_name("llm-warden"),
        };
        if !warden_bin.is_file() {
            bail!(
                "{} is missing: build it (cargo build --release -p llm-warden)",
                warden_bin.display()
            );
        }
        let model = resolve_model(&args.model, &cfg.models_dir())?;
        Ok(Self {
            server,
            warden_bin,
            model,
            model_id: String::new(),
            window: 0,
        })
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime builds");
    let result = rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = run(args) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted (SIGINT)")),
            _ = term.recv() => Err(anyhow::anyhow!("terminated (SIGTERM)")),
        }
    });
    // The run's future is gone: its processes got SIGKILL (kill_on_drop) or
    // were stopped; make sure of it, and of the wardens' children.
    drop(rt);
    let left = procs::sweep();
    if !left.is_empty() {
        eprintln!("warden-bench: had to SIGKILL leftover processes {left:?}");
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("warden-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let cfg = WardenConfig::from_env()?;
    let setup = Setup::resolve(&args, &cfg)?;
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("results"));
    let start = report::Start::now();
    let http = reqwest::Client::builder().no_proxy().tcp_nodelay(true).build()?;
    eprintln!(
        "warden-bench: model {}, llama-server {}",
        setup.model.display(),
        setup.server.display()
    );
    let mut run = Run::new(&args, http, setup);
    run.gguf(&cfg.models_dir());
    run.shared_warden().await?;
    run.brake().await;
    run.kv().await;
    run.residents().await;
    run.rpc().await;
    run.concurrency().await;
    run.lone().await;
    run.lone_paired().await;
    run.contention().await;
    run.report(&out_dir, &start)
}

/// A model path: as given when it exists, else a file (or `id.gguf`) in the
/// models directory.
fn resolve_model(m: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let p = PathBuf::from(m);
    if p.is_file() {
        return Ok(std::fs::canonicalize(p)?);
    }
    for c in [dir.join(m), dir.join(format!("{m}.gguf"))] {
        if c.is_file() {
            return Ok(c);
        }
    }
    bail!("no model '{m}' (not a file, nor in {})", dir.display())
}
