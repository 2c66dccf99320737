//! `llm-warden ps`: what a running server has loaded, from `/warden/status`:
//! one row per resident model, most recently used first: the model, its
//! kind, its state, its window (and what bounds it), its memory, when the
//! idle reaper will unload it, whether its conversations survive a reload
//! (`KV`), its slots (busy of all: the conversations it serves at once)
//! (memory: `WEIGHTS+KV`, what the warden counts it as holding, weights,
//! KV and compute at its window, the same quantity in every row)
//! and its queue. The first row is the status's top level (the
//! most recently used resident, with every field); the others come from
//! `residents`, which carries less (`-` where it does not say). Fields a
//! server does not send (an older one) show as `-`.

use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

use super::client::{Server, ServerArgs};
use super::table::{self, NONE, bytes_cell, cell};

/// `ps`'s options.
#[derive(Debug, Args)]
pub struct PsArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub async fn run(a: PsArgs) -> anyhow::Result<ExitCode> {
    let server = Server::find(&a.server).await?;
    let status = server.get("/warden/status").await?;
    if a.server.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(ExitCode::SUCCESS);
    }
    // The status has no trained window (yet): the model list's header facts
    // do. A list that fails costs only that column.
    let models = if status.get("trained_window").is_none() && status.get("model").is_some_and(|m| !m.is_null()) {
        server.get("/v1/models").await.ok()
    } else {
        None
    };
    print!("{}", format_ps(&status, models.as_ref(), unix_now_ms()));
    Ok(ExitCode::SUCCESS)
}

/// The wall clock in Unix milliseconds (the unit of `idle_deadline_ms`).
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

const HEADERS: [&str; 13] = [
    "MODEL",
    "KIND",
    "ENGINE",
    "STATE",
    "WINDOW",
    "TRAINED",
    "MEM-BOUND",
    "WEIGHTS+KV",
    "UNLOADS",
    "KEEP-ALIVE",
    "KV",
    "SLOTS",
    "QUEUE",
];

/// The status as a table, one row per resident, seen at `now_ms`; `models`
/// (the `/v1/models` list) supplies the trained window when the status
/// lacks it.
pub fn format_ps(s: &Value, models: Option<&Value>, now_ms: u64) -> String {
    let loaded = s.get("model").is_some_and(|m| !m.is_null());
    let mut rows = vec![vec![
        cell(s.get("model")),
        cell(s.get("kind")),
        cell(s.get("engine")),
        cell(s.get("state")),
        cell(s.get("context_tokens")),
        trained(s, models),
        cell(s.get("memory_bound_tokens")),
        // One quantity for every row: what the warden counts each model as
        // holding (weights, KV and compute at its window), which admission
        // and eviction weigh; the status's own footprint_bytes is the
        // child's measured memory, which grows as its window fills.
        bytes_cell(s.get("held_bytes").or(s.get("footprint_bytes"))),
        deadline(s.get("idle_deadline_ms"), loaded, now_ms),
        keep_alive(s),
        kv(s),
        slots(s),
        queue(s),
    ]];
    let others = s
        .get("residents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| r.get("model") != s.get("model"));
    for r in others {
        let q = match (r.get("queue_depth"), s.get("max_queue")) {
            (Some(d), Some(m)) => format!("{}/{}", cell(Some(d)), cell(Some(m))),
            _ => NONE.into(),
        };
        rows.push(vec![
            cell(r.get("model")),
            cell(r.get("kind")),
            cell(s.get("engine")),
            cell(r.get("state")),
            cell(r.get("context_tokens")),
            trained(r, models),
            NONE.into(),
            bytes_cell(r.get("footprint_bytes")),
            deadline(r.get("idle_deadline_ms"), true, now_ms),
            NONE.into(),
            NONE.into(),
            resident_slots(r),
            q,
        ]);
    }
    table::render(&HEADERS, &rows)
}

/// The status's trained window, else the loaded entry's in the model list.
fn trained(s: &Value, models: Option<&Value>) -> String {
    if let Some(t) = s.get("trained_window") {
        return cell(Some(t));
    }
    let loaded = models
        .and_then(|m| m.get("data"))
        .and_then(Value::as_array)
        .and_then(|d| {
            d.iter()
                .find(|e| e.get("id").is_some() && e.get("id") == s.get("model"))
        });
    cell(loaded.and_then(|e| e.pointer("/facts/trained_window")))
}

/// The keep-alive a request set (`keep_alive_s`, seconds, -1 never), else
/// the idle timeout in force, marked as the configured one.
pub fn keep_alive(s: &Value) -> String {
    let secs = |k: &str| s.get(k).and_then(Value::as_f64);
    if let Some(k) = secs("keep_alive_s") {
        return table::human_secs(k);
    }
    if let Some(k) = s.get("keep_alive").filter(|k| !k.is_null()) {
        return cell(Some(k));
    }
    match secs("idle_timeout_s") {
        Some(t) => format!("{} (default)", table::human_secs(t)),
        None => NONE.into(),
    }
}

/// `idle_deadline_ms`: null with a model loaded means the reaper never
/// takes it (keep-alive forever, or no idle timeout); with none loaded
/// there is nothing to take.
pub(super) fn deadline(v: Option<&Value>, loaded: bool, now_ms: u64) -> String {
    match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .map_or_else(|| NONE.into(), |d| table::human_until(d, now_ms)),
        Some(Value::Null) if loaded => "never".into(),
        _ => NONE.into(),
    }
}

/// Whether the loaded model's conversations survive a reload
/// (`kv_keep`): `kept`, or `not kept (why)` in one word.
fn kv(s: &Value) -> String {
    let Some(k) = s.get("kv_keep").filter(|k| k.is_object()) else {
        return NONE.into();
    };
    if k.get("kept").and_then(Value::as_bool) == Some(true) {
        "kept".into()
    } else {
        format!("not kept ({})", k.get("how").and_then(Value::as_str).unwrap_or("?"))
    }
}

/// Busy slots over all of the live child's (`-` without a child, or from
/// a server that does not say).
pub(super) fn slots(s: &Value) -> String {
    match s.get("slots").and_then(Value::as_array) {
        Some(all) if !all.is_empty() => {
            let busy = all.iter().filter(|x| x.get("busy") == Some(&Value::Bool(true))).count();
            format!("{busy}/{}", all.len())
        }
        _ => NONE.into(),
    }
}

/// A resident's busy slots over its slots.
pub(super) fn resident_slots(r: &Value) -> String {
    match (r.get("busy_slots"), r.get("slots")) {
        (Some(b), Some(n)) if n.as_u64().is_some_and(|n| n > 0) => format!("{}/{}", cell(Some(b)), cell(Some(n))),
        _ => NONE.into(),
    }
}

fn queue(s: &Value) -> String {
    match (s.get("queue_depth"), s.get("max_queue")) {
        (Some(d), Some(m)) if !d.is_null() => format!("{}/{}", cell(Some(d)), cell(Some(m))),
        _ => NONE.into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    /// The second line of the table, split into its cells by column.
    fn row(s: &Value) -> Vec<String> {
        let text = format_ps(s, None, NOW);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        lines[1]
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect()
    }

    /// Every status shape a server sends reads as the row a person expects.
    #[test]
    fn ps_rows() {
        let rows: Vec<(Value, Vec<&str>)> = vec![
            // why: nothing loaded: no deadline to show, even when the server says null
            (
                json!({"engine": "cpu", "state": "idle", "model": null, "context_tokens": null,
                       "idle_deadline_ms": null, "kv_keep": null, "queue_depth": 0, "max_queue": 256}),
                vec!["-", "-", "cpu", "idle", "-", "-", "-", "-", "-", "-", "-", "-", "0/256"],
            ),
            // why: loaded, every new field present; the memory column is the
            // law's count (held_bytes), not the child's measured footprint
            (
                json!({"engine": "cpu", "state": "ready", "model": "SmolLM2", "kind": "chat", "context_tokens": 8192,
                       "trained_window": 8192, "memory_bound_tokens": null, "held_bytes": 1_288_490_189u64,
                       "footprint_bytes": 212_000_000u64,
                       "idle_deadline_ms": NOW + 252_000, "keep_alive": "5m", "queue_depth": 1, "max_queue": 256,
                       "kv_keep": {"kept": true, "how": "plain", "reason": null},
                       "slots": [{"busy": true}, {"busy": false}, {"busy": false}, {"busy": false}]}),
                vec![
                    "SmolLM2",
                    "chat",
                    "cpu",
                    "ready",
                    "8192",
                    "8192",
                    "-",
                    "1.2 GiB",
                    "in 4m 12s",
                    "5m",
                    "kept",
                    "1/4",
                    "1/256",
                ],
            ),
            // why: loaded and never reaped: null deadline means never
            (
                json!({"engine": "cuda", "state": "generating", "model": "g", "context_tokens": 4096,
                       "memory_bound_tokens": 4096, "idle_deadline_ms": null, "keep_alive": -1,
                       "queue_depth": 2, "max_queue": 8,
                       "kv_keep": {"kept": false, "how": "recurrent", "reason": "recurrent memory: ..."}}),
                vec![
                    "g",
                    "-",
                    "cuda",
                    "generating",
                    "4096",
                    "-",
                    "4096",
                    "-",
                    "never",
                    "-1",
                    "not kept (recurrent)",
                    "-",
                    "2/8",
                ],
            ),
            // why: an older server without the new fields: dashes, not errors
            (
                json!({"engine": "cpu", "state": "ready", "model": "m", "context_tokens": 2048}),
                vec!["m", "-", "cpu", "ready", "2048", "-", "-", "-", "-", "-", "-", "-", "-"],
            ),
        ];
        for (i, (status, want)) in rows.iter().enumerate() {
            assert_eq!(row(status), *want, "row {i}: {status}");
        }
    }

    /// Every resident is a row, the top level's first with all its fields,
    /// the others with what `residents` says of each.
    #[test]
    fn one_row_per_resident() {
        let s = json!({"engine": "cpu", "state": "ready", "model": "chat", "kind": "chat",
        "context_tokens": 8192, "queue_depth": 0, "max_queue": 256,
        "residents": [
            {"model": "chat", "kind": "chat", "state": "ready", "context_tokens": 8192, "queue_depth": 0},
            {"model": "minilm", "kind": "embedding", "state": "generating", "context_tokens": 512,
             "footprint_bytes": 314_572_800u64, "idle_deadline_ms": NOW + 60_000, "queue_depth": 2,
             "slots": 1, "busy_slots": 1},
        ]});
        let text = format_ps(&s, None, NOW);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "a header and two rows: {text}");
        let cells: Vec<&str> = lines[2].split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(
            cells,
            [
                "minilm",
                "embedding",
                "cpu",
                "generating",
                "512",
                "-",
                "-",
                "300 MiB",
                "in 1m 0s",
                "-",
                "-",
                "1/1",
                "2/256"
            ]
        );
    }

    /// Without a trained window in the status, the model list's is shown.
    #[test]
    fn trained_window_from_the_model_list() {
        let s = json!({"model": "b", "state": "ready"});
        let models = json!({"data": [
            {"id": "a", "facts": {"trained_window": 2048}},
            {"id": "b", "facts": {"trained_window": 8192}},
        ]});
        let text = format_ps(&s, Some(&models), NOW);
        assert!(text.lines().nth(1).unwrap().contains("8192"), "{text}");
        assert_eq!(
            trained(&json!({"model": null}), Some(&models)),
            "-",
            "nothing loaded: no match"
        );
    }
}
