//! Cold load: from "no model server running" to the first token.
//!
//! - Direct: the clock starts just before llama-server is spawned (same argv
//!   and window as the warden's child); `/health` is polled every 5 ms until
//!   200, then the chat request goes out; the clock stops at its first token.
//! - Warden: `POST /warden/unload` (awaited: the child is gone), then the
//!   clock starts as the chat request goes out; the warden reads the header,
//!   spawns, probes readiness (its ready-line wake-up plus a 20 ms poll and
//!   a one-token ping), reads `/props` and relays the request; the clock
//!   stops at the first token.
//!
//! Same prompt on both sides in a round (its own per round), `max_tokens` 4,
//! order alternating per round, 300 ms of quiet before each start. The
//! warden's own `load_ms` (spawn to ready, from its `model ready` log line)
//! and the direct server's spawn-to-healthy time are recorded to show where
//! the time goes; so is how long llama-server takes to exit on SIGTERM.

use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use crate::Setup;
use crate::client::{self, ms};
use crate::pairs::{fmt_med, prompt};
use crate::procs::{Direct, WardenProc};
use crate::report::{Line, Raw};
use crate::stats::{median, spread};

/// What the phase found (ms unless said).
#[derive(Default)]
pub struct Outcome {
    /// Direct: spawn to first token.
    pub direct: Vec<f64>,
    /// Direct: spawn to `/health` 200.
    pub direct_healthy: Vec<f64>,
    /// Direct: SIGTERM to exit.
    pub direct_stop: Vec<f64>,
    /// Warden: request to first token.
    pub warden: Vec<f64>,
    /// Warden: its child's spawn to ready (`load_ms` of its log).
    pub warden_load: Vec<f64>,
    /// Per-round warden / direct.
    pub ratios: Vec<f64>,
}

/// Runs `rounds` cold pairs against `warden` (which must have the model
/// loaded; it has it loaded again at the end).
pub async fn run(
    http: &reqwest::Client,
    s: &Setup,
    warden: &WardenProc,
    rounds: usize,
    raw: &mut Raw,
) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    for r in 0..rounds {
        let body = client::body(&prompt(100 + r), 4, true);
        let ((d, w), foreign) = crate::quiet::clean(|| {
            let body = body.clone();
            async move {
                let mut d = None;
                let mut w = None;
                for step in 0..2 {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    if (step == 0) == r.is_multiple_of(2) {
                        d = Some(direct_cold(http, s, body.clone()).await?);
                    } else {
                        w = Some(warden_cold(http, warden, body.clone()).await?);
                    }
                }
                Ok((d.expect("ran"), w.expect("ran")))
            }
        })
        .await?;
        raw.push("cold", r, "machine", "foreign_share", Some(foreign));
        raw.push("cold", r, "direct", "to_first_token_ms", Some(d.0));
        raw.push("cold", r, "direct", "to_healthy_ms", Some(d.1));
        raw.push("cold", r, "direct", "stop_ms", Some(d.2));
        raw.push("cold", r, "warden", "to_first_token_ms", Some(w.0));
        raw.push("cold", r, "warden", "child_load_ms", w.1);
        eprintln!("  cold {r}: direct {:.0} ms, warden {:.0} ms", d.0, w.0);
        out.direct.push(d.0);
        out.direct_healthy.push(d.1);
        out.direct_stop.push(d.2);
        out.warden.push(w.0);
        out.warden_load.extend(w.1);
        out.ratios.push(w.0 / d.0);
    }
    Ok(out)
}

/// Direct: (spawn to first token, spawn to healthy, stop), ms.
async fn direct_cold(http: &reqwest::Client, s: &Setup, body: bytes::Bytes) -> anyhow::Result<(f64, f64, f64)> {
    let t0 = Instant::now();
    let mut d = Direct::spawn(&s.server, &s.model, &s.model_id, s.window)?;
    let healthy = d.wait_healthy(http, Duration::from_millis(5)).await?;
    let target = d.target();
    let turn = client::stream(http, &target, body).await?;
    let first = turn.first_token.context("direct cold turn: no token")?;
    let stop = d.stop().await;
    Ok((ms(first - t0), ms(healthy - t0), ms(stop)))
}

/// Warden: (request to first token, the child's load_ms from the log), ms.
async fn warden_cold(http: &reqwest::Client, w: &WardenProc, body: bytes::Bytes) -> anyhow::Result<(f64, Option<f64>)> {
    w.post(http, "/warden/unload").await?;
    let t0 = Instant::now();
    let target = w.target();
    let turn = client::stream(http, &target, body).await?;
    let first = turn.first_token.context("warden cold turn: no token")?;
    w.wait_ready(http).await?;
    Ok((ms(first - t0), load_ms_since(w, t0)))
}

/// The `load_ms` of the first `model ready` line logged since `since`.
pub fn load_ms_since(w: &WardenProc, since: Instant) -> Option<f64> {
    w.log_since(since, "model ready").first().and_then(|(_, l)| {
        let v = l.split("load_ms=").nth(1)?;
        v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    })
}

impl Outcome {
    /// The headline ratio (median of the per-round ratios).
    pub fn ratio(&self) -> f64 {
        median(&self.ratios)
    }

    /// The table's lines.
    pub fn lines(&self) -> Vec<Line> {
        vec![
            Line::new(
                "cold load to first token (ms)",
                fmt_med(&self.direct, 0),
                fmt_med(&self.warden, 0),
                format!("ratio {:.3}", self.ratio()),
                spread(&self.ratios, 3),
                "<= 1.05",
                Some(self.ratio() <= 1.05),
            ),
            Line::new(
                "  of which: spawn to ready (ms): direct /health 200, warden child load_ms",
                fmt_med(&self.direct_healthy, 0),
                fmt_med(&self.warden_load, 0),
                format!("{:+.0} ms", median(&self.warden_load) - median(&self.direct_healthy)),
                spread(&self.warden_load, 0),
                "(info)",
                None,
            ),
            Line::new(
                "  llama-server exit on SIGTERM (ms)",
                fmt_med(&self.direct_stop, 0),
                "-".into(),
                "-".into(),
                spread(&self.direct_stop, 0),
                "(info)",
                None,
            ),
        ]
    }
}
