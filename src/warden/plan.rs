//! What a load of a catalog model would be given here, planned exactly as
//! the engine plans its loads (`engines::plan`), for `GET /v1/models`.

use std::sync::Arc;

use super::Warden;
use crate::catalog::ModelEntry;
use crate::engines::SpawnPlan;
use crate::gguf::ModelFacts;

impl Warden {
    /// The plan a fresh load of `entry` would get now, before any memory
    /// brake's cap (the engine's window memory is its own). Reads files, the
    /// RAM total and NVML: call it off the server's threads.
    pub fn plan_for(&self, entry: Arc<ModelEntry>, facts: Option<Arc<ModelFacts>>) -> SpawnPlan {
        self.inner.planner.plan(&self.inner.config, entry, facts, None)
    }
}
