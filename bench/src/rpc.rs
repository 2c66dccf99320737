//! The rpc phase: what splitting a model over llama.cpp RPC workers costs.
//! Two `llm-warden worker`s on loopback (this machine's cores, so the
//! figure is the protocol's and the extra hops' cost, not a second
//! machine's gain), a warden over them and a warden alone, interleaved turn
//! by turn in one run: decode tok/s and time to first token as ratios of
//! split over alone. Then one worker is killed mid-stream and the time until
//! the turn's `worker_lost` is measured.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

use crate::Setup;
use crate::client::{self, Target};
use crate::procs::{Proc, WardenProc, free_port};
use crate::report::{Line, Raw};
use crate::stats;

/// The prompt of every turn.
const PROMPT: &str = "Write a short story about a lighthouse keeper.";
/// The workers' key (loopback only, for the run's life).
const KEY: &str = "warden-bench-worker-key";

/// One `llm-warden worker`.
struct WorkerProc {
    proc: Proc,
    addr: String,
}

impl WorkerProc {
    async fn spawn(bin: &std::path::Path) -> anyhow::Result<Self> {
        let mut cmd = Command::new(bin);
        cmd.args(["worker", "--port", "0", "--rpc-port", &free_port()?.to_string()])
            .env("WARDEN_WORKER_KEY", KEY)
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut proc = Proc::spawn(cmd, libc::SIGTERM)?;
        let mut lines = tokio::io::BufReader::new(proc.child.stdout.take().expect("piped")).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(l)) = lines.next_line().await {
                if let Some(u) = l.strip_prefix("llm-warden worker listening on ") {
                    return Some(u.trim().to_string());
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .context("the worker did not start listening")?;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches(llm_warden::rpc::status::STATUS_PATH)
            .to_string();
        Ok(Self { proc, addr })
    }

    async fn wait_up(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = format!("http://{}{}", self.addr, llm_warden::rpc::status::STATUS_PATH);
        loop {
            let s: serde_json::Value = http.get(&url).bearer_auth(KEY).send().await?.json().await?;
            if s["rpc"]["up"] == true {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("worker {}: rpc-server not up after 30 s: {s}", self.addr);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One turn's figures: `(ttft ms, decode tok/s)`.
async fn turn(http: &reqwest::Client, to: &Target, max_tokens: u32) -> anyhow::Result<(f64, f64)> {
    let t = client::stream(http, to, client::body(PROMPT, max_tokens, true)).await?;
    Ok((
        t.ttft_ms().context("no token")?,
        t.client_tps().context("too few tokens")?,
    ))
}

/// Streams a long turn, kills `victim` after the tenth event, and returns
/// the milliseconds from the kill to the turn's `worker_lost` event.
async fn lost_after_kill(http: &reqwest::Client, to: &Target, victim: &mut WorkerProc) -> anyhow::Result<f64> {
    let resp = http
        .post(format!("{}/v1/chat/completions", to.base))
        .body(client::body(PROMPT, 4000, true))
        .header("Content-Type", "application/json")
        .send()
        .await?;
    let mut body = resp.bytes_stream();
    let (mut text, mut events, mut killed) = (String::new(), 0, None::<Instant>);
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), body.next()).await? {
        text.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(end) = text.find("\n\n") {
            let ev: String = text.drain(..end + 2).collect();
            if ev.contains("\"code\":\"worker_lost\"") {
                let k = killed.context("worker_lost before the kill")?;
                return Ok(client::ms(k.elapsed()));
            }
            if ev.starts_with("data: ") {
                events += 1;
            }
            if events == 10 && killed.is_none() {
                // SAFETY: kill(2) on our own child.
                unsafe { libc::kill(victim.proc.pid as i32, libc::SIGKILL) };
                killed = Some(Instant::now());
            }
        }
    }
    bail!("the stream ended without worker_lost")
}

/// Runs the phase: `rounds` interleaved turns per warden.
pub async fn run(
    http: &reqwest::Client,
    setup: &Setup,
    rounds: usize,
    max_tokens: u32,
    raw: &mut Raw,
) -> anyhow::Result<Vec<Line>> {
    let mut workers = Vec::new();
    for _ in 0..2 {
        let w = WorkerProc::spawn(&setup.warden_bin).await?;
        w.wait_up(http).await?;
        workers.push(w);
    }
    let addrs = workers.iter().map(|w| w.addr.as_str()).collect::<Vec<_>>().join(",");
    let alone = WardenProc::spawn(&setup.warden_bin, &setup.server, &setup.model, true, &[]).await?;
    alone.wait_ready(http).await?;
    let split = WardenProc::spawn(
        &setup.warden_bin,
        &setup.server,
        &setup.model,
        true,
        // Resuming off: the phase times the loss's own error (a resumed
        // turn would go on without the worker instead).
        &[
            ("WARDEN_WORKERS", addrs.as_str()),
            ("WARDEN_WORKER_KEY", KEY),
            ("WARDEN_RESUME_TURNS", "0"),
        ],
    )
    .await?;
    let s = split.wait_ready(http).await?;
    let devices = s["workers"]["split"]["split"]["shares"].as_array().map_or(0, Vec::len);
    if devices != 3 {
        bail!("the split warden did not split over both workers: {s}");
    }
    let (mut ttft, mut tps) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    // A warm-up turn each, then the measured ones, alternating who goes first.
    for w in [&alone, &split] {
        turn(http, &w.target(), 16).await?;
    }
    for r in 0..rounds {
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (w, side) = if i == 0 { (&alone, "alone") } else { (&split, "split") };
            let (t, d) = turn(http, &w.target(), max_tokens)
                .await
                .with_context(|| side.to_string())?;
            raw.push("rpc", r, side, "ttft_ms", Some(t));
            raw.push("rpc", r, side, "decode_tps", Some(d));
            eprintln!("  rpc round {r} {side}: ttft {t:.1} ms, decode {d:.1} tok/s");
            ttft[i].push(t);
            tps[i].push(d);
        }
    }
    let lost_ms = lost_after_kill(http, &split.target(), &mut workers[1]).await?;
    raw.push("rpc", 0, "split", "worker_lost_ms", Some(lost_ms));
    eprintln!("  rpc: worker_lost {lost_ms:.0} ms after the kill");
    alone.stop().await;
    split.stop().await;
    for mut w in workers {
        w.proc.stop(Duration::from_secs(5)).await;
    }
    Ok(lines(&tps, &ttft, lost_ms))
}

/// The table lines: the split's decode and TTFT against alone's
/// (`[alone, split]` per round), and the kill's `worker_lost` time.
fn lines(tps: &[Vec<f64>; 2], ttft: &[Vec<f64>; 2], lost_ms: f64) -> Vec<Line> {
    let ratios = |a: &[f64], b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(x, y)| y / x).collect() };
    let decode = ratios(&tps[0], &tps[1]);
    let first = ratios(&ttft[0], &ttft[1]);
    vec![
        Line::new(
            "decode tok/s, local + 2 loopback workers / local alone (x)",
            format!("alone: {:.1} tok/s", stats::median(&tps[0])),
            format!("split: {:.1} tok/s", stats::median(&tps[1])),
            format!("{:.2}x", stats::median(&decode)),
            stats::spread(&decode, 2),
            "(info: the split's cost)",
            None,
        ),
        Line::new(
            "time to first token, local + 2 loopback workers / local alone (x)",
            format!("alone: {:.1} ms", stats::median(&ttft[0])),
            format!("split: {:.1} ms", stats::median(&ttft[1])),
            format!("{:.2}x", stats::median(&first)),
            stats::spread(&first, 2),
            "(info: the split's cost)",
            None,
        ),
        Line::new(
            "worker killed mid-stream: kill to the turn's worker_lost (ms)",
            "-".into(),
            format!("{lost_ms:.0} ms"),
            format!("{lost_ms:.0} ms"),
            "-".into(),
            "(info)",
            None,
        ),
    ]
}
