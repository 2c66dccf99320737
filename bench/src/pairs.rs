//! Warm pairs: decode rate and time to first token, llama-server direct
//! against the warden (or, for the `relay` diagnostic, a bare TCP relay),
//! same binary, model, window, prompt, seed and `max_tokens`.
//!
//! Both servers are loaded and warmed (one unmeasured turn each) before the
//! first round. A round is one block per side, direct first in even rounds
//! and second in odd ones (so neither side always runs right after the
//! other). A block is:
//!
//! 1. a *new-prompt* turn: the round's own prompt, `max_tokens` tokens, so
//!    each side's single slot re-processes the same prompt from the same
//!    cached prefix (the chat template's): the decode rates (client-side,
//!    first to last token, and the server's `predicted_per_second`) and a
//!    TTFT that includes ~20 tokens of prompt processing;
//! 2. `REPEATS` *cached-prompt* turns: the same messages again
//!    (`max_tokens` 2), whose prompt is all in the slot's cache (llama-server
//!    re-evaluates only the last token): a TTFT of one decode step, whose
//!    small variance shows the warden's added milliseconds instead of the
//!    prompt processing's jitter.
//!
//! Per round: decode ratios (warden / direct), the TTFT difference of the
//! cached-prompt turns (median of the side's repeats, warden - direct) and of
//! the new-prompt turns. Headline figures are medians of the per-round
//! values: `decode_ratio` the client-side ratio, `ttft_added_ms` the
//! cached-prompt difference. The warden's own CPU time and context switches
//! (all its threads, not its child) over its new-prompt turn are recorded
//! per token.
//!
//! With a shared server (the relay fronts the direct server: one slot), the
//! two sides' prompts differ by a one-token marker right after the chat
//! template, so neither side finds the other's prompt in the cache.

use anyhow::Context;
use bytes::Bytes;

use crate::client::{self, Target, Turn};
use crate::procs::cpu_and_switches;
use crate::report::{Line, Raw};
use crate::stats::{median, spread};

/// The longest wait for a quiet machine before a round.
pub const QUIET_MAX: std::time::Duration = std::time::Duration::from_secs(30);
/// Cached-prompt turns per side per round.
pub const REPEATS: usize = 8;

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

/// One side's block of a round.
pub struct Block {
    /// The new-prompt turn.
    pub fresh: Turn,
    /// TTFTs of the cached-prompt turns, ms.
    pub cached_ttft: Vec<f64>,
    /// The side process's (CPU ns, context switches) over the new-prompt turn.
    pub cost: Option<(u64, u64)>,
}

/// Runs one block against `to`; `pid`: whose CPU to record.
async fn block(
    http: &reqwest::Client,
    to: &Target,
    prompt: &str,
    max_tokens: u32,
    pid: Option<u32>,
) -> anyhow::Result<Block> {
    let before = pid.and_then(cpu_and_switches);
    let fresh = client::stream(http, to, client::body(prompt, max_tokens, true)).await?;
    let after = pid.and_then(cpu_and_switches);
    let mut cached_ttft = Vec::with_capacity(REPEATS);
    let again = client::body(prompt, 2, true);
    for _ in 0..REPEATS {
        let t = client::stream(http, to, again.clone()).await?;
        cached_ttft.push(t.ttft_ms().context("a cached-prompt turn sent no token")?);
    }
    Ok(Block {
        fresh,
        cached_ttft,
        cost: before.zip(after).map(|(a, b)| (b.0 - a.0, b.1 - a.1)),
    })
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

/// What the phase found.
#[derive(Default)]
pub struct Outcome {
    /// Per round: (direct, side) blocks.
    pub rounds: Vec<(Block, Block)>,
    /// Per-round client decode ratios.
    pub decode_ratios: Vec<f64>,
    /// Per-round server (`predicted_per_second`) decode ratios.
    pub server_ratios: Vec<f64>,
    /// Per-round cached-prompt TTFT differences, ms.
    pub ttft_added: Vec<f64>,
    /// Per-round cached-prompt TTFT ratios.
    pub ttft_ratios: Vec<f64>,
    /// Per-round new-prompt TTFT differences, ms.
    pub fresh_ttft_added: Vec<f64>,
    /// Per-round side CPU time per streamed token, µs.
    pub cpu_us: Vec<f64>,
    /// Per-round side context switches per streamed token.
    pub switches: Vec<f64>,
}

/// One unmeasured turn on each side (after a load, or before the rounds).
pub async fn warm(http: &reqwest::Client, direct: &Target, other: &Target) -> anyhow::Result<()> {
    let warm: Bytes = client::body("Warm-up: say something.", 16, true);
    client::stream(http, direct, warm.clone()).await?;
    client::stream(http, other, warm).await?;
    Ok(())
}

/// Runs `rounds` warm pairs of llama-server direct against `side` on the
/// same two processes throughout (the relay diagnostic: one process behind
/// both sides); raw samples go under `phase`.
pub async fn run(
    http: &reqwest::Client,
    direct: &Target,
    side: Side<'_>,
    phase: &'static str,
    rounds: usize,
    max_tokens: u32,
    raw: &mut Raw,
) -> anyhow::Result<Outcome> {
    warm(http, direct, side.target).await?;
    let mut out = Outcome::default();
    for r in 0..rounds {
        out.round(http, direct, &side, phase, r, max_tokens, raw).await?;
    }
    Ok(out)
}

impl Outcome {
    /// Measures round `r` (a block per side, see the module docs) and
    /// records it.
    #[allow(clippy::too_many_arguments)]
    pub async fn round(
        &mut self,
        http: &reqwest::Client,
        direct: &Target,
        side: &Side<'_>,
        phase: &'static str,
        r: usize,
        max_tokens: u32,
        raw: &mut Raw,
    ) -> anyhow::Result<()> {
        let (dp, sp) = if side.shares_server {
            (format!("A. {}", prompt(r)), format!("B. {}", prompt(r)))
        } else {
            (prompt(r), prompt(r))
        };
        let ((d, w), foreign) = crate::quiet::clean(|| {
            let (dp, sp) = (dp.clone(), sp.clone());
            async move {
                let d_first = r.is_multiple_of(2);
                let first = if d_first {
                    block(http, direct, &dp, max_tokens, None).await?
                } else {
                    block(http, side.target, &sp, max_tokens, side.pid).await?
                };
                let second = if d_first {
                    block(http, side.target, &sp, max_tokens, side.pid).await?
                } else {
                    block(http, direct, &dp, max_tokens, None).await?
                };
                Ok(if d_first { (first, second) } else { (second, first) })
            }
        })
        .await?;
        raw.push(phase, r, "machine", "foreign_share", Some(foreign));
        self.record(phase, side.name, r, &d, &w, raw);
        eprintln!(
            "  {phase} {r}: decode direct {:.1} / {} {:.1} tok/s; ttft cached direct {:.2} / {:.2} ms, new prompt {:.1} / {:.1} ms",
            d.fresh.client_tps().unwrap_or(f64::NAN),
            side.name,
            w.fresh.client_tps().unwrap_or(f64::NAN),
            median(&d.cached_ttft),
            median(&w.cached_ttft),
            d.fresh.ttft_ms().unwrap_or(f64::NAN),
            w.fresh.ttft_ms().unwrap_or(f64::NAN)
        );
        self.rounds.push((d, w));
        Ok(())
    }

    /// Adds round `r`'s figures and raw samples.
    fn record(&mut self, phase: &'static str, name: &'static str, r: usize, d: &Block, w: &Block, raw: &mut Raw) {
        for (who, b) in [("direct", d), (name, w)] {
            raw.push(phase, r, who, "new_prompt_ttft_ms", b.fresh.ttft_ms());
            raw.push(phase, r, who, "client_tps", b.fresh.client_tps());
            raw.push(phase, r, who, "server_tps", b.fresh.server_tps);
            raw.push(phase, r, who, "tokens", Some(b.fresh.tokens as f64));
            for x in &b.cached_ttft {
                raw.push(phase, r, who, "cached_prompt_ttft_ms", Some(*x));
            }
        }
        if let (Some(a), Some(b)) = (d.fresh.client_tps(), w.fresh.client_tps()) {
            self.decode_ratios.push(b / a);
        }
        if let (Some(a), Some(b)) = (d.fresh.server_tps, w.fresh.server_tps) {
            self.server_ratios.push(b / a);
        }
        let (a, b) = (median(&d.cached_ttft), median(&w.cached_ttft));
        self.ttft_added.push(b - a);
        self.ttft_ratios.push(b / a);
        if let (Some(a), Some(b)) = (d.fresh.ttft_ms(), w.fresh.ttft_ms()) {
            self.fresh_ttft_added.push(b - a);
        }
        if let Some((cpu_ns, switches)) = w.cost
            && w.fresh.tokens > 0
        {
            let n = w.fresh.tokens as f64;
            self.cpu_us.push(cpu_ns as f64 / 1e3 / n);
            self.switches.push(switches as f64 / n);
            raw.push(phase, r, name, "cpu_us_per_token", self.cpu_us.last().copied());
            raw.push(phase, r, name, "switches_per_token", self.switches.last().copied());
        }
    }

    /// The headline decode ratio (median of the per-round client ratios).
    pub fn decode_ratio(&self) -> f64 {
        median(&self.decode_ratios)
    }

    /// The headline TTFT difference (median of the per-round cached-prompt
    /// ones), ms.
    pub fn ttft_added_ms(&self) -> f64 {
        median(&self.ttft_added)
    }

    /// A diagnostic line (a run against the relay, or against a second
    /// direct server): decode ratio / cached-prompt TTFT added.
    pub fn diagnostic_line(&self, what: &str) -> Line {
        Line::new(
            &format!("diagnostic: {what}: decode ratio / TTFT added (cached prompt)"),
            "-".into(),
            "-".into(),
            format!("ratio {:.3} / {:+.2} ms", self.decode_ratio(), self.ttft_added_ms()),
            format!("{} / {}", spread(&self.decode_ratios, 3), spread(&self.ttft_added, 2)),
            "(info)",
            None,
        )
    }

    /// The table's lines.
    pub fn lines(&self) -> Vec<Line> {
        let side = |f: fn(&Block) -> Vec<f64>, warden: bool| -> Vec<f64> {
            self.rounds
                .iter()
                .flat_map(|(d, w)| f(if warden { w } else { d }))
                .collect()
        };
        let tps = |b: &Block| b.fresh.client_tps().into_iter().collect();
        let stps = |b: &Block| b.fresh.server_tps.into_iter().collect();
        let cached = |b: &Block| b.cached_ttft.clone();
        let fresh = |b: &Block| b.fresh.ttft_ms().into_iter().collect();
        vec![
            Line::new(
                "decode tok/s, client (first to last token)",
                fmt_med(&side(tps, false), 1),
                fmt_med(&side(tps, true), 1),
                format!("ratio {:.3}", self.decode_ratio()),
                spread(&self.decode_ratios, 3),
                ">= 0.99",
                Some(self.decode_ratio() >= 0.99),
            ),
            Line::new(
                "decode tok/s, server (timings.predicted_per_second)",
                fmt_med(&side(stps, false), 1),
                fmt_med(&side(stps, true), 1),
                format!("ratio {:.3}", median(&self.server_ratios)),
                spread(&self.server_ratios, 3),
                "(info)",
                None,
            ),
            Line::new(
                "time to first token, warm, cached prompt (ms)",
                fmt_med(&side(cached, false), 2),
                fmt_med(&side(cached, true), 2),
                format!("{:+.2} ms", self.ttft_added_ms()),
                spread(&self.ttft_added, 2),
                "<= +2 ms",
                Some(self.ttft_added_ms() <= 2.0),
            ),
            Line::new(
                "time to first token, warm, new prompt each round (ms)",
                fmt_med(&side(fresh, false), 1),
                fmt_med(&side(fresh, true), 1),
                format!("{:+.2} ms", median(&self.fresh_ttft_added)),
                spread(&self.fresh_ttft_added, 1),
                "(info)",
                None,
            ),
            Line::new(
                "warden process CPU per streamed token (us) / context switches per token",
                "-".into(),
                format!("{} / {}", fmt_med(&self.cpu_us, 0), fmt_med(&self.switches, 2)),
                "-".into(),
                spread(&self.cpu_us, 0),
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
