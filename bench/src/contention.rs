//! The contention phase (#45): two chat models that cannot both be
//! resident (SmolLM2 and Gemma 3 270M, `WARDEN_MAX_RESIDENT=1`), with
//! clients per model at different rates, on the warden with its scheduler
//! (`WARDEN_SCHEDULE=weighed`, the default) against the same warden first
//! come, first served (`WARDEN_SCHEDULE=arrival`: a busy model yields as
//! soon as another waits, what llama-swap does) in the same run, each a
//! fresh process per round, their order rotating by round:
//!
//! 1. **steady**: one client per model, `STEADY_TURNS` short turns each back
//!    to back: turns per minute, and loads per turn;
//! 2. **lone**: three clients keep SmolLM2 busy; once each has had a turn,
//!    one request asks Gemma: the time until it is answered (the busy
//!    clients stop then, or at `LONE_CAP`);
//! 3. **bursty**: one client keeps SmolLM2 busy for `BURSTY_SPAN` while
//!    bursts of `BURST` requests ask Gemma every `BURST_EVERY`: the longest
//!    any request waited for its answer, and the loads;
//! 4. **three models**: a third id for SmolLM2's file (another resident,
//!    another child), one client per model, `STEADY_TURNS` each back to
//!    back: turns per minute, loads per turn, and the longest wait.
//!
//! Targets (the issue's): turns per minute at least 2x the baseline when
//! switches dominate (steady); at most one load per 4 turns (steady); no
//! request waits longer than the starvation limit plus one switch (lone,
//! bursty). Loads are the warden's own count
//! (`warden_load_duration_seconds_count` in `/metrics`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use serde_json::json;
use tokio::time::Instant;

use crate::Setup;
use crate::client::{self, Target};
use crate::procs::WardenProc;
use crate::report::{Line, Raw};
use crate::stats;

/// The model the busy clients use is the given one; the other is Gemma.
const OTHER: &str = "gemma-3-270m-q4_k_m.gguf";

/// Turns per client in the steady case.
const STEADY_TURNS: usize = 8;

/// Tokens of a short turn, and of a busy client's turn.
const SHORT_TOKENS: u32 = 8;
const BUSY_TOKENS: u32 = 24;

/// The longest the busy clients run in the lone case if the lone request
/// is not answered (then it counts as waiting that long).
const LONE_CAP: Duration = Duration::from_secs(90);

/// The bursty case: how long the busy client runs, and the bursts.
const BURSTY_SPAN: Duration = Duration::from_secs(12);
const BURST: usize = 3;
const BURST_EVERY: Duration = Duration::from_secs(3);

/// The warden's default starvation limit, ms (`law::schedule`).
const STARVATION_LIMIT_MS: f64 = 30_000.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Weighed,
    Arrival,
}

impl Side {
    fn tag(self) -> &'static str {
        match self {
            Side::Weighed => "weighed",
            Side::Arrival => "arrival",
        }
    }
}

/// A catalog id: the file name without `.gguf`.
fn id(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
        .unwrap_or_default()
}

fn body(model: &str, n: usize, tokens: u32) -> Bytes {
    let v = json!({"model": model, "messages": [{"role": "user", "content": format!("Count to ten, number {n}.")}],
        "max_tokens": tokens, "ignore_eos": true, "temperature": 0, "seed": 42, "stream": true});
    Bytes::from(v.to_string())
}

/// One turn: sent to its end, ms.
async fn turn(http: &reqwest::Client, to: &Target, model: &str, n: usize, tokens: u32) -> anyhow::Result<f64> {
    let t = client::stream(http, to, body(model, n, tokens)).await?;
    t.whole_ms().context("the turn did not end")
}

/// A series of the warden's `/metrics`.
async fn series(http: &reqwest::Client, w: &WardenProc, name: &str) -> anyhow::Result<f64> {
    let text = http
        .get(format!("{}/metrics", w.base))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let line = text
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .with_context(|| format!("no {name} in /metrics"))?;
    Ok(line.rsplit(' ').next().unwrap_or("").parse()?)
}

/// The warden's loads so far.
async fn loads(http: &reqwest::Client, w: &WardenProc) -> anyhow::Result<u64> {
    Ok(series(http, w, "warden_load_duration_seconds_count").await? as u64)
}

/// One switch as this warden measured it: two loads of its average, ms.
async fn switch_ms(http: &reqwest::Client, w: &WardenProc) -> anyhow::Result<f64> {
    let (sum, n) = (
        series(http, w, "warden_load_duration_seconds_sum").await?,
        series(http, w, "warden_load_duration_seconds_count").await?,
    );
    Ok(2.0 * 1000.0 * sum / n.max(1.0))
}

/// One side's round.
#[derive(Debug, Default, Clone, Copy)]
struct Round {
    steady_turns_per_min: f64,
    steady_loads: u64,
    lone_ms: f64,
    lone_busy_turns: usize,
    bursty_worst_ms: f64,
    bursty_loads: u64,
    bursty_turns: usize,
    switch_ms: f64,
    three_turns_per_min: f64,
    three_loads: u64,
    three_worst_ms: f64,
}

/// One client per model in `models`, `STEADY_TURNS` each back to back:
/// (turns per minute, loads, the longest turn).
async fn steady_over(http: &reqwest::Client, w: &WardenProc, models: &[String]) -> anyhow::Result<(f64, u64, f64)> {
    let before = loads(http, w).await?;
    let start = Instant::now();
    let mut clients = Vec::new();
    for m in models {
        let (http, to, model) = (http.clone(), w.target(), m.clone());
        clients.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            for i in 0..STEADY_TURNS {
                waits.push(turn(&http, &to, &model, i, SHORT_TOKENS).await?);
            }
            anyhow::Ok(waits)
        }));
    }
    let mut waits = Vec::new();
    for c in clients {
        waits.extend(c.await.context("a client panicked")??);
    }
    let wall = start.elapsed().as_secs_f64();
    Ok((
        waits.len() as f64 / wall * 60.0,
        loads(http, w).await? - before,
        stats::max(&waits),
    ))
}

async fn lone(http: &reqwest::Client, w: &WardenProc, main: &str, other: &str) -> anyhow::Result<(f64, usize)> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut busy = Vec::new();
    for c in 0..3 {
        let (http, to, model, stop, done) = (http.clone(), w.target(), main.to_string(), stop.clone(), done.clone());
        busy.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Acquire) {
                turn(&http, &to, &model, 100 * c + i, BUSY_TOKENS).await?;
                done.fetch_add(1, Ordering::AcqRel);
                i += 1;
            }
            anyhow::Ok(())
        }));
    }
    let ready = Instant::now();
    while done.load(Ordering::Acquire) < 3 {
        anyhow::ensure!(ready.elapsed() < LONE_CAP, "the busy clients did not get going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let at = done.load(Ordering::Acquire);
    let lone = tokio::time::timeout(LONE_CAP, turn(http, &w.target(), other, 0, SHORT_TOKENS)).await;
    let during = done.load(Ordering::Acquire) - at;
    stop.store(true, Ordering::Release);
    for b in busy {
        b.await.context("a busy client panicked")??;
    }
    let ms = match lone {
        Ok(r) => r.context("the lone request")?,
        Err(_) => LONE_CAP.as_secs_f64() * 1000.0,
    };
    Ok((ms, during))
}

async fn bursty(http: &reqwest::Client, w: &WardenProc, main: &str, other: &str) -> anyhow::Result<(f64, u64, usize)> {
    let before = loads(http, w).await?;
    let start = Instant::now();
    let steady = {
        let (http, to, model) = (http.clone(), w.target(), main.to_string());
        tokio::spawn(async move {
            let mut waits = Vec::new();
            let mut i = 0;
            while start.elapsed() < BURSTY_SPAN {
                waits.push(turn(&http, &to, &model, i, BUSY_TOKENS).await?);
                i += 1;
            }
            anyhow::Ok(waits)
        })
    };
    let mut bursts = Vec::new();
    let mut n = 0;
    while start.elapsed() + BURST_EVERY <= BURSTY_SPAN {
        for _ in 0..BURST {
            let (http, to, model) = (http.clone(), w.target(), other.to_string());
            n += 1;
            bursts.push(tokio::spawn(async move {
                turn(&http, &to, &model, 1000 + n, SHORT_TOKENS).await
            }));
        }
        tokio::time::sleep(BURST_EVERY).await;
    }
    let mut waits = steady.await.context("the steady client panicked")??;
    for b in bursts {
        waits.push(b.await.context("a burst request panicked")??);
    }
    Ok((stats::max(&waits), loads(http, w).await? - before, waits.len()))
}

async fn round(http: &reqwest::Client, w: &WardenProc, main: &str, other: &str) -> anyhow::Result<Round> {
    let two = [main.to_string(), other.to_string()];
    let (steady_turns_per_min, steady_loads, _) = steady_over(http, w, &two).await.context("steady")?;
    let (lone_ms, lone_busy_turns) = lone(http, w, main, other).await.context("lone")?;
    let (bursty_worst_ms, bursty_loads, bursty_turns) = bursty(http, w, main, other).await.context("bursty")?;
    let switch_ms = switch_ms(http, w).await?;
    Ok(Round {
        switch_ms,
        three_turns_per_min: 0.0,
        three_loads: 0,
        three_worst_ms: 0.0,
        steady_turns_per_min,
        steady_loads,
        lone_ms,
        lone_busy_turns,
        bursty_worst_ms,
        bursty_loads,
        bursty_turns,
    })
}

fn models(given: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let other = given.with_file_name(OTHER);
    for p in [given, &other] {
        anyhow::ensure!(p.is_file(), "{} is missing (./build-llama.sh fetches it)", p.display());
    }
    Ok((given.to_path_buf(), other))
}

/// Runs the phase.
pub async fn run(http: &reqwest::Client, setup: &Setup, rounds: usize, raw: &mut Raw) -> anyhow::Result<Vec<Line>> {
    let (main_p, other_p) = models(&setup.model)?;
    let (main, other) = (id(&main_p), id(&other_p));
    // The three models: the two files, and SmolLM2's again under an id of
    // its own (another resident, another child).
    let catalog = tempfile::tempdir()?;
    let third = format!("{main}-b");
    for (name, file) in [(&main, &main_p), (&other, &other_p), (&third, &main_p)] {
        std::os::unix::fs::symlink(file, catalog.path().join(format!("{name}.gguf")))?;
    }
    let dir_arg = catalog.path().to_string_lossy().into_owned();
    let main_in = catalog.path().join(format!("{main}.gguf"));
    let mut got: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        let order = if r % 2 == 0 {
            [Side::Weighed, Side::Arrival]
        } else {
            [Side::Arrival, Side::Weighed]
        };
        for side in order {
            let dir = tempfile::tempdir()?;
            let kv = dir.path().to_string_lossy().into_owned();
            let envs = [
                ("WARDEN_MAX_RESIDENT", "1"),
                ("WARDEN_SCHEDULE", side.tag()),
                ("WARDEN_KV_SAVE_DIR", kv.as_str()),
            ];
            let args = ["--models-dir", dir_arg.as_str()];
            let w = WardenProc::spawn_with(&setup.warden_bin, &setup.server, &main_in, true, &envs, &args).await?;
            w.wait_ready(http).await?;
            let got_round = async {
                let mut x = round(http, &w, &main, &other).await?;
                let three = [main.clone(), other.clone(), third.clone()];
                (x.three_turns_per_min, x.three_loads, x.three_worst_ms) =
                    steady_over(http, &w, &three).await.context("three models")?;
                anyhow::Ok(x)
            }
            .await
            .with_context(|| format!("{}, round {r}", side.tag()));
            if got_round.is_err() {
                // What the warden said before it failed: the log names the
                // waits, yields and refusals.
                let log = w.log.lock().unwrap();
                for (_, l) in log.iter().rev().take(80).collect::<Vec<_>>().into_iter().rev() {
                    eprintln!("  warden: {l}");
                }
            }
            w.stop().await;
            let x = got_round?;
            eprintln!(
                "  contention round {r} {}: steady {:.0} turns/min, {} loads for {} turns; lone answered in {:.0} ms ({} busy turns meanwhile); bursty worst wait {:.0} ms, {} loads for {} turns",
                side.tag(),
                x.steady_turns_per_min,
                x.steady_loads,
                2 * STEADY_TURNS,
                x.lone_ms,
                x.lone_busy_turns,
                x.bursty_worst_ms,
                x.bursty_loads,
                x.bursty_turns
            );
            let tag = side.tag();
            raw.push(
                "contention",
                r,
                tag,
                "steady_turns_per_min",
                Some(x.steady_turns_per_min),
            );
            raw.push("contention", r, tag, "steady_loads", Some(x.steady_loads as f64));
            raw.push("contention", r, tag, "lone_ms", Some(x.lone_ms));
            raw.push("contention", r, tag, "bursty_worst_ms", Some(x.bursty_worst_ms));
            raw.push("contention", r, tag, "bursty_loads", Some(x.bursty_loads as f64));
            raw.push("contention", r, tag, "three_turns_per_min", Some(x.three_turns_per_min));
            raw.push("contention", r, tag, "three_loads", Some(x.three_loads as f64));
            raw.push("contention", r, tag, "three_worst_ms", Some(x.three_worst_ms));
            eprintln!(
                "  contention round {r} {tag}: three models {:.0} turns/min, {} loads for {} turns, worst wait {:.0} ms",
                x.three_turns_per_min,
                x.three_loads,
                3 * STEADY_TURNS,
                x.three_worst_ms
            );
            got[(side == Side::Arrival) as usize].push(x);
        }
    }
    Ok(lines(&main, &other, &got[0], &got[1]))
}

fn lines(main: &str, other: &str, weighed: &[Round], arrival: &[Round]) -> Vec<Line> {
    let of = |v: &[Round], f: fn(&Round) -> f64| v.iter().map(f).collect::<Vec<f64>>();
    // Scheduler over baseline, round by round.
    let ratio = |f: fn(&Round) -> f64| {
        weighed
            .iter()
            .zip(arrival)
            .map(|(w, a)| f(w) / f(a))
            .collect::<Vec<f64>>()
    };
    let tpm = (
        of(weighed, |r| r.steady_turns_per_min),
        of(arrival, |r| r.steady_turns_per_min),
    );
    let ratios = ratio(|r| r.steady_turns_per_min);
    let three = ratio(|r| r.three_turns_per_min);
    let per_turn = |v: &[Round]| of(v, |r| r.steady_loads as f64 / (2 * STEADY_TURNS) as f64);
    let three_per_turn = |v: &[Round]| of(v, |r| r.three_loads as f64 / (3 * STEADY_TURNS) as f64);
    let lone = (of(weighed, |r| r.lone_ms), of(arrival, |r| r.lone_ms));
    let worst = (of(weighed, |r| r.bursty_worst_ms), of(arrival, |r| r.bursty_worst_ms));
    // The starvation limit and one switch (two loads, as measured).
    let bound = STARVATION_LIMIT_MS + stats::max(&of(weighed, |r| r.switch_ms));
    let setting = format!("{main} and {other}, one resident");
    vec![
        Line::new(
            &format!("contention steady: turns per minute, one client per model back to back ({setting})"),
            format!("first come, first served: {:.0}", stats::median(&tpm.1)),
            format!("scheduler: {:.0}", stats::median(&tpm.0)),
            format!("{:.2}x", stats::median(&ratios)),
            stats::spread(&ratios, 2),
            ">= 2x when switches dominate",
            Some(stats::min(&ratios) >= 2.0),
        ),
        Line::new(
            &format!("contention steady: loads per turn ({setting})"),
            format!("first come, first served: {:.2}", stats::median(&per_turn(arrival))),
            format!("scheduler: {:.2}", stats::median(&per_turn(weighed))),
            format!("{:.2}", stats::max(&per_turn(weighed))),
            stats::spread(&per_turn(weighed), 2),
            "<= 0.25 (one load per 4 turns), every round",
            Some(stats::max(&per_turn(weighed)) <= 0.25),
        ),
        Line::new(
            &format!("contention lone: a request for {other} beside three busy {main} clients, answered in (ms)"),
            format!("first come, first served: {:.0}", stats::median(&lone.1)),
            format!("scheduler: {:.0}", stats::median(&lone.0)),
            format!("{:.0} worst", stats::max(&lone.0)),
            stats::spread(&lone.0, 0),
            "<= the starvation limit + one switch (lone, bursty)",
            Some(stats::max(&lone.0) <= bound),
        ),
        Line::new(
            &format!(
                "contention bursty: the longest wait of any request, bursts of {BURST} for {other} beside a busy {main} (ms)"
            ),
            format!("first come, first served: {:.0}", stats::median(&worst.1)),
            format!("scheduler: {:.0}", stats::median(&worst.0)),
            format!("{:.0} worst", stats::max(&worst.0)),
            stats::spread(&worst.0, 0),
            "<= the starvation limit + one switch",
            Some(stats::max(&worst.0) <= bound),
        ),
        Line::new(
            &format!(
                "contention three models: turns per minute, one client per model back to back ({main}, {other} and {main}-b, one resident)"
            ),
            format!(
                "first come, first served: {:.0}",
                stats::median(&of(arrival, |r| r.three_turns_per_min))
            ),
            format!(
                "scheduler: {:.0}",
                stats::median(&of(weighed, |r| r.three_turns_per_min))
            ),
            format!("{:.2}x", stats::median(&three)),
            stats::spread(&three, 2),
            ">= 2x when switches dominate",
            Some(stats::min(&three) >= 2.0),
        ),
        Line::new(
            "contention three models: loads per turn, and the longest wait (ms)",
            format!(
                "first come, first served: {:.2}, {:.0} ms",
                stats::median(&three_per_turn(arrival)),
                stats::median(&of(arrival, |r| r.three_worst_ms))
            ),
            format!(
                "scheduler: {:.2}, {:.0} ms",
                stats::median(&three_per_turn(weighed)),
                stats::median(&of(weighed, |r| r.three_worst_ms))
            ),
            format!("{:.0} ms worst", stats::max(&of(weighed, |r| r.three_worst_ms))),
            "-".into(),
            "<= 0.25 loads per turn; no wait over the starvation limit + one switch",
            Some(
                stats::max(&three_per_turn(weighed)) <= 0.25 && stats::max(&of(weighed, |r| r.three_worst_ms)) <= bound,
            ),
        ),
        Line::new(
            &format!("contention bursty: loads ({setting})"),
            format!(
                "first come, first served: {:.0}",
                stats::median(&of(arrival, |r| r.bursty_loads as f64))
            ),
            format!(
                "scheduler: {:.0}",
                stats::median(&of(weighed, |r| r.bursty_loads as f64))
            ),
            "-".into(),
            "-".into(),
            "(info)",
            None,
        ),
    ]
}
