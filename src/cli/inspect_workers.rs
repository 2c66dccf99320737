//! `inspect MODEL --worker HOST:PORT ...`: the plan over RPC workers, per
//! device, exactly as a load would make it (`engines::cpu::rpc::plan` over fresh
//! readings of every worker, refining the CPU engine's own plan).

use crate::WardenConfig;
use crate::engines::cpu::rpc::{self, Reading};
use crate::engines::{SpawnPlan, llama};
use crate::error::ModelLoadError;
use crate::rpc::remote::{LOAD_READ_TIMEOUT, Remote};
use serde_json::json;

/// The CPU plan `base` split over `cfg.workers`, or why a load would fail.
pub async fn plan(cfg: &WardenConfig, base: SpawnPlan) -> Result<SpawnPlan, ModelLoadError> {
    let remote = Remote::new(cfg.worker_key.clone());
    let now = remote.read_all(&cfg.workers, LOAD_READ_TIMEOUT).await;
    let readings: Vec<Reading> = cfg
        .workers
        .iter()
        .zip(now)
        .map(|(addr, now)| Reading {
            addr: addr.clone(),
            now,
            last_good: None,
            polls: 0,
        })
        .collect();
    // The warden's own build, as a load compares it.
    let ours = llama::find_llama_server(cfg, llama::Flavour::Cpu)
        .map(|p| crate::rpc::build::of_binary(&p))
        .unwrap_or_else(|_| crate::rpc::status::WorkerBuild {
            llama_cpp: None,
            rpc_protocol: None,
            flavour: None,
        });
    rpc::plan(base, &readings, &ours, cfg.ctx_pin)
}

/// The plan as JSON (`inspect --json`'s `workers` part).
pub fn to_json(plan: &Result<SpawnPlan, ModelLoadError>) -> serde_json::Value {
    match plan {
        Ok(p) => json!({
            "window": p.window,
            "context_tokens": p.window.ctx(),
            "split": p.rpc(),
            "argv": p.rpc().map(|r| rpc::argv(r).iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>()),
        }),
        Err(e) => json!({"error": {"code": e.code(), "message": e.to_string()}}),
    }
}

/// The plan as a table, one row per device.
pub fn print(plan: &Result<SpawnPlan, ModelLoadError>) {
    let p = match plan {
        Ok(p) => p,
        Err(e) => {
            println!("\nover the workers: a load would fail ({}): {e}", e.code());
            return;
        }
    };
    let Some(r) = p.rpc() else { return };
    let mib = |b: u64| format!("{:.0}", b as f64 / (1u64 << 20) as f64);
    println!(
        "\nover the workers: window {} tokens",
        p.window.ctx().map_or("unsized".into(), |c| c.to_string())
    );
    println!(
        "{:<28} {:>6} {:>6} {:>10} {:>8} {:>9} {:>9} {:>9}",
        "device", "layers", "output", "weights", "KV", "compute", "total", "limit"
    );
    for s in &r.split.shares {
        println!(
            "{:<28} {:>6} {:>6} {:>6} MiB {:>4} MiB {:>5} MiB {:>5} MiB {:>5} MiB",
            s.name,
            s.layers,
            if s.output { "yes" } else { "" },
            mib(s.weights_bytes),
            mib(s.kv_bytes),
            mib(s.compute_bytes),
            mib(s.total_bytes()),
            mib(s.limit_bytes.max(0) as u64)
        );
    }
    for l in &r.left_out {
        println!("{:<28} left out: {}", l.addr, l.why);
    }
    let argv: Vec<String> = rpc::argv(r).iter().map(|a| a.to_string_lossy().into_owned()).collect();
    println!("llama-server {}", argv.join(" "));
}
