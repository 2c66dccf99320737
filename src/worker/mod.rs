//! `llm-warden worker`: runs on an extra machine, supervises llama.cpp's
//! `ggml-rpc-server` as its child (the way the engine supervises
//! llama-server) and answers the authenticated status the warden reads
//! before each load and polls to notice a lost worker.
//!
//! ```text
//!  cli::worker --WorkerConfig--> run
//!    |-- build      which rpc-server, which llama.cpp (BUILD_INFO)
//!    |-- key        WARDEN_WORKER_KEY, or <cache>/worker.key (0600)
//!    |-- supervisor spawn, probe, restart with restart::Backoff --watch RpcView--+
//!    |     `-- banner   rpc-server's protocol and devices (pure)                 |
//!    `-- server     GET /worker/status <--------------------------------------------+
//!          `-- devices  RAM (cgroup-bounded), VRAM (NVML), pressure, per request
//! ```
//!
//! The worker's variables (`WARDEN_RPC_SERVER`, `WARDEN_WORKER_KEY`) are read
//! here, like `cli::client`'s: they configure a worker, not the warden;
//! `WardenConfig` still gives the cache and artifact directories.

pub mod banner;
pub mod build;
pub mod devices;
pub mod key;
pub mod restart;
pub mod server;
pub mod supervisor;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use crate::secret::ApiKey;
use crate::config::{ConfigError, WardenConfig};
use crate::rpc::status::{DEFAULT_RPC_PORT, DEFAULT_STATUS_PORT, STATUS_PATH, WorkerDevice};
use devices::Sampler;
use key::KeySource;
use supervisor::{RpcLaunch, Supervisor};

/// Everything a worker needs to start.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The status endpoint's port (0: the OS picks; the URL is printed).
    pub status_port: u16,
    /// rpc-server's address and options (its host is the endpoint's too).
    pub rpc: RpcLaunch,
    /// `WARDEN_RPC_SERVER`: an explicit binary, tried first.
    pub rpc_server: Option<PathBuf>,
    /// `WARDEN_WORKER_KEY`; `None`: the key file's.
    pub key: Option<ApiKey>,
    /// The cache and artifact directories, `CUDA_VISIBLE_DEVICES`.
    pub warden: WardenConfig,
}

impl WorkerConfig {
    /// Loopback, the default ports, and the environment's variables.
    pub fn from_env() -> Result<Self, ConfigError> {
        let var = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Ok(Self {
            status_port: DEFAULT_STATUS_PORT,
            rpc: RpcLaunch {
                host: "127.0.0.1".into(),
                port: DEFAULT_RPC_PORT,
                threads: None,
                devices: Vec::new(),
                cache: false,
            },
            rpc_server: var("WARDEN_RPC_SERVER").map(PathBuf::from),
            key: var("WARDEN_WORKER_KEY").map(ApiKey::from_secret),
            warden: WardenConfig::from_env()?,
        })
    }
}

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("ggml-rpc-server not found (looked at {searched}); run ./build-llama.sh cpu, or set WARDEN_RPC_SERVER")]
    RpcServerMissing { searched: String },
    #[error(transparent)]
    Key(#[from] key::KeyError),
    #[error("could not bind the status endpoint on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("the status endpoint failed: {0}")]
    Serve(std::io::Error),
}

/// Runs the worker until `stop` resolves (the binary passes SIGINT/SIGTERM;
/// it names the signal), then stops rpc-server and returns. Must run on the
/// actix System's own thread (see `supervisor`).
pub async fn run(cfg: WorkerConfig, stop: impl Future<Output = &'static str>) -> Result<(), WorkerError> {
    let host = cfg.rpc.host.clone();
    if !crate::http::origin::is_loopback_bind(&host) {
        tracing::warn!(
            "binding {host}: rpc-server has no authentication or encryption; reach this worker only over a private network or a tunnel"
        );
    }
    let gpu_seen = crate::engines::cuda::nvml::device_count() > 0;
    let binary = build::find_rpc_server(cfg.rpc_server.as_deref(), &cfg.warden, gpu_seen)
        .map_err(|searched| WorkerError::RpcServerMissing { searched })?;
    let build = crate::rpc::build::read_build_info(&binary);
    let (key, source) = key::resolve(cfg.key.clone(), &cfg.warden.cache_dir)?;
    match &source {
        KeySource::Env => tracing::info!("worker key: WARDEN_WORKER_KEY"),
        KeySource::Minted(p) => tracing::info!("worker key: minted into {}", p.display()),
        KeySource::File(p) => tracing::info!("worker key: read from {}", p.display()),
    }
    let sampler = Arc::new(Sampler::new(cfg.warden.cuda_visible_devices.clone()));
    let spec = supervisor::spawn_spec(&binary, &cfg.rpc, cfg.warden.cuda_visible_devices.as_deref());
    // The status endpoint is bound first: a worker whose port is taken
    // starts no rpc-server at all.
    let (view_tx, view_rx) = tokio::sync::watch::channel(supervisor::RpcView::default_for(cfg.rpc.port));
    let bound = server::bind(
        &host,
        cfg.status_port,
        server::StatusSource {
            build: build.clone(),
            rpc: view_rx.clone(),
            sampler: sampler.clone(),
            key,
        },
    )
    .map_err(|source| WorkerError::Bind {
        addr: format!("{host}:{}", cfg.status_port),
        source,
    })?;
    let url = format!("http://{}:{}{STATUS_PATH}", url_host(&host), bound.port);
    println!("llm-warden worker listening on {url}");
    let sup = Supervisor::start(spec, &cfg.rpc, view_tx);
    let announce = actix_web::rt::spawn(announce_ready(view_rx, sampler, url, endpoint(&cfg.rpc), build));
    let handle = bound.server.handle();
    let mut server = actix_web::rt::spawn(bound.server);
    let outcome = tokio::select! {
        r = &mut server => Err(WorkerError::Serve(match r {
            Ok(Ok(())) => std::io::Error::other("it stopped on its own"),
            Ok(Err(e)) => e,
            Err(e) => std::io::Error::other(e.to_string()),
        })),
        signal = stop => {
            tracing::info!("{signal} received: stopping rpc-server and the worker");
            Ok(())
        }
    };
    announce.abort();
    sup.stop().await;
    handle.stop(true).await;
    outcome
}

/// `host:port` of rpc-server, as a client dials it.
fn endpoint(l: &RpcLaunch) -> String {
    format!("{}:{}", url_host(&l.host), l.port)
}

/// An IPv6 address in brackets, as URLs and `host:port` need it.
fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// The one INFO line a person (or a script) waits for, once rpc-server
/// first accepts connections.
async fn announce_ready(
    mut view: tokio::sync::watch::Receiver<supervisor::RpcView>,
    sampler: Arc<Sampler>,
    url: String,
    endpoint: String,
    build: crate::rpc::build::BuildInfo,
) {
    let Ok(v) = view.wait_for(|v| v.state.up).await.map(|v| v.clone()) else {
        return;
    };
    let (devices, _) = sampler.sample(&v.devices);
    tracing::info!(
        "worker ready: status {url}, rpc {endpoint}, devices {}, build {} {} (rpc protocol {})",
        describe_devices(&devices),
        build.llama_cpp.as_deref().unwrap_or("unknown llama.cpp"),
        build.flavour.as_deref().unwrap_or("unknown flavour"),
        v.protocol.as_deref().unwrap_or("unknown"),
    );
}

/// `CPU 15.6 GiB (12.0 GiB free), CUDA0 ...`.
pub fn describe_devices(devices: &[WorkerDevice]) -> String {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if devices.is_empty() {
        return "none listed".into();
    }
    devices
        .iter()
        .map(|d| {
            format!(
                "{} {:.1} GiB ({:.1} GiB free)",
                d.name,
                gib(d.total_bytes),
                gib(d.free_bytes)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::status::DeviceKind;

    #[test]
    fn url_host_and_device_rows() {
        let rows = [
            ("127.0.0.1", "127.0.0.1"),
            ("::1", "[::1]"),
            ("[::1]", "[::1]"),
            ("box.lan", "box.lan"),
        ];
        for (i, (h, want)) in rows.iter().enumerate() {
            assert_eq!(url_host(h), *want, "row {i}");
        }
        let d = |name: &str, total, free| WorkerDevice {
            name: name.into(),
            kind: DeviceKind::Cpu,
            total_bytes: total,
            free_bytes: free,
        };
        assert_eq!(describe_devices(&[]), "none listed");
        assert_eq!(
            describe_devices(&[d("CPU", 2 << 30, 1 << 30), d("CUDA0", 3 << 29, 0)]),
            "CPU 2.0 GiB (1.0 GiB free), CUDA0 1.5 GiB (0.0 GiB free)"
        );
    }
}
