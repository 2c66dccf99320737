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
