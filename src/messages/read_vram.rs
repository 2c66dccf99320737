//! `ReadVram`: `EngineActor` → `SensorActor`, at a CUDA spill-brake sample
//! and right after a CUDA load (the baseline): the child's Shared GPU
//! memory (Windows' PDH `GPU Process Memory(...)\Shared Usage`). Linux has no
//! spill and never asks, unless a test pretends a spill platform.

use actix::Message;

/// Read the child's Shared GPU memory.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Result<u64, String>")]
pub struct ReadVram {
    /// The child.
    pub child_pid: u32,
    /// Its healthy Shared level (`law::cuda::healthy_shared_bytes`): the
    /// QA seam's forced tiers sit exactly this much plus the tier.
    pub healthy_bytes: u64,
}
