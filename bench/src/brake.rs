//! The memory brake's shrink-and-respawn, warm, through the real warden.
//!
//! Each round starts a fresh warden (no preload) with
//! `WARDEN_FORCE_MEMORY_PRESSURE=critical` and `WARDEN_RAM_OVERRIDE_GB`
//! (0.65 by default: SmolLM2 then loads memory-bound at 6400 tokens) and
//! sends one streamed turn (`max_tokens` 8). The turn loads the model; its
//! end, sampled critical, shrinks the window to half (4096) by respawning
//! the child, and the warden holds the stream's `[DONE]` until the respawn
//! is done. So the respawn, as the user sees it, is the gap between the
//! turn's last data event (the final timings event) and `[DONE]`; the gap
//! from the last content token is recorded too.
//!
//! Cross-checks, per round: the window before (first `model ready` log
//! line) and after (`/warden/status`), a new child pid, the
//! `memory_warning` notice in the stream, the `Memory brake: ...
//! action=shrink+respawn` log line, and the new child's own spawn-to-ready
//! time (`load_ms` of the second `model ready` line), which splits the
//! respawn into "stop the old child" + "start the new one".

use anyhow::Context;
use tokio::time::Instant;

use crate::Setup;
use crate::client::{self, ms};
use crate::pairs::{fmt_med, prompt};
use crate::procs::WardenProc;
use crate::report::{Line, Raw};
use crate::stats::{median, spread};

/// One round.
#[derive(Debug, Default, Clone)]
pub struct Round {
    /// Window at load (tokens).
    pub window_before: Option<u64>,
    /// Window after the turn.
    pub window_after: Option<u64>,
    /// Last data event to `[DONE]`, seconds.
    pub respawn_s: f64,
    /// Last content token to `[DONE]`, seconds.
    pub from_token_s: f64,
    /// The new child's spawn-to-ready, ms.
    pub child_load_ms: Option<f64>,
    /// Whether the notice, the log line and a new pid were all seen.
    pub confirmed: bool,
}

/// Runs `rounds` brake rounds.
pub async fn run(
    http: &reqwest::Client,
    s: &Setup,
    rounds: usize,
    ram_gb: &str,
    raw: &mut Raw,
) -> anyhow::Result<Vec<Round>> {
    let mut out = Vec::new();
    for r in 0..rounds {
        let envs = [
            ("WARDEN_FORCE_MEMORY_PRESSURE", "critical"),
            ("WARDEN_RAM_OVERRIDE_GB", ram_gb),
        ];
        let (round, foreign) = crate::quiet::clean(|| async move {
            let w = WardenProc::spawn(&s.warden_bin, &s.server, &s.model, false, &envs).await?;
            let result = one(http, &w, r).await;
            w.stop().await;
            result
        })
        .await?;
        raw.push("brake", r, "machine", "foreign_share", Some(foreign));
        raw.push("brake", r, "warden", "respawn_s", Some(round.respawn_s));
        raw.push("brake", r, "warden", "from_last_token_s", Some(round.from_token_s));
        raw.push("brake", r, "warden", "child_load_ms", round.child_load_ms);
        raw.push(
            "brake",
            r,
            "warden",
            "window_before",
            round.window_before.map(|x| x as f64),
        );
        raw.push(
            "brake",
            r,
            "warden",
            "window_after",
            round.window_after.map(|x| x as f64),
        );
        let n = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
        eprintln!(
            "  brake {r}: window {} -> {}, respawn {:.3} s (new child spawn to ready {} ms), confirmed {}",
            n(round.window_before),
            n(round.window_after),
            round.respawn_s,
            round.child_load_ms.map_or("?".into(), |v| format!("{v:.0}")),
            round.confirmed
        );
        out.push(round);
    }
    Ok(out)
}

async fn one(http: &reqwest::Client, w: &WardenProc, r: usize) -> anyhow::Result<Round> {
    let target = w.target();
    let t0 = Instant::now();
    let turn = client::stream(http, &target, client::body(&prompt(200 + r), 8, true)).await?;
    let status = w.wait_ready(http).await?;
    let done = turn.done.context("the brake turn did not end")?;
    let last_event = turn.last_event.context("the brake turn sent nothing")?;
    let last_token = turn.last_token.context("the brake turn sent no token")?;
    let ready = w.log_since(t0, "model ready");
    let window = |l: &str| -> Option<u64> {
        let v = l.split("context_tokens=Some(").nth(1)?;
        v.split(')').next()?.parse().ok()
    };
    let load_ms = |l: &str| -> Option<f64> {
        let v = l.split("load_ms=").nth(1)?;
        v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    let acted_log = !w.log_since(t0, "action=shrink+respawn").is_empty();
    let acted_notice = turn.notices.iter().any(|n| n.contains("memory_warning"));
    let pid_changed = ready.len() >= 2;
    Ok(Round {
        window_before: ready.first().and_then(|l| window(&l.1)),
        window_after: status["context_tokens"].as_u64(),
        respawn_s: ms(done - last_event) / 1e3,
        from_token_s: ms(done - last_token) / 1e3,
        child_load_ms: ready.get(1).and_then(|l| load_ms(&l.1)),
        confirmed: acted_log && acted_notice && pid_changed,
    })
}

/// The headline respawn time (median), seconds.
pub fn respawn_s(rounds: &[Round]) -> f64 {
    median(&rounds.iter().map(|r| r.respawn_s).collect::<Vec<_>>())
}

/// The table's lines; `restart_ms` is llama-server's own exit-on-SIGTERM
/// plus spawn-to-healthy (the cold phase's medians), for reference.
pub fn lines(rounds: &[Round], restart_ms: Option<f64>) -> Vec<Line> {
    let xs: Vec<f64> = rounds.iter().map(|r| r.respawn_s).collect();
    let loads: Vec<f64> = rounds.iter().filter_map(|r| r.child_load_ms).collect();
    let confirmed = rounds.iter().filter(|r| r.confirmed).count();
    let windows = rounds
        .first()
        .map(|r| {
            let t = |w: Option<u64>| w.map_or("?".into(), |w| w.to_string());
            format!("{} -> {} tokens", t(r.window_before), t(r.window_after))
        })
        .unwrap_or_default();
    let stop: Vec<f64> = rounds
        .iter()
        .filter_map(|r| Some(r.respawn_s * 1e3 - r.child_load_ms?))
        .collect();
    vec![
        Line::new(
            &format!(
                "brake shrink+respawn, warm (s): window {windows}, confirmed {confirmed}/{}",
                rounds.len()
            ),
            restart_ms.map_or("-".into(), |m| format!("llama stop+start {:.3}", m / 1e3)),
            format!("{:.3}", respawn_s(rounds)),
            format!("{:.3} s", respawn_s(rounds)),
            spread(&xs, 3),
            "<= 1.5 s",
            Some(respawn_s(rounds) <= 1.5),
        ),
        Line::new(
            "  of which: new child spawn to ready (ms) / the rest: old child stop + brake (ms)",
            "-".into(),
            fmt_med(&loads, 0),
            format!("rest {}", fmt_med(&stop, 0)),
            spread(&loads, 0),
            "(info)",
            None,
        ),
    ]
}
