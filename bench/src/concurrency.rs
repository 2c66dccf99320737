//! The concurrency phase (#35): 1, 4 and 8 clients at once, each
//! streaming its own conversation, against the warden and against
//! llama-server driven directly with its own defaults (`-np auto`: 4 slots
//! over one unified pool, the same window, so the same KV memory), the
//! two interleaved round by round and never at once. Per client count:
//! the aggregate decode rate (every token of the batch over the batch's
//! wall time), time to first token p50 and p95, and the child's `VmRSS`
//! after the batch. Targets: aggregate >= 0.97x direct at 4 and 8
//! clients and unchanged at 1, first-token p50 <= 1.1x, child memory
//! <= 1.05x.

use std::time::Duration;

use futures::future::join_all;

use crate::Setup;
use crate::client::{self, Target, Turn};
use crate::procs::{self, Direct, WardenProc};
use crate::report::{Line, Raw};
use crate::stats;

/// The client counts measured.
const CLIENTS: [usize; 3] = [1, 4, 8];

/// One batch: its aggregate decode rate (tok/s), each client's first
/// token (ms), and the child's `VmRSS` after it (KiB).
struct Batch {
    aggregate: f64,
    ttft_ms: Vec<f64>,
    child_kib: Option<u64>,
}

/// `n` clients at once against `to`, each its own prompt (so each its own
/// conversation on the warden), `max_tokens` each.
async fn batch(
    http: &reqwest::Client,
    to: &Target,
    n: usize,
    max_tokens: u32,
    round: usize,
) -> anyhow::Result<Vec<Turn>> {
    let turns = (0..n).map(|i| {
        let prompt = format!("Client {i} of round {round}: tell a long story about a lighthouse keeper.");
        let mut to = to.clone();
        to.conversation = Some(format!("bench-{round}-{n}-{i}"));
        async move { client::stream(http, &to, client::body(&prompt, max_tokens, true)).await }
    });
    join_all(turns).await.into_iter().collect()
}

fn measure(turns: &[Turn], child_kib: Option<u64>) -> anyhow::Result<Batch> {
    let start = turns
        .iter()
        .map(|t| t.sent)
        .min()
        .ok_or_else(|| anyhow::anyhow!("no turn"))?;
    let end = turns
        .iter()
        .filter_map(|t| t.done.or(t.last_token))
        .max()
        .ok_or_else(|| anyhow::anyhow!("no turn ended"))?;
    let tokens: usize = turns.iter().map(|t| t.tokens).sum();
    let span = (end - start).as_secs_f64();
    anyhow::ensure!(span > 0.0 && tokens > 0, "an empty batch");
    Ok(Batch {
        aggregate: tokens as f64 / span,
        ttft_ms: turns.iter().filter_map(Turn::ttft_ms).collect(),
        child_kib,
    })
}

/// Per client count, per side: the batches of every round.
#[derive(Default)]
struct Sides {
    direct: Vec<Batch>,
    warden: Vec<Batch>,
}

/// Runs the phase: a warden of its own (the default slots) and a direct
/// server with its window.
pub async fn run(
    http: &reqwest::Client,
    setup: &Setup,
    rounds: usize,
    max_tokens: u32,
    raw: &mut Raw,
) -> anyhow::Result<Vec<Line>> {
    let w = WardenProc::spawn(&setup.warden_bin, &setup.server, &setup.model, true, &[]).await?;
    let status = w.wait_ready(http).await?;
    let window = status["context_tokens"].as_u64().unwrap_or(u64::from(setup.window)) as u32;
    let wchild = status["child_pid"].as_u64().map(|p| p as u32);
    let mut d = Direct::spawn(&setup.server, &setup.model, &setup.model_id, window)?;
    d.wait_healthy(http, Duration::from_millis(5)).await?;
    // One warm turn each: the first turn of a fresh child pays page faults.
    client::stream(http, &w.target(), client::body("Warm-up.", 8, true)).await?;
    client::stream(http, &d.target(), client::body("Warm-up.", 8, true)).await?;
    let mut sides: Vec<Sides> = CLIENTS.iter().map(|_| Sides::default()).collect();
    for round in 0..rounds {
        for (k, &n) in CLIENTS.iter().enumerate() {
            // Interleaved, the order alternating by round.
            let warden_first = round % 2 == 1;
            for warden in [warden_first, !warden_first] {
                let (to, pid) = if warden {
                    (w.target(), wchild)
                } else {
                    (d.target(), Some(d.proc.pid))
                };
                let turns = batch(http, &to, n, max_tokens, round).await?;
                let b = measure(&turns, pid.and_then(procs::rss_kib))?;
                let side = if warden { "warden" } else { "direct" };
                raw.push("concurrency", round, side, "aggregate_tps", Some(b.aggregate));
                raw.push(
                    "concurrency",
                    round,
                    side,
                    "ttft_p50_ms",
                    Some(stats::median(&b.ttft_ms)),
                );
                let s = &mut sides[k];
                if warden { s.warden.push(b) } else { s.direct.push(b) }
            }
            eprintln!("  round {round}: {n} client(s) done");
        }
    }
    d.stop().await;
    w.stop().await;
    Ok(lines(&sides))
}

/// The table's lines: per client count, aggregate decode, first token p50
/// and p95, and the children's memory.
fn lines(sides: &[Sides]) -> Vec<Line> {
    let mut out = Vec::new();
    for (s, &n) in sides.iter().zip(CLIENTS.iter()) {
        let agg = |v: &[Batch]| v.iter().map(|b| b.aggregate).collect::<Vec<_>>();
        let ratios: Vec<f64> = s
            .warden
            .iter()
            .zip(&s.direct)
            .map(|(w, d)| w.aggregate / d.aggregate)
            .collect();
        let r = stats::median(&ratios);
        let (target, met) = if n == 1 {
            ("unchanged (>= 0.97x)", r >= 0.97)
        } else {
            (">= 0.97x", r >= 0.97)
        };
        out.push(Line::new(
            &format!("concurrency: aggregate decode, {n} client(s) (tok/s)"),
            format!("{:.1}", stats::median(&agg(&s.direct))),
            format!("{:.1}", stats::median(&agg(&s.warden))),
            format!("{r:.3}x"),
            stats::spread(&ratios, 3),
            target,
            Some(met),
        ));
        let all = |v: &[Batch]| v.iter().flat_map(|b| b.ttft_ms.iter().copied()).collect::<Vec<_>>();
        let (dt, wt) = (all(&s.direct), all(&s.warden));
        let p50 = stats::median(&wt) / stats::median(&dt);
        out.push(Line::new(
            &format!("concurrency: first token p50, {n} client(s) (ms)"),
            format!("{:.0}", stats::median(&dt)),
            format!("{:.0}", stats::median(&wt)),
            format!("{p50:.2}x"),
            String::new(),
            "<= 1.1x",
            Some(p50 <= 1.1),
        ));
        let (d95, w95) = (stats::percentile(&dt, 95.0), stats::percentile(&wt, 95.0));
        out.push(Line::new(
            &format!("concurrency: first token p95, {n} client(s) (ms)"),
            format!("{d95:.0}"),
            format!("{w95:.0}"),
            format!("{:.2}x", w95 / d95),
            String::new(),
            "",
            None,
        ));
        let kib = |v: &[Batch]| {
            v.iter()
                .filter_map(|b| b.child_kib)
                .map(|k| k as f64)
                .fold(0.0, f64::max)
        };
        let (dk, wk) = (kib(&s.direct), kib(&s.warden));
        if dk > 0.0 && wk > 0.0 {
            out.push(Line::new(
                &format!("concurrency: child VmRSS after {n} client(s) (MiB)"),
                format!("{:.0}", dk / 1024.0),
                format!("{:.0}", wk / 1024.0),
                format!("{:.3}x", wk / dk),
                String::new(),
                "<= 1.05x",
                Some(wk / dk <= 1.05),
            ));
        }
    }
    out
}
