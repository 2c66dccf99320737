//! What the CPU engine reads of its child right after a load: the child's
//! anonymous memory against the window's prediction (one WARNING above it,
//! never an action), or, over RPC workers, what each device was given
//! (the prediction there is of a whole model, so each share is read back).

use super::{CpuChild, CpuEngine, rpc};
use crate::engines::live::ChildView;
use crate::law::window;
use crate::sensors::footprint;

impl CpuEngine {
    /// The CPU engine's state of a child that just became ready.
    pub(crate) fn state_at_load(&self, child: ChildView<'_>) -> CpuChild {
        match &child.plan.rpc() {
            Some(r) => CpuChild {
                given: read_given(child, r),
            },
            None => {
                post_load_check(child);
                CpuChild::default()
            }
        }
    }
}

/// What each device was given, from the child's load lines (each said once).
fn read_given(child: ChildView<'_>, r: &rpc::RpcPlan) -> Vec<rpc::Given> {
    let given = rpc::given(&child.output.kept(), r);
    for g in &given {
        tracing::info!(
            model = child.model_id(),
            device = %g.device,
            "given: {} MiB model, {} MiB KV, {} MiB compute",
            g.model_bytes >> 20,
            g.kv_bytes >> 20,
            g.compute_bytes >> 20
        );
    }
    given
}

/// The post-load check: the child's anonymous memory against the window's
/// prediction (skipped with a vision projector, whose buffers the law does
/// not predict).
fn post_load_check(child: ChildView<'_>) {
    if child.plan.entry.mmproj.is_some() {
        tracing::debug!("post-load memory check skipped: a vision projector is loaded");
        return;
    }
    let (Some(shape), Some(window)) = (child.plan.shape, child.allocated) else {
        return;
    };
    let anon = footprint::anon_bytes(child.pid);
    if let Some(over) = window::postload_excess(&shape, window, anon) {
        tracing::warn!(
            model = child.model_id(),
            "llama-server allocated more than the window budget predicted: anonymous memory {} MiB > {} MiB allowed for a {window}-token window",
            over.held_bytes >> 20,
            over.limit_bytes >> 20
        );
    }
}
