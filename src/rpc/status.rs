//! The worker's status on the wire: what `llm-warden worker` answers at
//! `GET /worker/status` and what the warden reads before every load and on
//! its watch. One type for both sides, so they cannot drift apart.

pub use crate::law::worker_status::*;

/// The path of the worker's status endpoint.
pub const STATUS_PATH: &str = "/worker/status";
pub use crate::law::worker_status::DEFAULT_STATUS_PORT;
/// rpc-server's default port, which the worker gives its child.
pub const DEFAULT_RPC_PORT: u16 = 50052;
