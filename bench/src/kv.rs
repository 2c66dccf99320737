//! The kv phase: the time to first token of a conversation's next turn
//! after an idle reap and after a switch to another conversation, on a
//! warden that keeps KV caches (`WARDEN_KV_SAVE` on) and on one that does
//! not (`WARDEN_KV_SAVE=0`), for conversations of about 1,000 and 3,000
//! tokens, each as a ratio against a warm turn (the slot already holds the
//! conversation). The reap is a `keep_alive: 0` turn (the idle reap's own
//! unload path, without waiting 300 s); the switch is one short turn of
//! another conversation in between.

use anyhow::Context;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::Setup;
use crate::client::{self, Target};
use crate::procs::WardenProc;
use crate::report::{Line, Raw};
use crate::stats;

/// Conversation sizes (SmolLM2 tokens, about 19 per fact).
const SIZES: [(usize, &str); 2] = [(52, "1000"), (158, "3000")];

/// One round's figures for one warden and size (ms).
#[derive(Debug, Clone, Default)]
pub struct Round {
    pub warm: f64,
    pub after_reap: f64,
    pub after_switch: f64,
}

fn facts(n: usize) -> String {
    (0..n)
        .map(|i| format!("Fact {i}: the number {i} is followed by {}.", i + 1))
        .collect::<Vec<_>>()
        .join(" ")
}

fn body(messages: &[Value], keep_alive: Option<u32>) -> Bytes {
    let mut v = json!({"messages": messages, "max_tokens": 8, "temperature": 0, "seed": 42, "stream": true});
    if let Some(k) = keep_alive {
        v["keep_alive"] = json!(k);
    }
    Bytes::from(v.to_string())
}

/// A turn's time to first token (ms) and its answer.
async fn ask(http: &reqwest::Client, to: &Target, messages: &[Value], keep_alive: Option<u32>) -> anyhow::Result<f64> {
    let t = client::stream(http, to, body(messages, keep_alive)).await?;
    t.ttft_ms().context("no token came")
}

async fn one(http: &reqwest::Client, w: &WardenProc, key: &str, n_facts: usize) -> anyhow::Result<Round> {
    let mut to = w.target();
    to.conversation = Some(key.to_string());
    let mut m = vec![json!({"role": "user", "content": format!("{}\nWhich number follows 7?", facts(n_facts))})];
    ask(http, &to, &m, None).await?;
    m.push(json!({"role": "assistant", "content": "8."}));
    m.push(json!({"role": "user", "content": "And 9?"}));
    let warm = ask(http, &to, &m, Some(0)).await?; // then unloaded
    // The unload runs after the answer: let it finish before the next turn
    // is timed (its time is the reap's, not the turn's).
    w.wait_unloaded(http).await?;
    m.push(json!({"role": "assistant", "content": "10."}));
    m.push(json!({"role": "user", "content": "And 11?"}));
    let after_reap = ask(http, &to, &m, None).await?;
    let mut other = w.target();
    other.conversation = Some(format!("{key}-other"));
    ask(http, &other, &[json!({"role": "user", "content": "Say hi."})], None).await?;
    m.push(json!({"role": "assistant", "content": "12."}));
    m.push(json!({"role": "user", "content": "And 13?"}));
    let after_switch = ask(http, &to, &m, None).await?;
    Ok(Round {
        warm,
        after_reap,
        after_switch,
    })
}

/// Runs the phase: `rounds` per size on each warden.
pub async fn run(http: &reqwest::Client, setup: &Setup, rounds: usize, raw: &mut Raw) -> anyhow::Result<Vec<Line>> {
    let dir = tempfile::tempdir()?;
    let kv_dir = dir.path().to_string_lossy().into_owned();
    let on = WardenProc::spawn(
        &setup.warden_bin,
        &setup.server,
        &setup.model,
        true,
        &[("WARDEN_KV_SAVE_DIR", kv_dir.as_str())],
    )
    .await?;
    on.wait_ready(http).await?;
    let off = WardenProc::spawn(
        &setup.warden_bin,
        &setup.server,
        &setup.model,
        true,
        &[("WARDEN_KV_SAVE", "0")],
    )
    .await?;
    off.wait_ready(http).await?;
    let mut lines = Vec::new();
    for (n_facts, label) in SIZES {
        let mut got: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
        for r in 0..rounds {
            for (i, (w, side)) in [(&on, "kv_on"), (&off, "kv_off")].into_iter().enumerate() {
                let key = format!("bench-{label}-{r}-{side}");
                let round = one(http, w, &key, n_facts)
                    .await
                    .with_context(|| format!("{side}, {label} tokens"))?;
                raw.push("kv", r, side, metric(label, "warm"), Some(round.warm));
                raw.push("kv", r, side, metric(label, "after_reap"), Some(round.after_reap));
                raw.push("kv", r, side, metric(label, "after_switch"), Some(round.after_switch));
                eprintln!(
                    "  kv {label} tokens round {r} {side}: warm {:.0} ms, after reap {:.0} ms, after switch {:.0} ms",
                    round.warm, round.after_reap, round.after_switch
                );
                got[i].push(round);
            }
        }
        lines.extend(summary(label, &got[0], &got[1]));
    }
    on.stop().await;
    off.stop().await;
    Ok(lines)
}

fn metric(label: &str, what: &str) -> &'static str {
    match (label, what) {
        ("1000", "warm") => "kv1000_warm_ttft_ms",
        ("1000", "after_reap") => "kv1000_after_reap_ttft_ms",
        ("1000", _) => "kv1000_after_switch_ttft_ms",
        (_, "warm") => "kv3000_warm_ttft_ms",
        (_, "after_reap") => "kv3000_after_reap_ttft_ms",
        _ => "kv3000_after_switch_ttft_ms",
    }
}

/// The report's lines for one size: each interruption's TTFT with and
/// without the restore, as ratios against the warm turn of the same warden.
fn summary(label: &str, on: &[Round], off: &[Round]) -> Vec<Line> {
    let ratio = |rs: &[Round], f: fn(&Round) -> f64| {
        let v: Vec<f64> = rs.iter().map(|r| f(r) / r.warm).collect();
        (stats::median(&v), stats::spread(&v, 1))
    };
    let ms = |rs: &[Round], f: fn(&Round) -> f64| stats::median(&rs.iter().map(f).collect::<Vec<_>>());
    let mut out = Vec::new();
    for (what, f) in [
        ("an idle reap", (|r: &Round| r.after_reap) as fn(&Round) -> f64),
        ("a switch to another conversation", |r: &Round| r.after_switch),
    ] {
        let (r_on, s_on) = ratio(on, f);
        let (r_off, _) = ratio(off, f);
        out.push(Line::new(
            &format!("time to first token after {what}, {label}-token conversation, / warm (x)"),
            format!("no restore: {:.0} ms ({r_off:.1}x)", ms(off, f)),
            format!("restored: {:.0} ms ({r_on:.1}x)", ms(on, f)),
            format!("{r_on:.1}x vs {r_off:.1}x"),
            s_on,
            "(info)",
            None,
        ));
    }
    out
}
