//! `llm-warden load [MODEL] [--keep-alive V]`: `POST /warden/load`, which
//! answers once the model is ready (or why it could not load), so a script
//! can load first and then time its own requests.

use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::client::{Server, ServerArgs};
use super::table::cell;

/// `load`'s options.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The model id, as `llm-warden models` lists it (default: the server's
    /// default model).
    model: Option<String>,
    /// How long the model may stay idle before it is unloaded, passed on as
    /// `keep_alive` (a number is sent as a number, anything else, e.g. `10m`,
    /// as a string; the server decides what it accepts).
    #[arg(long, value_name = "VALUE", allow_hyphen_values = true)]
    keep_alive: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

pub async fn run(a: LoadArgs) -> anyhow::Result<ExitCode> {
    let server = Server::find(&a.server).await?;
    let status = server
        .post("/warden/load", &load_body(a.model.as_deref(), a.keep_alive.as_deref()))
        .await?;
    if a.server.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        println!("{}", format_loaded(&status));
    }
    Ok(ExitCode::SUCCESS)
}

/// The request body: only what was given, so the server's defaults apply.
pub fn load_body(model: Option<&str>, keep_alive: Option<&str>) -> Value {
    let mut body = json!({});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    if let Some(k) = keep_alive {
        let k = k.trim();
        body["keep_alive"] = match k.parse::<i64>() {
            Ok(n) => json!(n),
            Err(_) => k
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map_or(json!(k), |f| json!(f)),
        };
    }
    body
}

/// One line from the status the load answered with.
pub fn format_loaded(s: &Value) -> String {
    let mut line = format!(
        "loaded {}: window {} tokens ({} engine",
        cell(s.get("model")),
        cell(s.get("context_tokens")),
        cell(s.get("engine"))
    );
    if let Some(pid) = s.get("child_pid").filter(|p| !p.is_null()) {
        line.push_str(&format!(", pid {pid}"));
    }
    if s.get("keep_alive_s").is_some_and(|k| !k.is_null()) || s.get("keep_alive").is_some_and(|k| !k.is_null()) {
        line.push_str(&format!(", keep-alive {}", super::ps::keep_alive(s)));
    }
    line.push(')');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body carries only what was given, keep-alive typed as written.
    #[test]
    fn load_bodies() {
        let rows: &[(Option<&str>, Option<&str>, Value)] = &[
            // why: nothing given: the server's default model
            (None, None, json!({})),
            (Some("m"), None, json!({"model": "m"})),
            // why: a bare number is seconds, sent as a number
            (Some("m"), Some("300"), json!({"model": "m", "keep_alive": 300})),
            // why: a negative number (forever, by Ollama's convention) stays a number
            (Some("m"), Some("-1"), json!({"model": "m", "keep_alive": -1})),
            (Some("m"), Some("1.5"), json!({"model": "m", "keep_alive": 1.5})),
            // why: a duration with a unit is the server's to parse
            (Some("m"), Some("10m"), json!({"model": "m", "keep_alive": "10m"})),
        ];
        for (i, (m, k, want)) in rows.iter().enumerate() {
            assert_eq!(load_body(*m, *k), *want, "row {i}");
        }
    }

    /// The answer names the model, its window and, when sent, the keep-alive.
    #[test]
    fn loaded_lines() {
        let s = json!({"model": "m", "context_tokens": 8192, "engine": "cpu", "child_pid": 42});
        assert_eq!(format_loaded(&s), "loaded m: window 8192 tokens (cpu engine, pid 42)");
        let s =
            json!({"model": "m", "context_tokens": 8192, "engine": "cpu", "child_pid": null, "keep_alive_s": 600.0});
        assert_eq!(
            format_loaded(&s),
            "loaded m: window 8192 tokens (cpu engine, keep-alive 10m)"
        );
    }
}
