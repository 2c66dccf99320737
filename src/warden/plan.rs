//! What a load of a catalog model would be given here, planned exactly as
//! the engine plans its loads (`engines::plan`), for `GET /v1/models`.

use std::sync::Arc;

use super::Warden;
use crate::catalog::ModelEntry;
use crate::engines::{SpawnPlan, plan};
use crate::gguf::ModelFacts;
use crate::law::plan::Readings;

impl Warden {
    /// What this machine gives every plan now (the RAM total; NVML on the
    /// CUDA engine): read once for a list of `plan_for`. Reads files and
    /// NVML: call it off the server's threads.
    pub fn plan_readings(&self) -> Readings {
        plan::machine(self.inner.planner.site(), &self.inner.config)
    }

    /// The plan a fresh load of `entry` would get on `machine`, before any
    /// memory brake's cap (the engine's window memory is its own).
    pub fn plan_for(&self, machine: &Readings, entry: Arc<ModelEntry>, facts: Option<Arc<ModelFacts>>) -> SpawnPlan {
        let readings = plan::for_entry(machine.clone(), &entry);
        plan::plan_on(
            readings,
            self.inner.planner.site(),
            &self.inner.config,
            entry,
            facts,
            None,
        )
    }
}
