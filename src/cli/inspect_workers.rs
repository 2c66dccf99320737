//! `inspect MODEL --worker HOST:PORT ...`: the plan over RPC workers, per
//! device, exactly as a load would make it (`warden::plan::plan_over_workers`:
//! fresh readings of every worker, refining the CPU engine's own plan), said
//! as a table or JSON.

use crate::error::ModelLoadError;
use crate::warden::plan::SpawnPlan;
use crate::warden::plan::rpc_argv;
use serde_json::json;

/// The plan as JSON (`inspect --json`'s `workers` part).
pub fn to_json(plan: &Result<SpawnPlan, ModelLoadError>) -> serde_json::Value {
    match plan {
        Ok(p) => json!({
            "window": p.window,
            "context_tokens": p.window.ctx(),
            "split": p.rpc(),
            "argv": rpc_argv(p),
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
    println!("llama-server {}", rpc_argv(p).unwrap_or_default().join(" "));
}
