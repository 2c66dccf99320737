//! What the engine publishes after every change: the status snapshot (the
//! watch channel `/warden/status`, the idle timer and embedders read) and
//! the side door to the live child. Part of `EngineCore`.

use std::time::SystemTime;

use super::core::EngineCore;
use crate::law::keep_alive;
use crate::status::EngineStatus;

impl EngineCore {
    /// Publishes the status snapshot, the side door and the idle clock: at
    /// the end of every handler (`atomic`) and at the named points inside
    /// one (`enter`, a child gone, a keep-alive set).
    pub(crate) fn publish(&self) {
        self.publish_door();
        self.outlets.status_tx.send_replace(self.snapshot());
        self.outlets.idle_clock_tx.send_if_modified(|at| {
            let now = self.usage.last().map(|u| u.at);
            std::mem::replace(at, now) != now
        });
    }

    /// The status snapshot: a function of what the engine holds.
    pub(crate) fn snapshot(&self) -> EngineStatus {
        let c = self.child.get();
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
            state: super::core::state(self.shut_down, self.activity(), c.is_some()),
            model: c.map(|c| c.model_id().to_string()),
            model_path: c.map(|c| c.plan.entry.path.display().to_string()),
            declared_ceiling: self.cfg().ctx_pin,
            context_tokens: c.and_then(|c| c.allocated),
            requested_context: c.and_then(|c| c.plan.window.ctx()),
            memory_bound_tokens: memory_bound,
            memory_bound_footprint_bytes: memory_bound.and_then(|b| c?.engine.footprint_at(&c?.plan, b)),
            child_pid: c.map(|c| c.process.pid()),
            port: c.map(|c| c.port.port()),
            loaded_since: c.and_then(|c| unix_millis(c.loaded_since)),
            last_used: self.usage.last().and_then(|u| unix_millis(u.wall)),
            turns: self.usage.turns(),
            idle_timeout_s: c.and(idle_timeout).map(|d| d.as_secs_f64()),
            idle_deadline_ms: c.and(idle_timeout).and_then(|d| {
                let from = self.usage.last().map_or(c?.loaded_since, |u| u.wall);
                unix_millis(from + d)
            }),
            keep_alive_s: c.and_then(|c| {
                let (m, k) = self.usage.keep_alive()?;
                (m == c.model_id()).then(|| k.as_secs_f64())
            }),
            memory_total_bytes: c.and_then(|c| c.plan.ram).map(|r| r.bytes),
            kv_saves: self.kv.view(),
            kv_keep: self.kv.keep_view(c, self.backend.slot_files()),
            memory_budget_bytes: c
                .and_then(|c| c.plan.ram)
                .filter(|_| self.backend.ram_budget())
                .map(|r| (r.bytes as f64 * crate::law::window::CPU_RAM_FRACTION) as u64),
            brake: self.brake.view(c.and_then(|c| c.engine.brake_off())),
            gpu: c.and_then(|c| c.plan.gpu_label()),
            offload: c.and_then(|c| c.engine.offload()),
            workers: self.workers_status(),
            kind: c.map(|c| {
                let named = self.cfg().names_chat_template(c.model_id());
                crate::law::types::ModelKind::served_of(c.plan.facts.as_deref(), named)
            }),
            held_bytes: c.and_then(|c| c.footprint_bytes()),
            slots: c.map(|c| c.slots.status()).unwrap_or_default(),
            pool: c.map(|c| self.kv.pool_view(c)),
            waiting_turns: self.intake.waiting_turns(),
            pinned: c.is_some_and(|c| self.cfg().pinned(c.model_id())),
            weight: c.map_or(0.0, |c| self.cfg().weight(c.model_id())),
            residents: Vec::new(),
            settings: None,
            loads: self.usage.loads(tokio::time::Instant::now()),
            waiting_models: Vec::new(),
            switching: None,
        }
    }

    /// The side door to the live child, republished only when the child
    /// changed (a watch receiver then sees one change per child).
    fn publish_door(&self) {
        let now = self.child.get().map(|c| (c.model_id(), c.port.port()));
        self.outlets.door_tx.send_if_modified(|door| {
            if door.as_ref().map(|d| (d.model.as_str(), d.port)) == now {
                return false;
            }
            *door = self.child.get().map(super::Door::of);
            true
        });
    }

    /// What the engine is busy with: a load, else generating while any
    /// turn runs.
    fn activity(&self) -> super::core::Activity {
        match self.child.activity() {
            super::core::Activity::Resting if self.intake.running() > 0 => super::core::Activity::Generating,
            a => a,
        }
    }

    /// The idle timeout in force for the loaded model (`None`: never, as
    /// for a pinned one).
    pub(crate) fn idle_timeout(&self) -> Option<std::time::Duration> {
        if self.child.model_id().is_some_and(|m| self.cfg().pinned(m)) {
            return None;
        }
        keep_alive::effective_timeout(
            self.usage.keep_alive(),
            self.child.model_id(),
            self.child
                .model_id()
                .map_or(self.cfg().idle_timeout, |m| self.cfg().idle_timeout_for(m)),
        )
    }
}

pub(super) fn unix_millis(t: SystemTime) -> Option<u64> {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}
