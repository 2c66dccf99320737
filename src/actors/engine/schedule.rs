//! The holder's side of the scheduler across models (`law::schedule`):
//! before a turn starts on this engine's child, the law is asked whether a
//! load waiting on this model's turns goes first. If so the turn waits (in
//! arrival order, with every turn after it), the running turns end, and
//! the child leaves as an eviction does (its KV saved); the queued turns
//! then load the model again behind the one it yielded to. Part of
//! `EngineCore`; runs inside an atomic handler (`turn::settle`).

use std::time::SystemTime;

use super::core::EngineCore;
use crate::law::schedule::{self, Holder};

impl EngineCore {
    /// This model as the scheduler weighs it while its turns keep the
    /// memory (`None`: no child, or no other resident to yield to).
    fn holder(&self) -> Option<Holder> {
        self.outlets.peers.as_ref()?;
        let c = self.child.get()?;
        let model = c.model_id().to_string();
        let cfg = self.cfg();
        Some(Holder {
            pinned: cfg.pinned(&model),
            weight: cfg.weight(&model),
            resident_ms: SystemTime::now()
                .duration_since(c.loaded_since)
                .map_or(0, |d| d.as_millis() as u64),
            reload_ms: self.load_cost_ms(c.plan.shape.map_or(0, |s| s.weights_bytes)),
            idle: false,
            fresh: c.slots.iter().all(|s| s.busy.is_none() && s.ended_at.is_none()),
            queued: self.outlets.queue.depth() as u32,
            model,
        })
    }

    /// What loading this engine's model costs, ms: its last load, else its
    /// `weights_bytes` over the prior disk rate (`law::schedule::load_cost_ms`).
    pub(crate) fn load_cost_ms(&self, weights_bytes: u64) -> u64 {
        schedule::load_cost_ms(self.usage.loads(tokio::time::Instant::now()).last_ms, weights_bytes)
    }

    /// Whether a turn for `model` must wait because this model yields its
    /// memory to a waiting load: the model it yields to.
    pub(crate) fn yields_to(&mut self, model: &str) -> Option<String> {
        if !self.child.holds(model) {
            return None;
        }
        let holder = self.holder()?;
        let peers = self.outlets.peers.clone()?;
        let cfg = self.cfg();
        let (to, why) = peers.yields_to(&holder, cfg.schedule, cfg.starvation_limit)?;
        if self.yielding.as_ref().is_none_or(|(m, _)| *m != to) {
            let says = schedule::explain(&holder.model, &to, why);
            tracing::info!(model = %holder.model, to = %to, "yielding the memory: {says}");
            self.yielding = Some((to.clone(), says));
        }
        Some(to)
    }

    /// A load of `model` took `load_ms`: a warning when switching between
    /// models took more than the thrash share of the last minutes.
    pub(crate) fn thrash_check(&self, model: &str, load_ms: u64) {
        let Some(peers) = &self.outlets.peers else { return };
        let loading = peers.loaded(load_ms);
        if schedule::thrashing(loading, schedule::THRASH_WINDOW_MS) {
            tracing::warn!(
                model,
                loading_ms = loading,
                "switching between models took {:.0} s of the last {} min (more than {:.0}%): the models asked for do not fit in memory together; raise the starvation limit (WARDEN_STARVATION_LIMIT_S), pin the busiest model, or give each fewer slots",
                loading as f64 / 1000.0,
                schedule::THRASH_WINDOW_MS / 60_000,
                schedule::THRASH_SHARE * 100.0
            );
        }
    }

    /// The running turns ended with this model yielding: it leaves, and its
    /// next load lets `to` go first.
    pub(crate) async fn yield_memory(&mut self, to: &str) {
        let Some(peers) = self.outlets.peers.clone() else { return };
        let model = self.child.model_id().unwrap_or_default().to_string();
        peers.yielded(&model, to);
        self.usage.yielded();
        let why = self.yielding.take().map_or_else(|| format!("{to} goes next"), |(_, says)| says);
        self.emit(crate::status::WardenEvent::Yielded {
            model,
            to: to.to_string(),
            why,
        });
        self.retire(super::leaving::Retire::Evicted).await;
    }
}
