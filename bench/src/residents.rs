//! The residents phase: what keeping several models resident buys, against
//! today's one-model switch, on the default models (SmolLM2, Gemma 3 270M,
//! all-MiniLM-L6-v2 beside the given one).
//!
//! 1. **A switch between models.** A conversation of about 1,000 tokens on
//!    SmolLM2; its next turn with nothing in between (warm); a turn of
//!    Gemma; SmolLM2's next turn again: its time to first token and the
//!    prompt tokens its server read. On a warden that keeps both resident,
//!    and on one with `WARDEN_MAX_RESIDENT=1`, where each switch is today's:
//!    a stop (the KV saved), a load and a KV restore. As milliseconds and as
//!    a ratio to the same warden's warm turn. Target: the resident switch
//!    costs at most 1.5x a warm turn (both models warm, nothing is read
//!    again but the new message).
//! 2. **Chat beside an embedding batch.** SmolLM2's time to first token
//!    alone, and while MiniLM embeds batches of 64 sentences back to back
//!    on the same cores (reported: the two children share the CPU; it is
//!    what a RAG application doing both sees).
//! 3. **The warden's own memory with three residents.** Its `VmRSS` with
//!    SmolLM2 alone and with all three resident (its own threads and
//!    buffers; the children's memory is theirs).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::Setup;
use crate::client::{self, Target};
use crate::procs::WardenProc;
use crate::report::{Line, Raw};
use crate::stats;

/// The chat model switched away to, and the embedding model.
const OTHER: &str = "gemma-3-270m-q4_k_m.gguf";
const EMBEDDER: &str = "all-MiniLM-L6-v2.F16.gguf";

/// A catalog id: the file name without `.gguf`.
fn id(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
        .unwrap_or_default()
}

fn facts(n: usize) -> String {
    (0..n)
        .map(|i| format!("Fact {i}: the number {i} is followed by {}.", i + 1))
        .collect::<Vec<_>>()
        .join(" ")
}

fn body(model: &str, messages: &[Value]) -> Bytes {
    let v =
        json!({"model": model, "messages": messages, "max_tokens": 8, "temperature": 0, "seed": 42, "stream": true});
    Bytes::from(v.to_string())
}

/// One streamed turn: its time to first token and the prompt tokens read.
async fn ask(http: &reqwest::Client, to: &Target, model: &str, messages: &[Value]) -> anyhow::Result<(f64, u64)> {
    let t = client::stream(http, to, body(model, messages)).await?;
    Ok((
        t.ttft_ms().context("no token came")?,
        t.prompt_n.context("no timings.prompt_n")?,
    ))
}

/// One round of the switch measure on `w`: (warm ms, after-switch ms,
/// after-switch prompt tokens).
async fn switch_round(
    http: &reqwest::Client,
    w: &WardenProc,
    main: &str,
    other: &str,
    key: &str,
) -> anyhow::Result<(f64, f64, u64)> {
    let mut to = w.target();
    to.conversation = Some(key.to_string());
    let mut m = vec![json!({"role": "user", "content": format!("{}\nWhich number follows 7?", facts(52))})];
    ask(http, &to, main, &m).await?;
    m.push(json!({"role": "assistant", "content": "8."}));
    m.push(json!({"role": "user", "content": "And 9?"}));
    let (warm, _) = ask(http, &to, main, &m).await?;
    let mut away = w.target();
    away.conversation = Some(format!("{key}-away"));
    ask(http, &away, other, &[json!({"role": "user", "content": "Say hi."})]).await?;
    m.push(json!({"role": "assistant", "content": "10."}));
    m.push(json!({"role": "user", "content": "And 11?"}));
    let (after, read) = ask(http, &to, main, &m).await?;
    Ok((warm, after, read))
}

/// Embeds batches of 64 sentences with `model` until `stop`; the count.
async fn embed_until(http: reqwest::Client, base: String, model: String, stop: Arc<AtomicBool>) -> usize {
    let input: Vec<String> = (0..64)
        .map(|i| format!("Sentence {i} of the batch says something about topic number {}.", i % 7))
        .collect();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let r = http
            .post(format!("{base}/v1/embeddings"))
            .json(&json!({"model": model, "input": input}))
            .send()
            .await;
        match r {
            Ok(r) if r.status().is_success() => {
                let _ = r.bytes().await;
                n += 1;
            }
            _ => break,
        }
    }
    n
}

/// The models of the phase, each checked present.
fn models(given: &Path) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    let (other, embedder) = (given.with_file_name(OTHER), given.with_file_name(EMBEDDER));
    for p in [given, &other, &embedder] {
        anyhow::ensure!(p.is_file(), "{} is missing (./build-llama.sh fetches it)", p.display());
    }
    Ok((given.to_path_buf(), other, embedder))
}

/// Runs the phase.
pub async fn run(http: &reqwest::Client, setup: &Setup, rounds: usize, raw: &mut Raw) -> anyhow::Result<Vec<Line>> {
    let (main_p, other_p, embed_p) = models(&setup.model)?;
    let (main, other, embedder) = (id(&main_p), id(&other_p), id(&embed_p));
    let dir = tempfile::tempdir()?;
    let kv_dir = dir.path().to_string_lossy().into_owned();
    let spawn = |envs: Vec<(&'static str, String)>| {
        let (kv_dir, main_p) = (kv_dir.clone(), main_p.clone());
        async move {
            let mut envs: Vec<(&str, String)> = envs;
            envs.push(("WARDEN_KV_SAVE_DIR", kv_dir));
            let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let w = WardenProc::spawn(&setup.warden_bin, &setup.server, &main_p, true, &envs).await?;
            w.wait_ready(http).await?;
            anyhow::Ok(w)
        }
    };
    let several = spawn(vec![]).await?;
    let one = spawn(vec![("WARDEN_MAX_RESIDENT", "1".into())]).await?;
    let mut got: [Vec<(f64, f64, u64)>; 2] = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        for (i, (w, side)) in [(&several, "resident"), (&one, "one_resident")].into_iter().enumerate() {
            let key = format!("bench-residents-{r}-{side}");
            let round = switch_round(http, w, &main, &other, &key)
                .await
                .with_context(|| format!("the switch, {side}"))?;
            eprintln!(
                "  residents switch round {r} {side}: warm {:.0} ms, after a turn of {other} {:.0} ms ({} prompt tokens read)",
                round.0, round.1, round.2
            );
            raw.push("residents", r, side, "warm_ttft_ms", Some(round.0));
            raw.push("residents", r, side, "after_switch_ttft_ms", Some(round.1));
            raw.push("residents", r, side, "after_switch_prompt_tokens", Some(round.2 as f64));
            got[i].push(round);
        }
    }
    one.stop().await;
    let mut lines = vec![switch_line(&main, &other, &got[0], &got[1])];
    lines.push(beside_embedding(http, &several, &main, &embedder, rounds, raw).await?);
    lines.push(rss_line(http, &several, &other, &embedder, raw).await?);
    several.stop().await;
    Ok(lines)
}

fn switch_line(main: &str, other: &str, several: &[(f64, f64, u64)], one: &[(f64, f64, u64)]) -> Line {
    let ratios = |v: &[(f64, f64, u64)]| v.iter().map(|r| r.1 / r.0).collect::<Vec<_>>();
    let ms = |v: &[(f64, f64, u64)]| v.iter().map(|r| r.1).collect::<Vec<_>>();
    let reads = |v: &[(f64, f64, u64)]| v.iter().map(|r| r.2.to_string()).collect::<Vec<_>>().join("/");
    let (r_several, r_one) = (ratios(several), ratios(one));
    let worst = stats::max(&r_several);
    Line::new(
        &format!("time to first token of {main} after a turn of {other}, 1000-token conversation, / warm (x)"),
        format!(
            "one resident (stop, load, restore): {:.0} ms ({:.1}x), read {}",
            stats::median(&ms(one)),
            stats::median(&r_one),
            reads(one)
        ),
        format!(
            "both resident: {:.0} ms ({:.2}x), read {}",
            stats::median(&ms(several)),
            stats::median(&r_several),
            reads(several)
        ),
        format!("{:.2}x vs {:.1}x", stats::median(&r_several), stats::median(&r_one)),
        stats::spread(&r_several, 2),
        "resident <= 1.5x warm, every round",
        Some(worst <= 1.5),
    )
}

/// Chat TTFT alone and while the embedder embeds batches back to back.
async fn beside_embedding(
    http: &reqwest::Client,
    w: &WardenProc,
    main: &str,
    embedder: &str,
    rounds: usize,
    raw: &mut Raw,
) -> anyhow::Result<Line> {
    let to = w.target();
    let turn = |n: usize| vec![json!({"role": "user", "content": format!("Say hello, number {n}.")})];
    let (mut alone, mut during) = (Vec::new(), Vec::new());
    // Both resident and warm before anything is timed.
    ask(http, &to, main, &turn(0)).await?;
    let loaded = http
        .post(format!("{}/v1/embeddings", w.base))
        .json(&json!({"model": embedder, "input": "warm-up"}))
        .send()
        .await?;
    loaded.error_for_status()?.bytes().await?;
    let n = rounds.max(3) * 2;
    for i in 0..n {
        alone.push(ask(http, &to, main, &turn(i + 1)).await?.0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let batches = tokio::spawn(embed_until(
        http.clone(),
        w.base.clone(),
        embedder.to_string(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..n {
        during.push(ask(http, &to, main, &turn(100 + i)).await?.0);
    }
    stop.store(true, Ordering::Relaxed);
    let batches = batches.await.unwrap_or(0);
    for (i, (a, d)) in alone.iter().zip(&during).enumerate() {
        raw.push("residents", i, "alone", "chat_ttft_ms", Some(*a));
        raw.push("residents", i, "beside_embedding", "chat_ttft_ms", Some(*d));
    }
    eprintln!(
        "  residents: chat TTFT alone {:.0} ms, beside {batches} embedding batches {:.0} ms (medians)",
        stats::median(&alone),
        stats::median(&during)
    );
    Ok(Line::new(
        &format!("{main} time to first token while {embedder} embeds 64-sentence batches back to back (shared CPU)"),
        format!("alone: {:.0} ms", stats::median(&alone)),
        format!(
            "beside the batches: {:.0} ms ({batches} batches)",
            stats::median(&during)
        ),
        format!("{:.2}x", stats::median(&during) / stats::median(&alone)),
        stats::spread(&during, 0),
        "(info)",
        None,
    ))
}

/// `POST path {"model": m}` for each of `models`, in turn.
async fn each(http: &reqwest::Client, w: &WardenProc, path: &str, models: &[&str]) -> anyhow::Result<()> {
    for m in models {
        http.post(format!("{}{path}", w.base))
            .json(&json!({ "model": m }))
            .send()
            .await?
            .error_for_status()?;
    }
    Ok(())
}

/// The warden's VmRSS with its one model, then with three resident.
async fn rss_line(
    http: &reqwest::Client,
    w: &WardenProc,
    other: &str,
    embedder: &str,
    raw: &mut Raw,
) -> anyhow::Result<Line> {
    let settle = || tokio::time::sleep(Duration::from_secs(1));
    let count = |s: &Value| s["residents"].as_array().map_or(0, Vec::len);
    // Back to one: the others out.
    each(http, w, "/warden/unload", &[other, embedder]).await?;
    settle().await;
    let one = w.rss_kib().context("the warden's VmRSS")?;
    let s1 = w.status(http).await?;
    each(http, w, "/warden/load", &[other, embedder]).await?;
    settle().await;
    let three = w.rss_kib().context("the warden's VmRSS")?;
    let s3 = w.status(http).await?;
    anyhow::ensure!(
        count(&s1) == 1 && count(&s3) == 3,
        "expected one then three residents: {} then {}",
        s1["residents"],
        s3["residents"]
    );
    let mib = |k: u64| k as f64 / 1024.0;
    raw.push("residents", 0, "one", "warden_rss_mib", Some(mib(one)));
    raw.push("residents", 0, "three", "warden_rss_mib", Some(mib(three)));
    Ok(Line::new(
        "warden VmRSS with three residents (chat, chat, embedding) vs one",
        format!("one resident: {:.1} MiB", mib(one)),
        format!("three: {:.1} MiB", mib(three)),
        format!("{:+.1} MiB", mib(three) - mib(one)),
        "-".into(),
        "(info)",
        None,
    ))
}
