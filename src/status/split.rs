//! The split over RPC workers as a spawn carries it and the status shows
//! it: the plan (window, each device's share, the workers used and those
//! left out) and what llama-server says each device was given. Plain data
//! the law decides nothing over: `engines::cpu::rpc` builds and reads
//! them, the status shows them.

use serde::Serialize;

use crate::law::split::SplitPlan;
use crate::law::workers::Joined;

/// The split part of a spawn plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RpcPlan {
    /// The window and every device's share (the local machine first).
    pub split: SplitPlan,
    /// The workers the child connects to, in `--rpc` order.
    pub used: Vec<RpcUse>,
    /// Configured workers left out of this load, and why.
    pub left_out: Vec<LeftOut>,
    /// The window all configured workers would have given (their last good
    /// readings), when some were left out and it was larger.
    pub full_window: Option<u32>,
}

/// One worker a child uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RpcUse {
    /// Its status address.
    pub addr: String,
    /// Its rpc-server endpoint (`--rpc`).
    pub endpoint: String,
    /// The rpc-server process the plan read: another one later means the
    /// child's connection died with this one.
    pub joined: Joined,
    /// The watch's poll count when the reading was taken (`law::workers::
    /// is_lost` judges only views read after it).
    pub polls_at_plan: u64,
    /// Its devices' indices in `split.shares`.
    pub shares: std::ops::Range<usize>,
    /// Its machine's RAM (its host-memory devices; the brake's "is it ours").
    pub ram_bytes: u64,
    /// The layers on its host-memory devices (their KV is in that RAM).
    pub ram_layers: u32,
}

/// A worker left out of a load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// Its status address.
    pub addr: String,
    /// Why.
    pub why: String,
}

/// What llama-server says one device was given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Given {
    /// The plan's device name.
    pub device: String,
    /// Model buffers (bytes).
    pub model_bytes: u64,
    /// KV cache buffers (bytes).
    pub kv_bytes: u64,
    /// Compute buffers (bytes).
    pub compute_bytes: u64,
}
