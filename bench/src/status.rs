//! `/warden/status` latency, at rest and while a stream runs.
//!
//! Sequential `GET /warden/status` on one keep-alive connection, each timed
//! from send to the whole body read, `n` at rest, then `n` while a long
//! stream (`max_tokens` 4096, `ignore_eos`) runs through the warden (the
//! requests start once the engine reports `generating` and tokens flow; the
//! stream must still be running after the last one, else the phase says so).
//! For reference, the same `n` GETs of llama-server's own `/health` while a
//! stream runs through it directly: what any loopback HTTP answer costs on
//! this machine while the model saturates its cores.

use std::time::Duration;

use crate::client::{self, Target};
use crate::procs::{Direct, WardenProc};
use crate::report::{Line, Raw};
use crate::stats::{median, percentile};

/// What the phase found, ms.
#[derive(Default)]
pub struct Outcome {
    /// Warden status, no turn running.
    pub rest: Vec<f64>,
    /// Warden status while a stream runs.
    pub during: Vec<f64>,
    /// llama-server `/health` while a stream runs through it.
    pub llama_during: Vec<f64>,
    /// Whether each stream outlived its requests (warden, direct).
    pub streams_alive: (bool, bool),
}

/// Runs the phase.
pub async fn run(
    http: &reqwest::Client,
    w: &WardenProc,
    d: &Direct,
    n: usize,
    raw: &mut Raw,
) -> anyhow::Result<Outcome> {
    let url = format!("{}/warden/status", w.base);
    client::time_gets(http, &url, 10).await?; // connection and caches
    let mut out = Outcome {
        rest: client::time_gets(http, &url, n).await?,
        ..Outcome::default()
    };
    let wt = w.target();
    let (during, alive) = while_streaming(http, &wt, &url, n, || async {
        // Tokens flow once the engine says `generating` (and a moment more).
        for _ in 0..500 {
            if w.status(http).await.is_ok_and(|s| s["state"] == "generating") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    out.during = during;
    out.streams_alive.0 = alive;
    w.wait_ready(http).await?;
    let dt = d.target();
    let health = format!("{}/health", d.base);
    let (llama, alive) = while_streaming(http, &dt, &health, n, || async {}).await?;
    out.llama_during = llama;
    out.streams_alive.1 = alive;
    for (side, xs) in [
        ("warden_rest", &out.rest),
        ("warden_streaming", &out.during),
        ("llama_health_streaming", &out.llama_during),
    ] {
        for (i, x) in xs.iter().enumerate() {
            raw.push("status", i, side, "latency_ms", Some(*x));
        }
    }
    Ok(out)
}

/// Times `n` GETs of `url` while a long stream runs to `target`; whether the
/// stream was still running at the end.
async fn while_streaming<F, Fut>(
    http: &reqwest::Client,
    target: &Target,
    url: &str,
    n: usize,
    started: F,
) -> anyhow::Result<(Vec<f64>, bool)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (h, t) = (http.clone(), target.clone());
    let body = client::body("Write a very long essay about the history of bridges.", 4096, true);
    let stream = tokio::spawn(async move { client::stream(&h, &t, body).await });
    started().await;
    // Past the prompt (a warm TTFT is well under this): tokens are flowing.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let xs = client::time_gets(http, url, n).await?;
    let alive = !stream.is_finished();
    stream.abort();
    let _ = stream.await;
    // Let the server notice the client left and end the turn.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok((xs, alive))
}

impl Outcome {
    /// The headline p99 while streaming, ms.
    pub fn p99(&self) -> f64 {
        percentile(&self.during, 99.0)
    }

    /// The table's lines.
    pub fn lines(&self) -> Vec<Line> {
        let pp = |xs: &[f64]| format!("p50 {:.3} / p99 {:.3}", median(xs), percentile(xs, 99.0));
        let note = if self.streams_alive.0 && self.streams_alive.1 {
            String::new()
        } else {
            " (a stream ended before the requests did!)".into()
        };
        vec![
            Line::new(
                &format!(
                    "/warden/status latency while streaming (ms, n={}){note}",
                    self.during.len()
                ),
                format!("llama /health: {}", pp(&self.llama_during)),
                pp(&self.during),
                format!("p99 {:.3} ms", self.p99()),
                format!("max {:.3}", crate::stats::max(&self.during)),
                "p99 <= 1 ms",
                Some(self.p99() <= 1.0),
            ),
            Line::new(
                "/warden/status latency at rest (ms)",
                "-".into(),
                pp(&self.rest),
                "-".into(),
                format!("max {:.3}", crate::stats::max(&self.rest)),
                "(info)",
                None,
            ),
        ]
    }
}
