//! The warden's own resident memory (`VmRSS` of the warden process, never
//! its child), at rest with the model loaded and across many short turns.
//!
//! "At rest" is read by the caller right after the warm-up (model loaded,
//! one turn served, a second of quiet). Here: `VmRSS` just before the turns,
//! then `turns` short turns (`max_tokens` 2, the same prompt; three in four
//! streamed, one in four whole), sampled every 100 turns, and after one
//! second of quiet at the end. Growth = after - before.

use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use crate::client::{self, ms};
use crate::procs::WardenProc;
use crate::report::{Line, Raw};
use crate::stats::median;

/// What the phase found.
#[derive(Default)]
pub struct Outcome {
    /// KiB at rest after the warm-up (read by the caller).
    pub rest_kib: u64,
    /// KiB just before the turns.
    pub before_kib: u64,
    /// KiB after the turns (and a second of quiet).
    pub after_kib: u64,
    /// (turns done, KiB).
    pub trace: Vec<(usize, u64)>,
    /// Per-turn wall time, ms.
    pub turn_ms: Vec<f64>,
}

/// Runs `turns` short turns through `w`.
pub async fn run(
    http: &reqwest::Client,
    w: &WardenProc,
    turns: usize,
    rest_kib: u64,
    raw: &mut Raw,
) -> anyhow::Result<Outcome> {
    let target = w.target();
    let streamed = client::body("Hi.", 2, true);
    let whole = client::body("Hi.", 2, false);
    let rss = || w.rss_kib().context("the warden's VmRSS is unreadable");
    let mut out = Outcome {
        rest_kib,
        before_kib: rss()?,
        ..Outcome::default()
    };
    out.trace.push((0, out.before_kib));
    for i in 1..=turns {
        let t = Instant::now();
        if i % 4 == 0 {
            client::whole(http, &target, whole.clone()).await?;
        } else {
            client::stream(http, &target, streamed.clone()).await?;
        }
        out.turn_ms.push(ms(t.elapsed()));
        if i % 100 == 0 {
            out.trace.push((i, rss()?));
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    out.after_kib = rss()?;
    out.trace.push((turns, out.after_kib));
    raw.push("rss", 0, "warden", "rest_kib", Some(rest_kib as f64));
    for (i, kib) in &out.trace {
        raw.push("rss", *i, "warden", "vmrss_kib", Some(*kib as f64));
    }
    eprintln!(
        "  rss: rest {} KiB, before {} KiB, after {turns} turns {} KiB (median turn {:.1} ms)",
        out.rest_kib,
        out.before_kib,
        out.after_kib,
        median(&out.turn_ms)
    );
    Ok(out)
}

/// KiB to MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl Outcome {
    /// Growth over the turns, MiB (negative when it shrank).
    pub fn growth_mib(&self) -> f64 {
        mib(self.after_kib) - mib(self.before_kib)
    }

    /// The table's lines.
    pub fn lines(&self) -> Vec<Line> {
        let trace: Vec<String> = self.trace.iter().map(|(_, k)| format!("{:.1}", mib(*k))).collect();
        let turns = self.trace.last().map_or(0, |t| t.0);
        vec![
            Line::new(
                "warden VmRSS at rest, model loaded (MiB)",
                "-".into(),
                format!("{:.1}", mib(self.rest_kib)),
                format!("{:.1} MiB", mib(self.rest_kib)),
                "-".into(),
                "<= 20 MiB",
                Some(mib(self.rest_kib) <= 20.0),
            ),
            Line::new(
                &format!("warden VmRSS growth over {turns} short turns (MiB)"),
                "-".into(),
                format!("{:.1} -> {:.1}", mib(self.before_kib), mib(self.after_kib)),
                format!("{:+.2} MiB", self.growth_mib()),
                format!("trace {}", trace.join(" ")),
                "<= 1 MiB",
                Some(self.growth_mib() <= 1.0),
            ),
        ]
    }
}
