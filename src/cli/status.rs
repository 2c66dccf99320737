//! `llm-warden status`: a running server's `/warden/status` for a person:
//! a short summary by default (the engine, each resident with its window
//! and why, its memory, slots and reap; the brake; what waits; the KV
//! saves; the settings), every field one a line with `--all` (nested ones
//! dotted: `brake.level`), or its JSON (`--json`). `ps` is the table of
//! the same snapshot's residents.

use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

use super::client::{Server, ServerArgs};
use super::table::{self, NONE, bytes_cell, cell, human_bytes};

/// `status`'s options.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Every field, one a line (nested ones dotted), instead of the summary.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    server: ServerArgs,
}

pub async fn run(a: StatusArgs) -> anyhow::Result<ExitCode> {
    let server = Server::find(&a.server).await?;
    let v = server.get("/warden/status").await?;
    if a.server.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else if a.all {
        print!("{}", format_status(&v));
    } else {
        print!("{}", summary(&v, super::ps::unix_now_ms()));
    }
    Ok(ExitCode::SUCCESS)
}

/// The status for a person, seen at `now_ms`: a line for the engine, one
/// per resident (most recently used first), then memory, what waits, the
/// KV saves and the settings, each only when it has something to say.
pub fn summary(v: &Value, now_ms: u64) -> String {
    let n = |k: &str| v.get(k).and_then(Value::as_u64);
    let mut out = Vec::new();
    let residents: Vec<&Value> = v
        .get("residents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    // Each resident counts its own turns; the top level is one of them.
    let turns = if residents.is_empty() {
        n("turns").unwrap_or(0)
    } else {
        residents
            .iter()
            .filter_map(|r| r.get("turns").and_then(Value::as_u64))
            .sum()
    };
    let loaded = if residents.is_empty() {
        usize::from(v.get("model").is_some_and(|m| !m.is_null()))
    } else {
        residents.len()
    };
    out.push(format!(
        "{} engine, {}, {} turns served",
        cell(v.get("engine")),
        match loaded {
            0 => "no model loaded".to_string(),
            1 => "1 model loaded".to_string(),
            k => format!("{k} models loaded"),
        },
        turns
    ));
    if residents.is_empty() && loaded == 1 {
        out.push(resident_line(v, v, now_ms));
    }
    for r in &residents {
        // The top level is the most recently used resident, with more said.
        let whole = if r.get("model") == v.get("model") { v } else { r };
        out.push(resident_line(whole, r, now_ms));
    }
    let brake = v.get("brake");
    let mut memory = match brake.and_then(|b| b.get("level")).filter(|l| !l.is_null()) {
        Some(l) => format!("memory: pressure {}", cell(Some(l))),
        None => "memory: no pressure reading yet".to_string(),
    };
    if let (Some(budget), Some(total)) = (n("memory_budget_bytes"), n("memory_total_bytes")) {
        memory.push_str(&format!(
            ", windows sized within {} of {}",
            human_bytes(budget),
            human_bytes(total)
        ));
    }
    match brake.and_then(|b| b.get("last_action")).filter(|a| !a.is_null()) {
        Some(a) => memory.push_str(&format!("; the brake's last action: {}", cell(Some(a)))),
        None if brake.and_then(|b| b.get("enabled")) == Some(&Value::Bool(false)) => {
            let why = brake
                .and_then(|b| b.get("off_reason"))
                .map_or(NONE.into(), |r| cell(Some(r)));
            memory.push_str(&format!("; the brake is off ({why})"));
        }
        None => {}
    }
    out.push(memory);
    let waiting = n("waiting_turns").unwrap_or(0);
    if let (Some(depth), Some(max)) = (n("queue_depth"), n("max_queue")) {
        out.push(format!(
            "queue: {depth} turns waiting or running (at most {max}), {waiting} waiting for room"
        ));
    }
    if let Some(sw) = v
        .get("switching")
        .filter(|s| s.get("loads").and_then(Value::as_u64).unwrap_or(0) > 0)
    {
        let f = |k: &str| sw.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let mut line = format!(
            "switching: {} loads in the last {:.0} min, {:.1} s loading ({:.0}% of the time)",
            f("loads"),
            f("window_ms") / 60_000.0,
            f("loading_ms") / 1000.0,
            f("loading_share") * 100.0
        );
        if sw.get("thrashing") == Some(&Value::Bool(true)) {
            line.push_str(": thrashing, the models asked for do not fit together");
        }
        out.push(line);
    }
    for w in v.get("waiting_models").and_then(Value::as_array).into_iter().flatten() {
        let why = w.get("why").and_then(Value::as_str).unwrap_or("waits");
        let waited = w.get("waited_ms").and_then(Value::as_u64).unwrap_or(0);
        out.push(format!("waiting: {why} (waited {:.1} s)", waited as f64 / 1000.0));
    }
    if let Some(kv) = v.get("kv_saves").filter(|k| k.is_object()) {
        let count = kv.get("count").and_then(Value::as_u64).unwrap_or(0);
        out.push(format!(
            "kept conversations: {count} saved, {} of {}",
            bytes_cell(kv.get("bytes")),
            bytes_cell(kv.get("cap_bytes"))
        ));
    }
    if let Some(st) = v.get("settings").filter(|s| s.is_object()) {
        let file = st
            .get("file")
            .filter(|f| !f.is_null())
            .map_or_else(|| "no settings file".to_string(), |f| cell(Some(f)));
        let problem = st.get("error").filter(|p| !p.is_null());
        out.push(match problem {
            Some(p) => format!(
                "settings: {file}: refused, the last good ones stay ({})",
                p.get("message").map_or_else(|| cell(Some(p)), |m| cell(Some(m)))
            ),
            None => format!("settings: {file}"),
        });
    }
    out.push("(every field: llm-warden status --all; the JSON: --json)".into());
    out.join("\n") + "\n"
}

/// One resident's line: its id, kind, state, window and why, memory,
/// slots and reap. `whole` says more than `r` for the top-level resident.
fn resident_line(whole: &Value, r: &Value, now_ms: u64) -> String {
    let head = format!(
        "  {} ({}, {})",
        cell(r.get("model")),
        cell(r.get("kind")),
        cell(r.get("state"))
    );
    let mut parts = Vec::new();
    if let Some(w) = r.get("context_tokens").and_then(Value::as_u64) {
        let why = if whole.get("memory_bound_tokens").and_then(Value::as_u64) == Some(w) {
            " (bounded by memory)"
        } else if whole.get("declared_ceiling").is_some_and(|c| !c.is_null()) {
            " (pinned by WARDEN_CTX)"
        } else {
            ""
        };
        parts.push(format!("window {w} tokens{why}"));
    }
    if let Some(b) = whole
        .get("held_bytes")
        .or(r.get("footprint_bytes"))
        .and_then(Value::as_u64)
    {
        parts.push(format!("holds {}", human_bytes(b)));
    }
    // The cells `ps` shows, in words.
    let busy = match super::ps::resident_slots(r) {
        s if s == NONE => super::ps::slots(whole),
        s => s,
    };
    if busy != NONE {
        parts.push(format!("{busy} conversations at once busy"));
    }
    match super::ps::deadline(r.get("idle_deadline_ms"), true, now_ms).as_str() {
        NONE => {}
        "never" => parts.push("never unloaded when idle".into()),
        when => parts.push(format!("unloads {when}")),
    }
    if whole.get("pinned") == Some(&Value::Bool(true)) {
        parts.push("pinned".into());
    }
    if parts.is_empty() {
        head
    } else {
        format!("{head}: {}", parts.join(", "))
    }
}

/// A list of records longer than this is shown by its count in `--all`.
const LONG_LIST: usize = 3;

/// Every field as an aligned `name  value` line, by name.
pub fn format_status(v: &Value) -> String {
    let mut rows = Vec::new();
    flatten("", v, &mut rows);
    let text = table::render(&["FIELD", "VALUE"], &rows);
    // The header says nothing a `name value` list needs.
    text.split_once('\n').map_or(text.clone(), |(_, rest)| rest.to_string())
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, child) in map {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&name, child, out);
            }
        }
        // A long list of records (the KV saves) would be one line of
        // kilobytes: its count, and where the records are.
        Value::Array(items) if items.len() > LONG_LIST && items.iter().all(Value::is_object) => out.push(vec![
            prefix.to_string(),
            format!("{} entries (--json shows each)", items.len()),
        ]),
        other => out.push(vec![prefix.to_string(), cell(Some(other))]),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The summary says what a person asks first, each line only when it
    /// has something to say.
    #[test]
    fn summaries() {
        const NOW: u64 = 1_700_000_000_000;
        let idle = json!({"engine": "cpu", "state": "idle", "model": null, "turns": 0,
                          "brake": {"enabled": true, "level": null, "last_action": null},
                          "settings": {"file": null, "error": null},
                          "queue_depth": 0, "max_queue": 256, "waiting_turns": 0, "residents": []});
        assert_eq!(
            summary(&idle, NOW),
            "cpu engine, no model loaded, 0 turns served\n\
             memory: no pressure reading yet\n\
             queue: 0 turns waiting or running (at most 256), 0 waiting for room\n\
             settings: no settings file\n\
             (every field: llm-warden status --all; the JSON: --json)\n"
        );
        let two = json!({"engine": "cpu", "state": "generating", "model": "smol", "turns": 12,
            "context_tokens": 6144, "memory_bound_tokens": 6144, "held_bytes": 212_860_928u64,
            "slots": [{"busy": true}, {"busy": false}], "pinned": true,
            "memory_budget_bytes": 18_253_611_008u64, "memory_total_bytes": 24_338_148_352u64,
            "brake": {"enabled": true, "level": "warning", "last_action": "shrink"},
            "queue_depth": 1, "max_queue": 256, "waiting_turns": 0,
            "switching": {"loads": 9, "loads_per_min": 1.8, "loading_ms": 72_000, "loading_share": 0.24, "thrashing": true, "window_ms": 300_000},
            "waiting_models": [{"model": "phi", "waited_ms": 1_250, "why": "phi waits: switching costs 1.8 s, smol's turns go first, at most 0.6 s more"}],
            "kv_saves": {"count": 3, "bytes": 12_582_912u64, "cap_bytes": 2_147_483_648u64},
            "settings": {"file": "/c/config.toml", "error": {"message": "line 2: unknown key `x`"}},
            "residents": [
                {"model": "smol", "kind": "chat", "state": "generating", "context_tokens": 6144, "turns": 9,
                 "footprint_bytes": 212_860_928u64, "idle_deadline_ms": null, "slots": 2, "busy_slots": 1},
                {"model": "gemma", "kind": "completion", "state": "ready", "context_tokens": 32768, "turns": 3,
                 "footprint_bytes": 1_158_676_480u64, "idle_deadline_ms": NOW + 252_000, "slots": 4, "busy_slots": 0}]});
        let want = "\
cpu engine, 2 models loaded, 12 turns served
  smol (chat, generating): window 6144 tokens (bounded by memory), holds 203 MiB, 1/2 conversations at once busy, never unloaded when idle, pinned
  gemma (completion, ready): window 32768 tokens, holds 1.1 GiB, 0/4 conversations at once busy, unloads in 4m 12s
memory: pressure warning, windows sized within 17.0 GiB of 22.7 GiB; the brake's last action: shrink
queue: 1 turns waiting or running (at most 256), 0 waiting for room
switching: 9 loads in the last 5 min, 72.0 s loading (24% of the time): thrashing, the models asked for do not fit together
waiting: phi waits: switching costs 1.8 s, smol's turns go first, at most 0.6 s more (waited 1.2 s)
kept conversations: 3 saved, 12.0 MiB of 2.0 GiB
settings: /c/config.toml: refused, the last good ones stay (line 2: unknown key `x`)
(every field: llm-warden status --all; the JSON: --json)
";
        assert_eq!(summary(&two, NOW), want);
    }

    /// Nested objects become dotted names; nulls and empty objects read `-`
    /// and `{}`; arrays stay compact JSON.
    #[test]
    fn status_lines() {
        let v = json!({"engine": "cpu", "model": null, "brake": {"level": "normal", "window": 8192},
                       "gpu": {}, "notes": ["a"],
                       "saves": [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]});
        let want = "\
brake.level   normal
brake.window  8192
engine        cpu
gpu           {}
model         -
notes         [\"a\"]
saves         4 entries (--json shows each)
";
        assert_eq!(format_status(&v), want);
    }
}
