//! `llm-warden status`: a running server's whole `/warden/status`, one
//! field a line (nested ones dotted: `brake.level`), or its JSON (`--json`).
//! `ps` is the short view of the same snapshot.

use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

use super::client::{Server, ServerArgs};
use super::table::{self, cell};

/// `status`'s options.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub async fn run(a: StatusArgs) -> anyhow::Result<ExitCode> {
    let server = Server::find(&a.server).await?;
    let v = server.get("/warden/status").await?;
    if a.server.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", format_status(&v));
    }
    Ok(ExitCode::SUCCESS)
}

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
        other => out.push(vec![prefix.to_string(), cell(Some(other))]),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Nested objects become dotted names; nulls and empty objects read `-`
    /// and `{}`; arrays stay compact JSON.
    #[test]
    fn status_lines() {
        let v = json!({"engine": "cpu", "model": null, "brake": {"level": "normal", "window": 8192},
                       "gpu": {}, "notes": ["a"]});
        let want = "\
brake.level   normal
brake.window  8192
engine        cpu
gpu           {}
model         -
notes         [\"a\"]
";
        assert_eq!(format_status(&v), want);
    }
}
