//! What the engine publishes after every change: the status snapshot (the
//! watch channel `/warden/status`, the idle timer and embedders read) and
//! the side door to the live child. Part of `EngineCore`.

use std::time::SystemTime;

use super::core::{EngineCore, LiveChild};
use crate::law::brake::BrakeView;
use crate::law::keep_alive;
use crate::status::EngineStatus;

impl EngineCore {
    /// Publishes the status snapshot, the side door and the idle clock: at
    /// the end of every handler (`atomic`) and at the named points inside
    /// one (`enter`, a child gone, a keep-alive set).
    pub(crate) fn publish(&self) {
        self.publish_door();
        self.status_tx.send_replace(self.snapshot());
        self.idle_clock_tx.send_if_modified(|at| {
            let now = self.last_used.map(|u| u.at);
            std::mem::replace(at, now) != now
        });
    }

    /// The status snapshot: a function of what the engine holds.
    pub(crate) fn snapshot(&self) -> EngineStatus {
        let c = self.child.as_ref();
        let memory_bound = c.and_then(|c| {
            if let Some(b) = c.engine.memory_bound() {
                return Some(b); // MLX: the bound the child enforces
            }
            let bound = c.plan.window.memory_bound()?;
            // The bound is reported only while the child enforces it.
            (c.allocated
                .is_some_and(|a| crate::law::caps::matches_requested(a, bound)))
            .then_some(bound)
        });
        let idle_timeout = self.idle_timeout();
        EngineStatus {
            engine: self.backend.kind(),
            state: super::core::state(self.shut_down, self.activity, c.is_some()),
            model: c.map(|c| c.model_id().to_string()),
            model_path: c.map(|c| c.plan.entry.path.display().to_string()),
            declared_ceiling: self.cfg.ctx_pin,
            context_tokens: c.and_then(|c| c.allocated),
            requested_context: c.and_then(|c| c.plan.window.ctx()),
            memory_bound_tokens: memory_bound,
            memory_bound_footprint_bytes: memory_bound.and_then(|b| {
                let c = c?;
                match (c.plan.shape, c.plan.mlx(), c.engine.base_bytes()) {
                    (Some(s), _, _) => Some(crate::law::window::footprint_bytes(&s, b)),
                    (None, Some(m), Some(base)) => Some(base + b as u64 * m.kv_per_token),
                    _ => None,
                }
            }),
            child_pid: c.map(|c| c.process.pid()),
            port: c.map(|c| c.port.port()),
            loaded_since: c.and_then(|c| unix_secs(c.loaded_since)),
            last_used: self.last_used.and_then(|u| unix_millis(u.wall)),
            turns: self.turns,
            idle_timeout_s: c.and(idle_timeout).map(|d| d.as_secs_f64()),
            idle_deadline_ms: c.and(idle_timeout).and_then(|d| {
                let from = self.last_used.map_or(c?.loaded_since, |u| u.wall);
                unix_millis(from + d)
            }),
            keep_alive_s: c.and_then(|c| {
                let (m, k) = self.keep_alive.as_ref()?;
                (m == c.model_id()).then(|| k.as_secs_f64())
            }),
            memory_total_bytes: c.and_then(|c| c.plan.ram).map(|r| r.bytes),
            kv_saves: self.kv_view.read().unwrap_or_else(|p| p.into_inner()).clone(),
            kv_keep: self.keep_view(),
            memory_budget_bytes: c
                .and_then(|c| c.plan.ram)
                .filter(|_| self.backend.ram_budget())
                .map(|r| (r.bytes as f64 * crate::law::window::CPU_RAM_FRACTION) as u64),
            brake: self.brake_view(c),
            gpu: c.and_then(|c| match &c.plan.cuda()?.placement {
                crate::law::cuda::CudaPlacement::Sized { device, .. } => {
                    Some(format!("{} ({})", device.name, device.uuid))
                }
                _ => None,
            }),
            offload: c.and_then(|c| c.engine.offload()),
            workers: self.backend.workers().map(|w| crate::status::WorkersStatus {
                workers: w.views.borrow().clone(),
                split: c.and_then(|c| c.plan.rpc().cloned()),
                given: c.map(|c| c.engine.given().to_vec()).unwrap_or_default(),
            }),
            kind: c.map(|c| crate::law::types::ModelKind::of(c.plan.facts.as_deref())),
            held_bytes: c.and_then(|c| c.footprint_bytes()),
            residents: Vec::new(),
        }
    }

    /// The brake as the status shows it: off for the engine (a sensor that
    /// cannot read), or for this child alone (CUDA: a partial or unsized
    /// placement).
    fn brake_view(&self, c: Option<&LiveChild>) -> BrakeView {
        BrakeView {
            enabled: self.brake.off.is_none() && c.is_none_or(|c| c.engine.brake_off().is_none()),
            off_reason: self
                .brake
                .off
                .clone()
                .or_else(|| c.and_then(|c| c.engine.brake_off().map(str::to_string))),
            level: self.brake.level,
            state: self.brake.state,
            last_action: self.brake.last_action,
            reload_pending: self.brake.reload.as_ref().map(|r| r.model.clone()),
        }
    }

    /// The side door to the live child, republished only when the child
    /// changed (a watch receiver then sees one change per child).
    fn publish_door(&self) {
        let now = self.child.as_ref().map(|c| (c.model_id(), c.port.port()));
        self.door_tx.send_if_modified(|door| {
            if door.as_ref().map(|d| (d.model.as_str(), d.port)) == now {
                return false;
            }
            *door = self.child.as_ref().map(|c| {
                super::Door::new(
                    c.model_id().to_string(),
                    c.port.port(),
                    c.client.clone(),
                    c.process.output().clone(),
                )
            });
            true
        });
    }

    /// The idle timeout in force for the loaded model (`None`: never).
    pub(crate) fn idle_timeout(&self) -> Option<std::time::Duration> {
        keep_alive::effective_timeout(
            self.keep_alive.as_ref().map(|(m, k)| (m.as_str(), *k)),
            self.child.as_ref().map(|c| c.model_id()),
            self.cfg.idle_timeout,
        )
    }
}

fn unix_secs(t: SystemTime) -> Option<u64> {
    t.duration_since(SystemTime::UNIX_EPOCH).ok().map(|d| d.as_secs())
}

pub(super) fn unix_millis(t: SystemTime) -> Option<u64> {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}
