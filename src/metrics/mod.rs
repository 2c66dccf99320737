//! Prometheus metrics (`GET /metrics`): what the warden did, counted as it
//! happens, plus gauges read at scrape time.
//!
//! The counters are fed by the engine's own events: `EngineCore::emit`
//! hands every `WardenEvent` to `Metrics::observe` before broadcasting it,
//! so a count never depends on a subscriber keeping up (the broadcast drops
//! events for a slow reader; the counters never do). The HTTP layer adds
//! the requests it refused before they reached the engine. One short lock
//! guards the counters; nothing awaits while holding it.
//!
//! Names follow Prometheus' conventions: `warden_` prefix, the unit in the
//! name (`_seconds`, `_bytes`, `_tokens`), `_total` on counters, histograms
//! as cumulative `_bucket{le}` series with `_sum` and `_count`. Labels are
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

mod histogram;
pub mod render;

use std::collections::BTreeMap;
use std::sync::Mutex;

pub use histogram::Histogram;
pub use render::{Gauges, relay_child};

use crate::law::route::Route;
use crate::status::WardenEvent;

/// Seconds to the first token.
const TTFT_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Decode tokens per second.
const DECODE_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
/// Seconds from spawn to ready.
const LOAD_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

/// The warden's counters and histograms.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Counters>,
}

/// What the counters hold (read whole by the renderer).
#[derive(Debug, Clone)]
pub struct Counters {
    /// Turns by (route, outcome).
    pub turns: BTreeMap<(&'static str, &'static str), u64>,
    /// Requests refused before the engine, by (route, code).
    pub refused: BTreeMap<(&'static str, String), u64>,
    /// Completion tokens (events) relayed, by route.
    pub completion_tokens: BTreeMap<&'static str, u64>,
    /// Time to first token.
    pub ttft: Histogram,
    /// Decode tokens per second.
    pub decode: Histogram,
    /// Loads that reached ready.
    pub load_seconds: Histogram,
    /// Loads that failed, by code.
    pub load_failures: BTreeMap<String, u64>,
    /// Children stopped by the warden, by reason.
    pub unloads: BTreeMap<&'static str, u64>,
    /// Children that died on their own, by crash code.
    pub crashes: BTreeMap<String, u64>,
    /// Restarts, by why the previous child of the model ended.
    pub restarts: BTreeMap<&'static str, u64>,
    /// Brake actions, by (level, action).
    pub brake_actions: BTreeMap<(&'static str, String), u64>,
    /// Clients cut for not reading their answer.
    pub client_stalls: u64,
    /// The last child's end: its model and why (restart detection).
    last_end: Option<(String, &'static str)>,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            turns: BTreeMap::new(),
            refused: BTreeMap::new(),
            completion_tokens: BTreeMap::new(),
            ttft: Histogram::new(TTFT_BUCKETS),
            decode: Histogram::new(DECODE_BUCKETS),
            load_seconds: Histogram::new(LOAD_BUCKETS),
            load_failures: BTreeMap::new(),
            unloads: BTreeMap::new(),
            crashes: BTreeMap::new(),
            restarts: BTreeMap::new(),
            brake_actions: BTreeMap::new(),
            client_stalls: 0,
            last_end: None,
        }
    }
}

/// The metric's name for an unload reason: `request` (the `/warden/unload`
/// route) is what operators call a manual unload.
fn unload_label(reason: &'static str) -> &'static str {
    match reason {
        "request" => "manual",
        r => r,
    }
}

impl Metrics {
    /// Counts what `event` says.
    pub fn observe(&self, event: &WardenEvent) {
        let mut c = self.lock();
        match event {
            WardenEvent::TurnEnded {
                route,
                outcome,
                timings,
                ..
            } => {
                *c.turns.entry((route.tag(), outcome)).or_default() += 1;
                if let Some(t) = timings {
                    *c.completion_tokens.entry(route.tag()).or_default() += u64::from(t.events);
                    if let Some(s) = t.ttft_s {
                        c.ttft.observe(s);
                    }
                    if let Some(r) = t.decode_tokens_per_s {
                        c.decode.observe(r);
                    }
                }
            }
            WardenEvent::Ready { model, load_ms, .. } => {
                c.load_seconds.observe(*load_ms as f64 / 1000.0);
                if let Some((m, why)) = c.last_end.take()
                    && &m == model
                {
                    *c.restarts.entry(why).or_default() += 1;
                }
            }
            WardenEvent::LoadFailed { code, .. } => *c.load_failures.entry(code.clone()).or_default() += 1,
            WardenEvent::Unloaded { model, reason } => {
                *c.unloads.entry(unload_label(reason)).or_default() += 1;
                c.last_end = Some((model.clone(), unload_label(reason)));
            }
            WardenEvent::ChildExited { model, code, .. } => {
                // A crash ends the model's residence like an unload does:
                // `warden_unloads_total{reason="crash"}` beside the code.
                *c.unloads.entry("crash").or_default() += 1;
                *c.crashes.entry(code.clone()).or_default() += 1;
                c.last_end = Some((model.clone(), "crash"));
            }
            WardenEvent::Brake { level, action, .. } => {
                *c.brake_actions.entry((level, action.clone())).or_default() += 1;
                // A respawn replaces the child in place (no unload event):
                // its new child is a restart for the brake.
                if action.ends_with("+respawn") {
                    *c.restarts.entry("brake").or_default() += 1;
                }
            }
            WardenEvent::ClientStalled { .. } => c.client_stalls += 1,
            _ => {}
        }
    }

    /// Counts a tokenizer call answered beside the queue (no turn, so no
    /// event): it shows in `warden_turns_total` with its route like any
    /// other request.
    pub fn direct(&self, route: Route, outcome: &'static str) {
        *self.lock().turns.entry((route.tag(), outcome)).or_default() += 1;
    }

    /// Counts a request refused before the engine (unknown model, full
    /// queue, bad body, unsupported route).
    pub fn refused(&self, route: Route, code: &str) {
        *self.lock().refused.entry((route.tag(), code.to_string())).or_default() += 1;
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> Counters {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        // Counters stay valid whatever panicked while holding them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::TurnTimings;

    fn ended(route: Route, outcome: &'static str, timings: Option<TurnTimings>) -> WardenEvent {
        WardenEvent::TurnEnded {
            seq: 0,
            route,
            outcome,
            timings,
        }
    }

    fn ready(model: &str, load_ms: u64) -> WardenEvent {
        WardenEvent::Ready {
            model: model.into(),
            pid: 1,
            context_tokens: None,
            load_ms,
        }
    }

    fn unloaded(model: &str, reason: &'static str) -> WardenEvent {
        WardenEvent::Unloaded {
            model: model.into(),
            reason,
        }
    }

    #[test]
    fn events_move_the_counters() {
        let m = Metrics::default();
        let t = TurnTimings {
            ttft_s: Some(0.02),
            decode_tokens_per_s: Some(80.0),
            events: 9,
        };
        m.observe(&ended(Route::Chat, "completed", Some(t)));
        m.observe(&ended(Route::Chat, "completed", None));
        m.observe(&ended(Route::Completions, "failed", None));
        m.observe(&ready("a", 1500));
        // why: the same model ready again after a brake stop is a restart
        m.observe(&unloaded("a", "brake"));
        m.observe(&ready("a", 700));
        // why: a manual unload then another model is no restart
        m.observe(&unloaded("a", "request"));
        m.observe(&ready("b", 700));
        m.observe(&WardenEvent::ChildExited {
            model: "b".into(),
            pid: 3,
            code: "out_of_memory".into(),
        });
        m.observe(&ready("b", 700));
        m.refused(Route::Chat, "queue_full");
        let c = m.snapshot();
        assert_eq!(c.turns[&("chat", "completed")], 2);
        assert_eq!(c.turns[&("completions", "failed")], 1);
        assert_eq!(c.completion_tokens["chat"], 9);
        assert_eq!((c.ttft.count(), c.decode.count(), c.load_seconds.count()), (1, 1, 4));
        assert_eq!(c.unloads["brake"], 1);
        assert_eq!(c.unloads["manual"], 1);
        assert_eq!(c.crashes["out_of_memory"], 1);
        assert_eq!(c.unloads["crash"], 1);
        assert_eq!(c.restarts.get("brake"), Some(&1));
        assert_eq!(c.restarts.get("crash"), Some(&1));
        assert_eq!(c.restarts.get("manual"), None);
        assert_eq!(c.refused[&("chat", "queue_full".to_string())], 1);
    }
}
