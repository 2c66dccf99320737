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
//!
//! Noise (`quiet`): each round waits for a quiet machine and is measured
//! again when other processes took CPU during it.
//!
//! Progress goes to stderr; the markdown table and, last, the one
//! machine-readable line go to stdout; `report` writes the files. Every
//! process is cleaned up on the way out, Ctrl-C included (`procs::sweep`).
//! The run exits 0 when every phase ran, whether or not targets were met.

mod brake;
mod chart;
mod client;
mod cold;
mod gguf;
mod kv;
mod memory;
mod pairs;
mod procs;
mod quiet;
mod relay;
mod report;
mod rpc;
mod stats;
mod status;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use llm_warden::WardenConfig;
use llm_warden::engines::llama::{Flavour, find_llama_server};

use chart::Series;
use client::Target;
use procs::{Direct, WardenProc};
use report::{Line, Raw};

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
    /// Phases to run (comma-separated): gguf,pairs,relay,aa,status,cold,rss,brake,kv,rpc.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "gguf,pairs,relay,aa,status,cold,rss,brake,kv,rpc"
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

/// Headline figures (NaN when a phase did not run).
struct Headline {
    decode_ratio: f64,
    ttft_added_ms: f64,
    cold_ratio: f64,
    respawn_s: f64,
    rss_rest_mib: f64,
    rss_growth_mib: f64,
    status_p99_ms: f64,
}

impl Headline {
    fn line(&self) -> String {
        let f = |v: f64, d: usize| if v.is_finite() { format!("{v:.d$}") } else { "NA".into() };
        format!(
            "decode_ratio={} ttft_added_ms={} cold_ratio={} respawn_s={} rss_rest_mib={} rss_growth_mib={} status_p99_ms={}",
            f(self.decode_ratio, 3),
            f(self.ttft_added_ms, 2),
            f(self.cold_ratio, 3),
            f(self.respawn_s, 3),
            f(self.rss_rest_mib, 1),
            f(self.rss_growth_mib, 2),
            f(self.status_p99_ms, 3)
        )
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let on = |p: &str| args.phases.iter().any(|x| x == p);
    let cfg = WardenConfig::from_env()?;
    let server = match &args.llama_server {
        Some(p) => p.clone(),
        None => find_llama_server(&cfg, Flavour::Cpu)?,
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
    let models_dir = cfg.models_dir();
    let model = resolve_model(&args.model, &models_dir)?;
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("results"));
    let load_start = loadavg();
    let (stamp, when) = report::stamps();
    let http = reqwest::Client::builder().no_proxy().tcp_nodelay(true).build()?;
    let mut raw = Raw::default();
    let mut lines: Vec<Line> = Vec::new();
    let mut series: Vec<Series> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let mut h = Headline {
        decode_ratio: f64::NAN,
        ttft_added_ms: f64::NAN,
        cold_ratio: f64::NAN,
        respawn_s: f64::NAN,
        rss_rest_mib: f64::NAN,
        rss_growth_mib: f64::NAN,
        status_p99_ms: f64::NAN,
    };
    eprintln!(
        "warden-bench: model {}, llama-server {}",
        model.display(),
        server.display()
    );

    if on("gguf") {
        eprintln!("== gguf header reads");
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&models_dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        paths.retain(|p| p.extension().is_some_and(|e| e == "gguf") && p.is_file());
        paths.sort();
        if !paths.contains(&model) {
            paths.push(model.clone());
        }
        match gguf::run(&paths, args.gguf_n, &mut raw) {
            Ok(rows) => lines.extend(gguf::lines(&rows)),
            Err(e) => errors.push(format!("gguf: {e:#}")),
        }
    }

    // The shared warden (and the direct server of the warm phases).
    let mut setup = Setup {
        server: server.clone(),
        warden_bin: warden_bin.clone(),
        model: model.clone(),
        model_id: String::new(),
        window: 0,
    };
    let mut restart_ms = None;
    if ["pairs", "relay", "aa", "status", "cold", "rss"].iter().any(|p| on(p)) {
        eprintln!("== starting the warden and llama-server direct");
        let w = WardenProc::spawn(&warden_bin, &server, &model, true, &[]).await?;
        let s = w.wait_ready(&http).await?;
        setup.window = s["context_tokens"]
            .as_u64()
            .context("no context_tokens in the status")? as u32;
        setup.model_id = s["model"].as_str().unwrap_or("model").to_string();
        eprintln!(
            "  warden at {} loaded {} with a {}-token window",
            w.base, setup.model_id, setup.window
        );
        let wt = w.target();
        client::stream(&http, &wt, client::body("Warm-up: say hello.", 8, true)).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rest_kib = w.rss_kib().context("the warden's VmRSS is unreadable")?;
        h.rss_rest_mib = memory::mib(rest_kib);

        if on("pairs") || on("relay") || on("aa") || on("status") {
            let mut d = Direct::spawn(&server, &model, &setup.model_id, setup.window)?;
            d.wait_healthy(&http, Duration::from_millis(5)).await?;
            if on("pairs") {
                eprintln!("== warm pairs: decode and time to first token ({} rounds)", args.rounds);
                let mut o = pairs::Outcome::default();
                let run: anyhow::Result<()> = async {
                    for r in 0..args.rounds {
                        // Fresh processes on both sides every round, started
                        // in alternating order: two identical llama-servers
                        // decode several % apart (see the aa diagnostic), so
                        // the medians must be over process instances too.
                        if r.is_multiple_of(2) {
                            d.restart(&http, &server, &model, &setup.model_id, setup.window).await?;
                            w.reload(&http).await?;
                        } else {
                            w.reload(&http).await?;
                            d.restart(&http, &server, &model, &setup.model_id, setup.window).await?;
                        }
                        let dt = d.target();
                        pairs::warm(&http, &dt, &wt).await?;
                        let side = pairs::Side {
                            target: &wt,
                            name: "warden",
                            pid: Some(w.proc.pid),
                            shares_server: false,
                        };
                        o.round(&http, &dt, &side, "pairs", r, args.max_tokens, &mut raw)
                            .await?;
                    }
                    Ok(())
                }
                .await;
                match run {
                    Ok(()) => {
                        h.decode_ratio = o.decode_ratio();
                        h.ttft_added_ms = o.ttft_added_ms();
                        lines.extend(o.lines());
                        series.push(Series {
                            name: "decode (client)",
                            colour: "#1f77b4",
                            values: o.decode_ratios.clone(),
                        });
                        series.push(Series {
                            name: "decode (server timings)",
                            colour: "#17becf",
                            values: o.server_ratios.clone(),
                        });
                        series.push(Series {
                            name: "TTFT warm, cached prompt",
                            colour: "#ff7f0e",
                            values: o.ttft_ratios.clone(),
                        });
                    }
                    Err(e) => errors.push(format!("pairs: {e:#}")),
                }
            }
            let dt = d.target();
            if on("relay") {
                eprintln!("== diagnostic: bare TCP relay against direct ({} rounds)", args.rounds);
                let addr: std::net::SocketAddr = d.base.trim_start_matches("http://").parse()?;
                let rt = Target {
                    base: format!("http://127.0.0.1:{}", relay::spawn(addr)?),
                    bearer: dt.bearer.clone(),
                    conversation: None,
                };
                let side = pairs::Side {
                    target: &rt,
                    name: "relay",
                    pid: None,
                    shares_server: true,
                };
                // No pooled connections: llama-server closes each
                // connection after its answer, and through the relay that
                // close can arrive after the next request reused it.
                let fresh = reqwest::Client::builder()
                    .no_proxy()
                    .tcp_nodelay(true)
                    .pool_max_idle_per_host(0)
                    .build()?;
                match pairs::run(&fresh, &dt, side, "relay", args.rounds, args.max_tokens, &mut raw).await {
                    Ok(o) => lines.push(o.diagnostic_line("bare TCP relay in front of llama-server (one extra hop)")),
                    Err(e) => errors.push(format!("relay: {e:#}")),
                }
            }
            if on("aa") {
                eprintln!(
                    "== diagnostic: a second llama-server direct against the first ({} rounds)",
                    args.rounds
                );
                let mut d2 = Direct::spawn(&server, &model, &setup.model_id, setup.window)?;
                d2.wait_healthy(&http, Duration::from_millis(5)).await?;
                let mut o = pairs::Outcome::default();
                let run: anyhow::Result<()> = async {
                    for r in 0..args.rounds {
                        // As the pairs: fresh processes, alternating order.
                        let (first, second) = if r.is_multiple_of(2) {
                            (&mut d, &mut d2)
                        } else {
                            (&mut d2, &mut d)
                        };
                        first
                            .restart(&http, &server, &model, &setup.model_id, setup.window)
                            .await?;
                        second
                            .restart(&http, &server, &model, &setup.model_id, setup.window)
                            .await?;
                        let (a, b) = (d.target(), d2.target());
                        pairs::warm(&http, &a, &b).await?;
                        let side = pairs::Side {
                            target: &b,
                            name: "direct2",
                            pid: None,
                            shares_server: false,
                        };
                        o.round(&http, &a, &side, "aa", r, args.max_tokens, &mut raw).await?;
                    }
                    Ok(())
                }
                .await;
                match run {
                    Ok(()) => {
                        lines.push(o.diagnostic_line("a second llama-server direct (A/A: the noise floor of a pair)"))
                    }
                    Err(e) => errors.push(format!("aa: {e:#}")),
                }
                d2.stop().await;
            }
            if on("status") {
                eprintln!("== /warden/status latency ({} requests per set)", args.status_n);
                match status::run(&http, &w, &d, args.status_n, &mut raw).await {
                    Ok(o) => {
                        h.status_p99_ms = o.p99();
                        lines.extend(o.lines());
                    }
                    Err(e) => errors.push(format!("status: {e:#}")),
                }
            }
            d.stop().await;
        }
        if on("cold") {
            eprintln!("== cold load ({} rounds)", args.rounds);
            match cold::run(&http, &setup, &w, args.rounds, &mut raw).await {
                Ok(o) => {
                    h.cold_ratio = o.ratio();
                    restart_ms = Some(stats::median(&o.direct_stop) + stats::median(&o.direct_healthy));
                    lines.extend(o.lines());
                    series.push(Series {
                        name: "cold load",
                        colour: "#2ca02c",
                        values: o.ratios.clone(),
                    });
                }
                Err(e) => errors.push(format!("cold: {e:#}")),
            }
        }
        if on("rss") {
            eprintln!("== warden VmRSS over {} short turns", args.turns);
            match memory::run(&http, &w, args.turns, rest_kib, &mut raw).await {
                Ok(o) => {
                    h.rss_growth_mib = o.growth_mib();
                    lines.extend(o.lines());
                }
                Err(e) => errors.push(format!("rss: {e:#}")),
            }
        } else {
            lines.extend(
                memory::Outcome {
                    rest_kib,
                    ..Default::default()
                }
                .lines()
                .into_iter()
                .take(1),
            );
        }
        w.stop().await;
    }

    if on("brake") {
        eprintln!("== brake shrink+respawn ({} rounds, fresh warden each)", args.rounds);
        match brake::run(&http, &setup, args.rounds, &args.brake_ram_gb, &mut raw).await {
            Ok(rounds) => {
                h.respawn_s = brake::respawn_s(&rounds);
                lines.extend(brake::lines(&rounds, restart_ms));
            }
            Err(e) => errors.push(format!("brake: {e:#}")),
        }
    }

    if on("kv") {
        let rounds = args.rounds.min(3);
        eprintln!("== kv: the next turn after a reap and a switch, restored or re-read ({rounds} rounds)");
        match kv::run(&http, &setup, rounds, &mut raw).await {
            Ok(l) => lines.extend(l),
            Err(e) => errors.push(format!("kv: {e:#}")),
        }
    }

    if on("rpc") {
        eprintln!(
            "== rpc: local alone vs local + 2 loopback workers ({} rounds)",
            args.rounds
        );
        match rpc::run(&http, &setup, args.rounds, args.max_tokens, &mut raw).await {
            Ok(l) => lines.extend(l),
            Err(e) => errors.push(format!("rpc: {e:#}")),
        }
    }

    // The report.
    let met = lines.iter().filter(|l| l.met == Some(true)).count();
    let targets = lines.iter().filter(|l| l.met.is_some()).count();
    let mut md = format!("# llm-warden benchmark, {when}\n\n");
    md += &format!(
        "- model: `{}` ({} MB), window {} tokens; llama-server `{}`\n",
        model.display(),
        std::fs::metadata(&model).map_or(0, |m| m.len() / 1_000_000),
        setup.window,
        server.display()
    );
    md += &format!(
        "- rounds {}, max_tokens {} (ignore_eos, temperature 0, seed 42), {} short turns, {} status requests per set, {} header reads per model\n",
        args.rounds, args.max_tokens, args.turns, args.status_n, args.gguf_n
    );
    md += &format!(
        "- machine: {} cores; load average {} at start, {} at end\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_start,
        loadavg()
    );
    md += &format!(
        "- noise control: each round waits for a quiet machine (under {:.0}% CPU); a round during which other processes took over {:.0}% of the machine is measured again (up to {} tries): {} retried, {} kept noisy, {} started after a 30 s wait for quiet (foreign_share per round in the CSV)\n",
        quiet::QUIET_BUSY * 100.0,
        quiet::FOREIGN_MAX * 100.0,
        quiet::TRIES,
        quiet::RETRIED.load(std::sync::atomic::Ordering::Relaxed),
        quiet::NOISY.load(std::sync::atomic::Ordering::Relaxed),
        quiet::UNDER_LOAD.load(std::sync::atomic::Ordering::Relaxed),
    );
    md += "- result = median of the per-round values (ratio = warden / direct); spread = min..max over rounds\n\n";
    md += &report::table(&lines);
    md += &format!("\n{met} of {targets} targets met.\n");
    for e in &errors {
        md += &format!("\nPHASE FAILED: {e}\n");
    }
    let last = h.line();
    let svg = chart::svg(
        &format!("llm-warden / llama-server direct, per round ({when})"),
        &series,
    );
    report::write(&out_dir, &stamp, &format!("{md}\n`{last}`\n"), &raw.csv(), &svg)?;
    println!("{md}");
    println!("results: {}/latest.{{md,csv,svg}} and {stamp}.*", out_dir.display());
    println!("{last}");
    if !errors.is_empty() {
        bail!("{} phase(s) failed", errors.len());
    }
    Ok(())
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

/// `/proc/loadavg`'s first three fields.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
