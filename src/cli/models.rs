//! `llm-warden models`: the models a running server offers (`/v1/models`),
//! with what each serves (`chat`, `completion`, `embedding`) and the other
//! names it answers to, the header facts it read for each (`http::models`):
//! trained window, KV bytes per token, weights size, and which is loaded or
//! the default.

use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

use super::client::{Server, ServerArgs};
use super::table::{self, NONE, bytes_cell, cell};

/// `models`' options.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub async fn run(a: ModelsArgs) -> anyhow::Result<ExitCode> {
    let server = Server::find(&a.server).await?;
    let list = server.get("/v1/models").await?;
    if a.server.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        print!("{}", format_models(&list));
    }
    Ok(ExitCode::SUCCESS)
}

const HEADERS: [&str; 11] = [
    "ID", "KIND", "ALIASES", "SOURCE", "FORMAT", "ARCH", "QUANT", "TRAINED", "KV/TOKEN", "SIZE", "NOTE",
];

/// The list as a table, one model a row; then the models of other tools'
/// stores that cannot run, each with its reason.
pub fn format_models(list: &Value) -> String {
    let entries = list.get("data").and_then(Value::as_array).cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = entries.iter().map(model_row).collect();
    let mut out = table::render(&HEADERS, &rows);
    for u in list.get("unusable").and_then(Value::as_array).into_iter().flatten() {
        out.push_str(&format!(
            "cannot run: {} ({}): {}\n",
            cell(u.get("id")),
            cell(u.get("source")),
            cell(u.get("reason"))
        ));
    }
    out
}

fn model_row(m: &Value) -> Vec<String> {
    let facts = m.get("facts");
    let fact = |k: &str| facts.and_then(|f| f.get(k));
    let aliases: Vec<&str> = m
        .get("aliases")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    vec![
        cell(m.get("id")),
        cell(m.get("kind")),
        if aliases.is_empty() {
            NONE.into()
        } else {
            aliases.join(",")
        },
        cell(m.get("source")),
        cell(m.get("format")),
        cell(fact("architecture")),
        cell(fact("file_type")),
        cell(fact("trained_window")),
        bytes_cell(fact("kv_bytes_per_token")),
        bytes_cell(fact("weights_bytes")),
        note(m),
    ]
}

/// `default`, `loaded`, and why the header could not be read.
fn note(m: &Value) -> String {
    let mut parts = Vec::new();
    for flag in ["default", "loaded"] {
        if m.get(flag).and_then(Value::as_bool) == Some(true) {
            parts.push(flag.to_string());
        }
    }
    if let Some(e) = m.pointer("/facts/error") {
        parts.push(format!("unreadable: {}", cell(e.get("code"))));
    }
    if parts.is_empty() {
        NONE.into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Each kind of catalog entry reads as one aligned row.
    #[test]
    fn models_table() {
        let list = json!({"object": "list", "data": [
            // why: a GGUF with facts, the default and loaded
            {"id": "SmolLM2-135M-Instruct.Q4_1", "kind": "chat", "aliases": ["smol", "gpt-4o-mini"],
             "source": "warden", "format": "gguf", "loaded": true, "default": true,
             "facts": {"architecture": "llama", "file_type": "Q4_1", "trained_window": 8192,
                       "kv_bytes_per_token": 92160, "weights_bytes": 103_079_215u64}},
            // why: an MLX directory has no GGUF facts: dashes
            {"id": "smollm2:135m", "kind": "completion", "aliases": [], "source": "ollama", "format": "mlx",
             "loaded": false, "default": false},
            // why: a broken header says so instead of hiding the model
            {"id": "broken", "format": "gguf", "loaded": false, "default": false,
             "facts": {"error": {"code": "truncated_file", "message": "..."}}},
        ], "unusable": [{"id": "llava:7b", "source": "ollama", "path": "/x", "reason": "not_gguf (...)"}]});
        let want = "\
ID                          KIND        ALIASES           SOURCE  FORMAT  ARCH   QUANT  TRAINED  KV/TOKEN  SIZE      NOTE
SmolLM2-135M-Instruct.Q4_1  chat        smol,gpt-4o-mini  warden  gguf    llama  Q4_1   8192     90.0 KiB  98.3 MiB  default, loaded
smollm2:135m                completion  -                 ollama  mlx     -      -      -        -         -         -
broken                      -           -                 -       gguf    -      -      -        -         -         unreadable: truncated_file
cannot run: llava:7b (ollama): not_gguf (...)
";
        assert_eq!(format_models(&list), want);
    }

    /// A list without entries is just the header.
    #[test]
    fn empty_list_is_the_header() {
        assert_eq!(format_models(&json!({"data": []})).lines().count(), 1);
    }
}
