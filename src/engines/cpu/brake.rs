//! The llama.cpp engines' view of a child's window for the memory brake
//! (`law::brake::WindowFacts`): what `llama_step` decides over on the CPU
//! engine, over RPC workers too (this machine then holds only its own
//! layers' KV).

use crate::config::WardenConfig;
use crate::engines::live::ChildView;
use crate::law::brake::WindowFacts;
use crate::law::window;

/// The law's view of a live child's window, `None` when the warden did not
/// size it (no facts, or no window known): such a child is never sampled.
pub fn window_facts(c: ChildView<'_>, cfg: &WardenConfig) -> Option<WindowFacts> {
    let shape = c.plan.shape?;
    let allocated = c.allocated?;
    let ram_bytes = c.plan.ram?.bytes;
    Some(WindowFacts {
        allocated,
        // Over workers, this machine holds only its own layers' KV.
        kv_per_token: super::rpc::local_kv_per_token(c.plan).unwrap_or(shape.kv_per_token),
        ram_bytes,
        uncapped: match &c.plan.rpc() {
            Some(_) => super::rpc::uncapped(c.plan),
            None => window::cpu(&shape, ram_bytes, None, None).ctx(),
        }
        .unwrap_or(allocated),
        pinned: cfg.ctx_pin_for(&c.plan.entry.id).is_some(),
    })
}
