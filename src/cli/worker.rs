//! `llm-warden worker`: this machine as an RPC worker of some warden
//! (`crate::worker`): rpc-server supervised, its status at
//! `GET /worker/status` behind the worker's key.

use std::process::ExitCode;

use crate::rpc::status::{DEFAULT_RPC_PORT, DEFAULT_STATUS_PORT};
use crate::worker::{self, WorkerConfig};
use clap::Args;

/// `worker`'s options.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Address both the status endpoint and rpc-server bind. rpc-server has
    /// no authentication or encryption: anything but loopback belongs on a
    /// private network or behind a tunnel.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The status endpoint's port (0: any free one; the URL is printed).
    #[arg(long, default_value_t = DEFAULT_STATUS_PORT)]
    port: u16,
    /// rpc-server's port, the one the warden's `serve --worker HOST:PORT`
    /// (or `WARDEN_WORKERS`) names.
    #[arg(long, default_value_t = DEFAULT_RPC_PORT)]
    rpc_port: u16,
    /// CPU threads rpc-server computes with (its own default: 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// A device rpc-server exposes (`CPU`, `CUDA0`); repeat for more
    /// (default: all it finds).
    #[arg(long = "device", value_name = "DEV")]
    devices: Vec<String>,
    /// Let rpc-server keep received tensors in its local file cache, so a
    /// reload sends only their hashes.
    #[arg(long)]
    cache: bool,
}

pub async fn run(a: WorkerArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = WorkerConfig::from_env()?;
    // rpc-server's -H takes a bare address; the endpoint and URLs bracket it.
    cfg.rpc.host = a.host.trim_start_matches('[').trim_end_matches(']').to_string();
    cfg.rpc.port = a.rpc_port;
    cfg.rpc.threads = a.threads;
    cfg.rpc.devices = a.devices;
    cfg.rpc.cache = a.cache;
    cfg.status_port = a.port;
    worker::run(cfg, super::serve::stop_signal()).await?;
    Ok(ExitCode::SUCCESS)
}
