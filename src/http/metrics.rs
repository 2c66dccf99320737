//! `GET /metrics`: Prometheus text exposition (`metrics`), behind the same
//! key as every other route. The counters come from the engine's events; the
//! gauges are read now from the status watch, the child's `/proc` entry and
//! the child's own `/metrics` (llama-server started with `--metrics`), which
//! is relayed with a `model` label and never waits past `CHILD_METRICS_TIMEOUT`
//! (a scrape must not hang on a busy child; `warden_child_metrics_up` says
//! whether it answered).

use std::time::{Duration, SystemTime};

use actix_web::{HttpResponse, web};

use crate::law::brake::Level;
use crate::metrics::{Gauges, render};
use crate::status::EngineKind;
use crate::warden::Warden;

/// Longest wait for the child's own metrics.
const CHILD_METRICS_TIMEOUT: Duration = Duration::from_secs(2);

/// The route handler.
pub async fn metrics(warden: web::Data<Warden>) -> HttpResponse {
    let s = warden.status();
    let llama = matches!(s.engine, EngineKind::Cpu | EngineKind::Cuda);
    let child = match (llama, warden.door()) {
        (true, Some(door)) => Some(door.child_metrics(CHILD_METRICS_TIMEOUT).await),
        _ => None,
    };
    let now_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i128);
    let gauges = Gauges {
        engine: s.engine.name(),
        model: s.model.clone(),
        queue_depth: warden.queue_depth(),
        max_queue: warden.config().max_queue,
        context_tokens: s.context_tokens,
        memory_bound_tokens: s.memory_bound_tokens,
        memory_total_bytes: s.memory_total_bytes,
        child_footprint_bytes: s.child_pid.and_then(crate::sensors::footprint::anon_bytes),
        brake_level: s.brake.level.map(|l| match l {
            Level::Calm => 0,
            Level::Warning => 1,
            Level::Critical => 2,
        }),
        idle_deadline_seconds: s.idle_deadline_ms.map(|d| (d as i128 - now_ms) as f64 / 1000.0),
        child_metrics_up: child.as_ref().map(Option::is_some),
    };
    let text = render::render(warden.metrics(), &gauges, child.flatten().as_deref());
    HttpResponse::Ok().content_type(render::CONTENT_TYPE).body(text)
}
