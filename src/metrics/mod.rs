//! Prometheus metrics (`GET /metrics`): what the warden did, counted as it
//! happens, plus gauges read at scrape time (`render`).
//!
//! The counters are fed by the engine's own events: `EngineCore::emit`
//! hands every `WardenEvent` to `Metrics::observe` before broadcasting it,
//! so a count never depends on a subscriber keeping up (the broadcast drops
//! events for a slow reader; the counters never do). The HTTP layer adds
//! the requests it refused before they reached the engine. The series are
//! `prometheus-client`'s own counters and histograms, registered once in the
//! registry the scrape encodes; nothing awaits while touching them.
//!
//! Names follow Prometheus' conventions: `warden_` prefix, the unit in the
//! name (`_seconds`, `_bytes`, `_tokens`), `_total` on counters (added by
//! the encoder, so a counter is registered without it), histograms as
//! cumulative `_bucket{le}` series with `_sum` and `_count`. Labels are
//! bounded sets (routes, outcomes, reasons, levels, error codes), never a
//! request's content.
//!
//! Definitions chosen here: time to first token runs from the relay of the
//! request to the child to its first event (the queue and a load have their
//! own series); decode speed is the events after the first over the time
//! they took (llama-server and mlx_vlm.server send one event per token),
//! observed for streamed turns of at least two events; a restart is a child
//! that became ready for the same model as the child that ended just before
//! it, labelled with why that one ended, or a brake respawn (`brake`).

pub mod render;

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

pub use render::{Gauges, ResidentGauges};
#[cfg(test)]
use render::relay_child;

use crate::law::brake::BrakeDid;
use crate::law::route::Route;
use crate::status::{TurnOutcome, UnloadReason, WardenEvent};

/// Seconds to the first token.
const TTFT_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Decode tokens per second.
const DECODE_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
/// Seconds from spawn to ready.
const LOAD_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

// The label sets, one per shape of family: a field's name is the label's.

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteOutcome {
    route: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteCode {
    route: &'static str,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteOnly {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Code {
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelOnly {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HowCode {
    how: &'static str,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelAction {
    level: &'static str,
    action: &'static str,
}

/// The warden's counters and histograms, and the registry that renders them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    turns: Family<RouteOutcome, Counter>,
    refused: Family<RouteCode, Counter>,
    /// Streamed events relayed, one per token.
    completion_tokens: Family<RouteOnly, Counter>,
    ttft_seconds: Histogram,
    decode_tokens_per_second: Histogram,
    load_seconds: Histogram,
    load_failures: Family<Code, Counter>,
    unloads: Family<Reason, Counter>,
    crashes: Family<Code, Counter>,
    restarts: Family<Reason, Counter>,
    brake_actions: Family<LevelAction, Counter>,
    client_stalls: Counter,
    /// Idle conversations saved and erased to keep a model's pool compact.
    pool_compactions: Family<ModelOnly, Counter>,
    /// The cells those held.
    pool_compacted_cells: Family<ModelOnly, Counter>,
    /// Times a model left the memory to another waiting on its turns.
    yields: Family<ModelOnly, Counter>,
    /// Turns that went on on the next child after theirs died.
    turns_resumed: Family<HowCode, Counter>,
    /// The last child's end: its model and why (restart detection).
    last_end: Mutex<Option<(String, &'static str)>>,
}

impl Default for Metrics {
    /// Every series registered as it is made, in the order the scrape lists
    /// them. The registry appends a full stop to each help text.
    fn default() -> Self {
        let mut r = Registry::default();
        let m = Self {
            turns: counter(&mut r, "warden_turns", "Turns the engine ran, by route and outcome"),
            refused: counter(
                &mut r,
                "warden_requests_refused",
                "Requests refused before the engine (bad body, unknown model, full queue, unsupported route), by route and error code",
            ),
            completion_tokens: counter(
                &mut r,
                "warden_completion_tokens",
                "Streamed events relayed from the child (one per token), by route",
            ),
            ttft_seconds: histogram(
                &mut r,
                "warden_time_to_first_token_seconds",
                "From the relay of a streamed request to the child to its first event",
                TTFT_BUCKETS,
            ),
            decode_tokens_per_second: histogram(
                &mut r,
                "warden_decode_tokens_per_second",
                "Decode speed of a streamed turn: events after the first over the time they took",
                DECODE_BUCKETS,
            ),
            load_seconds: histogram(
                &mut r,
                "warden_load_duration_seconds",
                "Child spawn to ready, per load that succeeded",
                LOAD_BUCKETS,
            ),
            load_failures: counter(&mut r, "warden_load_failures", "Loads that failed, by error code"),
            unloads: counter(
                &mut r,
                "warden_unloads",
                "Children that ended, by reason (idle, brake, manual, switch, hung, shutdown, crash)",
            ),
            crashes: counter(
                &mut r,
                "warden_child_crashes",
                "Children that died on their own, by crash code",
            ),
            restarts: counter(
                &mut r,
                "warden_child_restarts",
                "Children started again for the model whose child had just ended, by why it ended",
            ),
            brake_actions: counter(
                &mut r,
                "warden_brake_actions",
                "Memory brake actions, by pressure level and action",
            ),
            client_stalls: counter(
                &mut r,
                "warden_client_stalls",
                "Clients whose connection was closed because they stopped reading their answer",
            ),
            pool_compactions: counter(
                &mut r,
                "warden_pool_compactions",
                "Idle conversations saved to the KV store and erased from a model's shared pool so the turns beside them attend fewer cells, by model",
            ),
            pool_compacted_cells: counter(
                &mut r,
                "warden_pool_compacted_cells",
                "The cells those idle conversations held, by model",
            ),
            yields: counter(
                &mut r,
                "warden_model_yields",
                "Times a busy model left the memory to another model whose load waited on its turns (the scheduler across models), by the model that left",
            ),
            turns_resumed: counter(
                &mut r,
                "warden_turns_resumed",
                "Turns whose model server died under them and went on on the next one, by how (rerun: nothing was sent yet; continued: from the text already sent) and how the server ended",
            ),
            last_end: Mutex::new(None),
            registry: r,
        };
        // Every route's completed count is listed, zero or not, so a rate()
        // over a fresh warden has a series to start from.
        for r in Route::ALL {
            let _created = m.turns.get_or_create(&RouteOutcome {
                route: r.tag(),
                outcome: "completed",
            });
        }
        m
    }
}

/// A counter (`_total` is the encoder's), registered under `name`.
fn counter<M: Metric + Clone + Default>(r: &mut Registry, name: &str, help: &str) -> M {
    let m = M::default();
    r.register(name, help, m.clone());
    m
}

/// A histogram over `buckets` (`+Inf` is implied), registered under `name`.
fn histogram(r: &mut Registry, name: &str, help: &str, buckets: &[f64]) -> Histogram {
    let h = Histogram::new(buckets.iter().copied());
    r.register(name, help, h.clone());
    h
}

/// The metric's name for an unload reason: `request` (the `/warden/unload`
/// route) is what operators call a manual unload.
fn unload_label(reason: UnloadReason) -> &'static str {
    match reason {
        UnloadReason::Request => "manual",
        r => r.as_str(),
    }
}

/// Records one value; a NaN is dropped, since it belongs to no bucket and
/// would turn the histogram's sum into NaN for good.
fn observe(h: &Histogram, v: f64) {
    if !v.is_nan() {
        h.observe(v);
    }
}

impl Metrics {
    /// Counts what `event` says.
    pub fn observe(&self, event: &WardenEvent) {
        match event {
            WardenEvent::TurnEnded {
                route,
                outcome,
                timings,
                ..
            } => {
                self.turns
                    .get_or_create(&RouteOutcome {
                        route: route.tag(),
                        outcome: outcome.as_str(),
                    })
                    .inc();
                if let Some(t) = timings {
                    let tokens = self.completion_tokens.get_or_create(&RouteOnly { route: route.tag() });
                    tokens.inc_by(u64::from(t.events));
                    if let Some(s) = t.ttft_s {
                        observe(&self.ttft_seconds, s);
                    }
                    if let Some(r) = t.decode_tokens_per_s {
                        observe(&self.decode_tokens_per_second, r);
                    }
                }
            }
            WardenEvent::Ready { model, load_ms, .. } => {
                observe(&self.load_seconds, *load_ms as f64 / 1000.0);
                if let Some((m, why)) = self.last_end().take()
                    && &m == model
                {
                    self.restarts.get_or_create(&Reason { reason: why }).inc();
                }
            }
            WardenEvent::LoadFailed { code, .. } => {
                self.load_failures.get_or_create(&Code { code: code.clone() }).inc();
            }
            WardenEvent::Unloaded { model, reason, .. } => {
                let reason = unload_label(*reason);
                self.unloads.get_or_create(&Reason { reason }).inc();
                *self.last_end() = Some((model.clone(), reason));
            }
            WardenEvent::ChildExited { model, code, .. } => {
                // A crash ends the model's residence like an unload does:
                // `warden_unloads_total{reason="crash"}` beside the code.
                self.unloads.get_or_create(&Reason { reason: "crash" }).inc();
                self.crashes.get_or_create(&Code { code: code.clone() }).inc();
                *self.last_end() = Some((model.clone(), "crash"));
            }
            WardenEvent::Brake { level, action, .. } => {
                let labels = LevelAction {
                    level,
                    action: action.as_str(),
                };
                self.brake_actions.get_or_create(&labels).inc();
                // A respawn replaces the child in place (no unload event):
                // its new child is a restart for the brake.
                if matches!(action, BrakeDid::ShrinkRespawn | BrakeDid::GrowRespawn) {
                    self.restarts.get_or_create(&Reason { reason: "brake" }).inc();
                }
            }
            WardenEvent::ClientStalled { .. } => {
                self.client_stalls.inc();
            }
            WardenEvent::Yielded { model, .. } => {
                self.yields.get_or_create(&ModelOnly { model: model.clone() }).inc();
            }
            WardenEvent::TurnResumed { how, code, .. } => {
                let labels = HowCode { how, code: code.clone() };
                self.turns_resumed.get_or_create(&labels).inc();
            }
            WardenEvent::PoolCompacted { model, cells, .. } => {
                let labels = ModelOnly { model: model.clone() };
                self.pool_compactions.get_or_create(&labels).inc();
                self.pool_compacted_cells
                    .get_or_create(&labels)
                    .inc_by(u64::from(*cells));
            }
            _ => {}
        }
    }

    /// Counts a tokenizer call answered beside the queue (no turn, so no
    /// event): it shows in `warden_turns_total` with its route like any
    /// other request.
    pub fn direct(&self, route: Route, outcome: TurnOutcome) {
        let labels = RouteOutcome {
            route: route.tag(),
            outcome: outcome.as_str(),
        };
        self.turns.get_or_create(&labels).inc();
    }

    /// Counts a request refused before the engine (unknown model, full
    /// queue, bad body, unsupported route).
    pub fn refused(&self, route: Route, code: &str) {
        let labels = RouteCode {
            route: route.tag(),
            code: code.to_string(),
        };
        self.refused.get_or_create(&labels).inc();
    }

    fn last_end(&self) -> std::sync::MutexGuard<'_, Option<(String, &'static str)>> {
        // The slot stays valid whatever panicked while holding it.
        self.last_end.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests;
