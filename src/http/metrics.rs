//! `GET /metrics`: Prometheus text exposition (`metrics`), behind the same
//! key as every other route. The counters come from the engine's events; the
//! gauges are read now from the status watch (each resident's labelled by
//! model), the child's `/proc` entry and every resident child's own
//! `/metrics` (llama-server started with `--metrics`), which is relayed
//! with a `model` label and never waits past `CHILD_METRICS_TIMEOUT`
//! (a scrape must not hang on a busy child; `warden_child_metrics_up` says
//! whether it answered).

use std::time::{Duration, SystemTime};

use actix_web::{HttpResponse, web};

use crate::law::brake::Level;
use crate::metrics::{Gauges, ResidentGauges, render};
use crate::status::EngineKind;
use crate::warden::Warden;

/// Longest wait for the child's own metrics.
const CHILD_METRICS_TIMEOUT: Duration = Duration::from_secs(2);

/// The route handler.
pub async fn metrics(warden: web::Data<Warden>) -> HttpResponse {
    let s = warden.status();
    let llama = matches!(s.engine, EngineKind::Cpu | EngineKind::Cuda);
    // Every resident child's own metrics, read at once (each bounded).
    let doors = if llama { warden.doors() } else { Vec::new() };
    let read = doors.iter().map(|d| d.child_metrics(CHILD_METRICS_TIMEOUT));
    let texts = futures::future::join_all(read).await;
    let children: Vec<(String, String)> = doors
        .iter()
        .zip(&texts)
        .filter_map(|(d, t)| Some((d.model.clone(), t.clone()?)))
        .collect();
    // The top level's own: the most recently used resident's.
    let child = llama.then(|| {
        let at = doors.iter().position(|d| Some(&d.model) == s.model.as_ref());
        at.and_then(|i| texts[i].clone())
    });
    let child = child.filter(|_| s.model.is_some());
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
        residents: s
            .residents
            .iter()
            .map(|r| ResidentGauges {
                model: r.model.clone(),
                kind: r.kind.unwrap_or_default().as_str(),
                footprint_bytes: r.footprint_bytes,
                context_tokens: r.context_tokens,
                queue_depth: r.queue_depth,
                slots: r.slots,
                busy_slots: r.busy_slots,
                idle_deadline_seconds: r.idle_deadline_ms.map(|d| (d as i128 - now_ms) as f64 / 1000.0),
            })
            .collect(),
    };
    let text = render::render(warden.metrics(), &gauges, &children);
    HttpResponse::Ok().content_type(render::CONTENT_TYPE).body(text)
}
