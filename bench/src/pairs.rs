//! Warm pairs: decode rate and time to first token, llama-server direct
//! against the warden, same binary, model, window, prompt, seed and
//! `max_tokens`.
//!
//! Both servers are loaded and warmed (one unmeasured turn each) before the
//! first round. Each round sends a prompt of its own to both sides, so each
//! side's single slot re-processes the same prompt from the same cached
//! prefix (the chat template's): the warm prompt state is the same for both.
//! The order alternates per round (direct first in even rounds, warden first
//! in odd ones) so neither side always runs right after the other.
//!
//! Per round: the client-side decode ratio (warden / direct, tokens first to
//! last as the client saw them), the server-side one (`predicted_per_second`)
//! and the TTFT difference (warden - direct, ms). The headline figures are the
//! medians of the per-round values.

use bytes::Bytes;

use crate::client::{self, Target, Turn};
use crate::procs::cpu_and_switches;
use crate::report::{Line, Raw};
use crate::stats::{median, spread};

/// The longest wait for a quiet machine before a round.
pub const QUIET_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Topics of the per-round prompts.
const TOPICS: [&str; 10] = [
    "a lighthouse keeper who finds a map",
    "a robot learning to paint",
    "a city that floats on the sea",
    "two rival bakers in a small town",
    "a comet seen from a farm",
    "a librarian who collects sounds",
    "a train that never stops",
    "a fox and a clockmaker",
    "the last day of a long winter",
    "a garden on the moon",
];

/// Round `r`'s prompt.
pub fn prompt(r: usize) -> String {
    format!(
        "Round {r}. Write a long, detailed story about {}.",
        TOPICS[r % TOPICS.len()]
    )
}

/// One round's two turns.
pub struct Pair {
    /// Through llama-server direct.
    pub direct: Turn,
    /// Through the warden.
    pub warden: Turn,
}

/// What the phase found.
pub struct Outcome {
    /// The rounds.
    pub pairs: Vec<Pair>,
    /// Per-round client decode ratios.
    pub decode_ratios: Vec<f64>,
    /// Per-round server (`predicted_per_second`) decode ratios.
    pub server_ratios: Vec<f64>,
    /// Per-round TTFT differences, ms.
    pub ttft_added: Vec<f64>,
    /// Per-round TTFT ratios.
    pub ttft_ratios: Vec<f64>,
    /// Per-round warden CPU time per streamed token, µs.
    pub warden_cpu_us: Vec<f64>,
    /// Per-round warden context switches per streamed token.
    pub warden_switches: Vec<f64>,
}

/// The side compared with llama-server direct.
pub struct Side<'a> {
    /// Where its turns go.
    pub target: &'a Target,
    /// Its label in the CSV (`warden`, `relay`).
    pub name: &'static str,
    /// The process whose CPU per token is recorded (the warden's).
    pub pid: Option<u32>,
    /// Whether it fronts the direct server itself (one slot, one cache).
    pub shares_server: bool,
}

/// Runs `rounds` warm pairs of llama-server direct against `side`; raw
/// samples go under `phase`.
pub async fn run(
    http: &reqwest::Client,
    direct: &Target,
    side: Side<'_>,
    phase: &'static str,
    rounds: usize,
    max_tokens: u32,
    raw: &mut Raw,
) -> anyhow::Result<Outcome> {
    let warden = side.target;
    let warm: Bytes = client::body("Warm-up: say something.", 16, true);
    client::stream(http, direct, warm.clone()).await?;
    client::stream(http, warden, warm).await?;
    let mut out = Outcome {
        pairs: Vec::new(),
        decode_ratios: Vec::new(),
        server_ratios: Vec::new(),
        ttft_added: Vec::new(),
        ttft_ratios: Vec::new(),
        warden_cpu_us: Vec::new(),
        warden_switches: Vec::new(),
    };
    // The warden's own CPU and switches over its turn (its child excluded).
    let warden_turn = |body: Bytes| async move {
        let before = side.pid.and_then(cpu_and_switches);
        let t = client::stream(http, warden, body).await?;
        let after = side.pid.and_then(cpu_and_switches);
        let cost = before.zip(after).map(|(a, b)| (b.0 - a.0, b.1 - a.1));
        anyhow::Ok((t, cost))
    };
    for r in 0..rounds {
        // Two servers: the same prompt. One shared server (the relay's):
        // a one-token marker right after the chat template, so neither
        // side finds the other's prompt in the slot's cache.
        let (db, wb) = if side.shares_server {
            (
                client::body(&format!("A. {}", prompt(r)), max_tokens, true),
                client::body(&format!("B. {}", prompt(r)), max_tokens, true),
            )
        } else {
            let b = client::body(&prompt(r), max_tokens, true);
            (b.clone(), b)
        };
        let wt = &warden_turn;
        let ((d, (w, cost)), foreign) = crate::quiet::clean(|| {
            let (db, wb) = (db.clone(), wb.clone());
            async move {
                if r % 2 == 0 {
                    let d = client::stream(http, direct, db).await?;
                    Ok((d, wt(wb).await?))
                } else {
                    let w = wt(wb).await?;
                    Ok((client::stream(http, direct, db).await?, w))
                }
            }
        })
        .await?;
        raw.push(phase, r, "machine", "foreign_share", Some(foreign));
        if let Some((cpu_ns, switches)) = cost
            && w.tokens > 0
        {
            let n = w.tokens as f64;
            out.warden_cpu_us.push(cpu_ns as f64 / 1e3 / n);
            out.warden_switches.push(switches as f64 / n);
            raw.push(
                phase,
                r,
                side.name,
                "cpu_us_per_token",
                out.warden_cpu_us.last().copied(),
            );
            raw.push(
                phase,
                r,
                side.name,
                "switches_per_token",
                out.warden_switches.last().copied(),
            );
        }
        for (who, t) in [("direct", &d), (side.name, &w)] {
            raw.push(phase, r, who, "ttft_ms", t.ttft_ms());
            raw.push(phase, r, who, "client_tps", t.client_tps());
            raw.push(phase, r, who, "server_tps", t.server_tps);
            raw.push(phase, r, who, "tokens", Some(t.tokens as f64));
        }
        if let (Some(a), Some(b)) = (d.client_tps(), w.client_tps()) {
            out.decode_ratios.push(b / a);
        }
        if let (Some(a), Some(b)) = (d.server_tps, w.server_tps) {
            out.server_ratios.push(b / a);
        }
        if let (Some(a), Some(b)) = (d.ttft_ms(), w.ttft_ms()) {
            out.ttft_added.push(b - a);
            out.ttft_ratios.push(b / a);
        }
        eprintln!(
            "  {phase} {r}: decode direct {:.1} / {} {:.1} tok/s, ttft direct {:.1} / {:.1} ms",
            d.client_tps().unwrap_or(f64::NAN),
            side.name,
            w.client_tps().unwrap_or(f64::NAN),
            d.ttft_ms().unwrap_or(f64::NAN),
            w.ttft_ms().unwrap_or(f64::NAN)
        );
        out.pairs.push(Pair { direct: d, warden: w });
    }
    Ok(out)
}

impl Outcome {
    /// The headline decode ratio (median of the per-round client ratios).
    pub fn decode_ratio(&self) -> f64 {
        median(&self.decode_ratios)
    }

    /// The headline TTFT difference (median of the per-round ones), ms.
    pub fn ttft_added_ms(&self) -> f64 {
        median(&self.ttft_added)
    }

    /// The diagnostic line of a run against the bare TCP relay.
    pub fn relay_line(&self) -> Line {
        Line::new(
            "diagnostic: bare TCP relay in front of llama-server (one extra hop): decode ratio / TTFT added",
            "-".into(),
            "-".into(),
            format!("ratio {:.3} / {:+.2} ms", self.decode_ratio(), self.ttft_added_ms()),
            spread(&self.decode_ratios, 3),
            "(info)",
            None,
        )
    }

    /// The table's lines.
    pub fn lines(&self) -> Vec<Line> {
        let side = |f: fn(&Turn) -> Option<f64>, warden: bool| -> Vec<f64> {
            self.pairs
                .iter()
                .filter_map(|p| f(if warden { &p.warden } else { &p.direct }))
                .collect()
        };
        let (dc, wc) = (side(Turn::client_tps, false), side(Turn::client_tps, true));
        let (ds, ws) = (side(|t| t.server_tps, false), side(|t| t.server_tps, true));
        let (dt, wt) = (side(Turn::ttft_ms, false), side(Turn::ttft_ms, true));
        vec![
            Line::new(
                "decode tok/s, client (first to last token)",
                fmt_med(&dc, 1),
                fmt_med(&wc, 1),
                format!("ratio {:.3}", self.decode_ratio()),
                spread(&self.decode_ratios, 3),
                ">= 0.99",
                Some(self.decode_ratio() >= 0.99),
            ),
            Line::new(
                "decode tok/s, server (timings.predicted_per_second)",
                fmt_med(&ds, 1),
                fmt_med(&ws, 1),
                format!("ratio {:.3}", median(&self.server_ratios)),
                spread(&self.server_ratios, 3),
                "(info)",
                None,
            ),
            Line::new(
                "time to first token, warm (ms)",
                fmt_med(&dt, 2),
                fmt_med(&wt, 2),
                format!("{:+.2} ms", self.ttft_added_ms()),
                spread(&self.ttft_added, 2),
                "<= +2 ms",
                Some(self.ttft_added_ms() <= 2.0),
            ),
            Line::new(
                "warden process CPU per streamed token (us) / context switches per token",
                "-".into(),
                format!(
                    "{} / {}",
                    fmt_med(&self.warden_cpu_us, 0),
                    fmt_med(&self.warden_switches, 2)
                ),
                "-".into(),
                spread(&self.warden_cpu_us, 0),
                "(info)",
                None,
            ),
        ]
    }
}

/// The median of `xs` with `digits` decimals, `-` when empty.
pub fn fmt_med(xs: &[f64], digits: usize) -> String {
    if xs.is_empty() {
        "-".into()
    } else {
        format!("{:.digits$}", median(xs))
    }
}
