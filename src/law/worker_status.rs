//! A worker's status as the law reads it and the wire carries it: what
//! `llm-warden worker` answers at `GET /worker/status` and what the warden
//! reads before every load and on its watch (`rpc::status` re-exports it
//! with the endpoint's constants). One type for both sides, so they cannot
//! drift apart; here, at the bottom, so `law::workers` decides over it
//! without importing the RPC layer.

use serde::{Deserialize, Serialize};

use super::brake::Level;

/// One worker's whole status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// The build its rpc-server is.
    pub build: WorkerBuild,
    /// Its rpc-server child.
    pub rpc: RpcState,
    /// The devices rpc-server exposes, in its order (the order llama-server
    /// numbers them in `--tensor-split`).
    pub devices: Vec<WorkerDevice>,
    /// The worker machine's RAM pressure (`None`: unreadable there, and its
    /// share of the brake is off).
    pub pressure: Option<Level>,
}

/// Which llama.cpp an rpc-server is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerBuild {
    /// The llama.cpp build tag (`b10883`) from the build's `BUILD_INFO`,
    /// `None` when the binary has none (not built by build-llama.sh).
    pub llama_cpp: Option<String>,
    /// The RPC protocol rpc-server announced (`6.0.0`), once it started.
    pub rpc_protocol: Option<String>,
    /// The flavour (`cpu`, `cuda`), from `BUILD_INFO`.
    pub flavour: Option<String>,
}

/// The supervised rpc-server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpcState {
    /// Whether it runs and accepts connections now.
    pub up: bool,
    /// The port it listens on (the worker's host, this port: `--rpc`).
    pub port: u16,
    /// Its pid while it runs.
    pub pid: Option<u32>,
    /// How many times it was started: a change between two readings means
    /// it restarted, and every llama-server connected to the old one lost it.
    pub starts: u64,
    /// How its last run ended (coded), when it ended.
    pub last_exit: Option<String>,
}

/// What kind of memory a device has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// Host RAM (rpc-server's CPU device).
    Cpu,
    /// An NVIDIA GPU's VRAM.
    Cuda,
    /// A device the warden has no memory rule for (Vulkan, Metal, ...):
    /// listed so llama-server's device numbering and the split's agree, and
    /// given no layers.
    Other,
}

/// One device of a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerDevice {
    /// rpc-server's name for it (`CPU`, `CUDA0`).
    pub name: String,
    /// Its memory's kind.
    pub kind: DeviceKind,
    /// Its memory: RAM bounded by the worker's cgroup, or the GPU's VRAM.
    pub total_bytes: u64,
    /// Free now (RAM: available, bounded by the cgroup; VRAM: NVML's free).
    pub free_bytes: u64,
}

/// What the watch knows of one worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerView {
    /// Its address.
    pub addr: String,
    /// The last good reading.
    pub status: Option<WorkerStatus>,
    /// Failed readings in a row.
    pub misses: u32,
    /// Why the last reading failed.
    pub error: Option<String>,
    /// Polls completed so far: a view with more polls than a plan recorded
    /// was read after that plan.
    pub polls: u64,
}

/// The worker's default status port (rpc-server's own default is 50052).
pub const DEFAULT_STATUS_PORT: u16 = 50053;

/// A worker's status address, `HOST:PORT` (the port defaults to 50053).
/// A host name or an IPv4 address: llama.cpp b10883's `--rpc` splits an
/// endpoint at its first `:` and resolves it with `gethostbyname`, so an
/// IPv6 literal cannot reach rpc-server (refused here, with that reason).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkerAddr {
    /// Host name or address (no brackets).
    pub host: String,
    /// The status port.
    pub port: u16,
}

impl std::str::FromStr for WorkerAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = || format!("'{s}' is not a worker address: expected HOST:PORT, e.g. 10.0.0.2:50053");
        if s.starts_with('[') || s.matches(':').count() > 1 {
            return Err(format!(
                "'{s}': IPv6 addresses cannot reach rpc-server (llama.cpp's --rpc splits at the first ':'); use a host name or an IPv4 address"
            ));
        }
        let (host, port) = match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        if host.is_empty() || host.contains(char::is_whitespace) {
            return Err(bad());
        }
        let port = match port {
            None => DEFAULT_STATUS_PORT,
            Some(p) => p.parse().ok().filter(|&p| p != 0).ok_or_else(bad)?,
        };
        Ok(Self {
            host: host.to_string(),
            port,
        })
    }
}

impl std::fmt::Display for WorkerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl WorkerAddr {
    /// The rpc-server endpoint for llama-server's `--rpc` on this host.
    pub fn rpc_endpoint(&self, rpc_port: u16) -> String {
        format!("{}:{rpc_port}", self.host)
    }
}
