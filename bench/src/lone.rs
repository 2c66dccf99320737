//! The lone phase (#43): one person having one conversation after another.
//! N conversations of about M tokens each end (a long first message and
//! an answer of `ANSWER_TOKENS`); the person reads the last answer
//! (`READ_PAUSE`); then `LONE_STREAMS` new questions stream
//! `LONE_TOKENS` alone, one after another (the median by decode rate is
//! the sample); then the first conversation comes back with one
//! more message. Three sides, each a fresh process per round, their order
//! rotating by round, never two at once:
//!
//! - llama-server with one slot (`-np 1 --cache-ram 0`): what a lone
//!   stream decodes at when nothing else shares its pool;
//! - llama-server with its own defaults (`-c WINDOW` only: 4 slots over one
//!   pool, idle slots saved to its host-memory prompt cache and cleared
//!   when a new task starts);
//! - the warden with its defaults (4 slots over one pool, idle
//!   conversations moved to its KV store on disk when `law::compact` says
//!   they cost the turns ahead more than a move), its store in a directory
//!   of its own per run.
//!
//! Per configuration: the lone stream's decode rate (the child's own
//! `timings.predicted_per_second`) and first token; the returning
//! conversation's first token and the prompt tokens the child re-read
//! (`timings.prompt_n`); the child's `VmRSS` after the return. Targets:
//! lone decode >= 0.99x one slot and >= llama-server's defaults (0.99x: two
//! identical llama-servers differ by a few %, the `aa` phase), a return
//! re-reads <= 64 tokens with its first token <= 1.1x the defaults'.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::Setup;
use crate::client::{self, Target, Turn};
use crate::procs::{self, Direct, WardenProc};
use crate::report::{Line, Raw};
use crate::stats;

/// (conversations, tokens each): one long one, a few, and more than the
/// slots, covering the range (N 1 to 7, M 500 to 4,000).
const CONFIGS: [(usize, usize); 3] = [(1, 4000), (3, 2000), (7, 500)];

/// SmolLM2 tokens per fact of the conversations' first message.
const FACT_TOKENS: usize = 19;

/// Each conversation's answer: about what a chat answer of a small model
/// runs.
pub(crate) const ANSWER_TOKENS: u32 = 128;

/// The lone stream's answer.
pub(crate) const LONE_TOKENS: u32 = 256;

/// Lone streams per sample: the first right after the held conversations
/// ended, the others after the one before it (each beside whatever its
/// server still holds then).
const LONE_STREAMS: usize = 3;

/// The pause before the first lone stream, every side alike: the person
/// reads the last answer before asking something new. Longer than the
/// warden's save ahead (`WARDEN_KV_SAVE_AHEAD_S`, 2 s), which writes the
/// held conversations while nobody waits; llama-server saves its idle
/// slots to its host cache only when the new task starts, pause or not.
pub(crate) const READ_PAUSE: Duration = Duration::from_secs(3);

/// The most prompt tokens a return may re-read (the target).
const RETURN_REREAD_MAX: u64 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    OneSlot,
    Defaults,
    Warden,
}

impl Side {
    pub(crate) const ALL: [Side; 3] = [Side::OneSlot, Side::Defaults, Side::Warden];

    pub(crate) fn tag(self) -> &'static str {
        match self {
            Side::OneSlot => "one_slot",
            Side::Defaults => "defaults",
            Side::Warden => "warden",
        }
    }
}

/// What one side did in one round of one configuration.
#[derive(Debug, Clone)]
struct Sample {
    /// The median lone stream by decode rate.
    lone: Turn,
    /// The first lone stream: the one beside the held conversations, which
    /// pays for any move before its first token.
    first: Turn,
    ret: Turn,
    child_kib: Option<u64>,
}

/// A server of one side, started fresh.
pub(crate) enum Server {
    Direct(Direct),
    Warden(WardenProc, tempfile::TempDir),
}

impl Server {
    pub(crate) async fn start(http: &reqwest::Client, setup: &Setup, side: Side, window: u32) -> anyhow::Result<Self> {
        let s = setup;
        Ok(match side {
            Side::Warden => {
                let dir = tempfile::tempdir()?;
                let kv = dir.path().to_string_lossy().into_owned();
                let w =
                    WardenProc::spawn(&s.warden_bin, &s.server, &s.model, true, &[("WARDEN_KV_SAVE_DIR", &kv)]).await?;
                w.wait_ready(http).await?;
                Server::Warden(w, dir)
            }
            Side::OneSlot | Side::Defaults => {
                let flags: &[&str] = if side == Side::OneSlot {
                    &["-np", "1", "--cache-ram", "0"]
                } else {
                    &[]
                };
                let id = if s.model_id.is_empty() { "model" } else { &s.model_id };
                let mut d = Direct::spawn_plain(&s.server, &s.model, id, window, flags)?;
                d.wait_healthy(http, Duration::from_millis(5)).await?;
                procs::register(d.proc.pid);
                Server::Direct(d)
            }
        })
    }

    pub(crate) fn target(&self, conversation: String) -> Target {
        match self {
            Server::Direct(d) => d.target(),
            Server::Warden(w, _) => Target {
                conversation: Some(conversation),
                ..w.target()
            },
        }
    }

    async fn child_kib(&self, http: &reqwest::Client) -> Option<u64> {
        let pid = match self {
            Server::Direct(d) => d.proc.pid,
            Server::Warden(w, _) => w.status(http).await.ok()?["child_pid"].as_u64()? as u32,
        };
        procs::rss_kib(pid)
    }

    pub(crate) async fn stop(self) {
        match self {
            Server::Direct(d) => {
                d.stop().await;
            }
            Server::Warden(w, _dir) => {
                w.stop().await;
            }
        }
    }
}

/// The first message of conversation `i`: about `tokens` tokens of facts
/// of its own, and a question.
pub(crate) fn opening(i: usize, tokens: usize) -> String {
    let base = i * 100_000;
    let facts: Vec<String> = (0..tokens / FACT_TOKENS)
        .map(|k| format!("Fact {k}: the number {} is followed by {}.", base + k, base + k + 1))
        .collect();
    format!("{} Tell me what these facts have in common.", facts.join(" "))
}

pub(crate) fn body(messages: &[Value], max_tokens: u32, stream: bool) -> Bytes {
    let v = json!({
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 42,
        "ignore_eos": true,
        "stream": stream,
    });
    Bytes::from(v.to_string())
}

/// Holds `n` conversations of about `m` tokens on `server`, one after
/// another (`key(i)` names conversation `i`), and hands back the first
/// one's messages so far (its question and answer), for its return.
pub(crate) async fn hold(
    http: &reqwest::Client,
    server: &Server,
    key: &dyn Fn(&str) -> String,
    (n, m): (usize, usize),
) -> anyhow::Result<Vec<Value>> {
    let mut first = Vec::new();
    for i in 0..n {
        let user = json!({"role": "user", "content": opening(i, m)});
        let reply = client::whole(
            http,
            &server.target(key(&i.to_string())),
            body(std::slice::from_ref(&user), ANSWER_TOKENS, false),
        )
        .await?;
        let v: Value = serde_json::from_slice(&reply)?;
        let answer = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .context("a conversation's answer has no content")?
            .to_string();
        if i == 0 {
            first = vec![user, json!({"role": "assistant", "content": answer})];
        }
    }
    Ok(first)
}

/// A new question for lone stream `k`: the same text on every side.
pub(crate) fn lone_question(k: usize) -> [Value; 1] {
    [json!({"role": "user", "content": format!("Write a long story about lighthouse keeper number {k} and the sea.")})]
}

/// One side, one round, one configuration: the conversations, the lone
/// stream, the return.
async fn one(
    http: &reqwest::Client,
    setup: &Setup,
    side: Side,
    window: u32,
    (n, m): (usize, usize),
    round: usize,
) -> anyhow::Result<Sample> {
    let server = Server::start(http, setup, side, window).await?;
    let key = |what: &str| format!("lone-{round}-{n}x{m}-{what}");
    let mut first = hold(http, &server, &key, (n, m)).await?;
    tokio::time::sleep(READ_PAUSE).await;
    // Lone streams one after another, each a new conversation; the sample
    // is the median one by decode rate (one stream's rate on this machine
    // moves by 10% between runs of one server).
    let mut lones = Vec::new();
    for k in 0..LONE_STREAMS {
        let lone_msg = lone_question(k);
        lones.push(
            client::stream(
                http,
                &server.target(key(&format!("lone{k}"))),
                body(&lone_msg, LONE_TOKENS, true),
            )
            .await?,
        );
    }
    // The first, beside what the conversations left (taken before the sort
    // by rate, which would hand over the slowest instead).
    let first_lone = lones[0].clone();
    lones.sort_by(|a, b| {
        a.server_tps
            .partial_cmp(&b.server_tps)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let lone = lones.swap_remove(LONE_STREAMS / 2);
    first.push(json!({"role": "user", "content": "And which number follows 7?"}));
    let ret = client::stream(http, &server.target(key("0")), body(&first, 8, true)).await?;
    let child_kib = server.child_kib(http).await;
    server.stop().await;
    Ok(Sample {
        lone,
        first: first_lone,
        ret,
        child_kib,
    })
}

/// Per configuration, per side: every round's sample.
type Samples = Vec<[Vec<Sample>; 3]>;

/// The window every side runs: the warden's for this model.
pub(crate) async fn window(http: &reqwest::Client, setup: &Setup) -> anyhow::Result<u32> {
    if setup.window > 0 {
        return Ok(setup.window);
    }
    let w = WardenProc::spawn(&setup.warden_bin, &setup.server, &setup.model, true, &[]).await?;
    let s = w.wait_ready(http).await?;
    w.stop().await;
    Ok(s["context_tokens"].as_u64().context("no context_tokens")? as u32)
}

/// Runs the phase.
pub async fn run(http: &reqwest::Client, setup: &Setup, rounds: usize, raw: &mut Raw) -> anyhow::Result<Vec<Line>> {
    let window = window(http, setup).await?;
    let mut all: Samples = CONFIGS.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        for (k, &cfg) in CONFIGS.iter().enumerate() {
            for j in 0..Side::ALL.len() {
                let side = Side::ALL[(j + round) % Side::ALL.len()];
                let s = one(http, setup, side, window, cfg, round)
                    .await
                    .with_context(|| format!("{} {}x{} round {round}", side.tag(), cfg.0, cfg.1))?;
                let tag = format!("{}:{}x{}", side.tag(), cfg.0, cfg.1);
                raw.push("lone", round, tag.clone(), "lone_decode_tps", s.lone.server_tps);
                raw.push("lone", round, tag.clone(), "lone_ttft_ms", s.first.ttft_ms());
                raw.push("lone", round, tag.clone(), "return_ttft_ms", s.ret.ttft_ms());
                raw.push(
                    "lone",
                    round,
                    tag.clone(),
                    "return_prompt_n",
                    s.ret.prompt_n.map(|n| n as f64),
                );
                raw.push("lone", round, tag, "child_kib", s.child_kib.map(|k| k as f64));
                all[k][side as usize].push(s);
            }
            eprintln!("  round {round}: {}x{} done", cfg.0, cfg.1);
        }
    }
    Ok(lines(&all))
}

/// The table's lines, per configuration.
fn lines(all: &Samples) -> Vec<Line> {
    let mut out = Vec::new();
    for (sides, &(n, m)) in all.iter().zip(CONFIGS.iter()) {
        let [one, def, war] = sides;
        let name = |what: &str| format!("lone: {what}, after {n} conversation(s) of ~{m} tokens");
        let per_round = |a: &[Sample], b: &[Sample], f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<f64> {
            a.iter().zip(b).filter_map(|(x, y)| Some(f(x)? / f(y)?)).collect()
        };
        let med = |v: &[Sample], f: &dyn Fn(&Sample) -> Option<f64>| {
            stats::median(&v.iter().filter_map(f).collect::<Vec<_>>())
        };
        let decode = |s: &Sample| s.lone.server_tps;
        let r1 = per_round(war, one, &decode);
        let r1m = stats::median(&r1);
        out.push(Line::new(
            &name("lone decode (median of 3 streams) vs one slot (tok/s)"),
            format!("{:.1}", med(one, &decode)),
            format!("{:.1}", med(war, &decode)),
            format!("{r1m:.3}x"),
            stats::spread(&r1, 3),
            ">= 0.99x",
            Some(r1m >= 0.99),
        ));
        let rd = per_round(war, def, &decode);
        let rdm = stats::median(&rd);
        out.push(Line::new(
            &name("lone decode vs llama-server's defaults (tok/s)"),
            format!("{:.1}", med(def, &decode)),
            format!("{:.1}", med(war, &decode)),
            format!("{rdm:.3}x"),
            stats::spread(&rd, 3),
            ">= 0.99x",
            Some(rdm >= 0.99),
        ));
        let lone_ttft = |s: &Sample| s.first.ttft_ms();
        out.push(Line::new(
            &name("first lone stream: first token vs defaults (ms)"),
            format!("{:.0}", med(def, &lone_ttft)),
            format!("{:.0}", med(war, &lone_ttft)),
            format!("{:.2}x", stats::median(&per_round(war, def, &lone_ttft))),
            String::new(),
            "",
            None,
        ));
        // The move is paid before the first token and repaid over the
        // decode: the whole turn says whether it paid.
        let whole = |s: &Sample| s.first.whole_ms();
        out.push(Line::new(
            &name("first lone stream: whole turn (sent to [DONE]) vs one slot (ms)"),
            format!("{:.0}", med(one, &whole)),
            format!("{:.0}", med(war, &whole)),
            format!("{:.3}x", stats::median(&per_round(war, one, &whole))),
            stats::spread(&per_round(war, one, &whole), 3),
            "",
            None,
        ));
        let reread = |s: &Sample| s.ret.prompt_n.map(|p| p as f64);
        let worst = war.iter().filter_map(reread).fold(0.0, f64::max);
        out.push(Line::new(
            &name("return: prompt tokens re-read, worst round (defaults | warden)"),
            format!("{:.0}", def.iter().filter_map(reread).fold(0.0, f64::max)),
            format!("{worst:.0}"),
            format!("{worst:.0}"),
            String::new(),
            "<= 64",
            Some(worst <= RETURN_REREAD_MAX as f64 && !war.is_empty()),
        ));
        let ret_ttft = |s: &Sample| s.ret.ttft_ms();
        let rt = per_round(war, def, &ret_ttft);
        let rtm = stats::median(&rt);
        out.push(Line::new(
            &name("return first token vs defaults (ms)"),
            format!("{:.0}", med(def, &ret_ttft)),
            format!("{:.0}", med(war, &ret_ttft)),
            format!("{rtm:.2}x"),
            stats::spread(&rt, 2),
            "<= 1.1x",
            Some(rtm <= 1.1),
        ));
        let kib = |s: &Sample| s.child_kib.map(|k| k as f64);
        out.push(Line::new(
            &name("child VmRSS after the return vs defaults (MiB)"),
            format!("{:.0}", med(def, &kib) / 1024.0),
            format!("{:.0}", med(war, &kib) / 1024.0),
            format!("{:.3}x", stats::median(&per_round(war, def, &kib))),
            String::new(),
            "",
            None,
        ));
        out.push(Line::new(
            &name("one slot's child VmRSS (MiB), for scale"),
            format!("{:.0}", med(one, &kib) / 1024.0),
            "-".into(),
            String::new(),
            String::new(),
            "",
            None,
        ));
    }
    out
}
