//! `llm-warden unload [MODEL]`: `POST /warden/unload`, which stops every
//! resident model's server now (or only MODEL's) and gives its memory back
//! (the next request loads it again).

use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::client::{Server, ServerArgs};

/// `unload`'s options.
#[derive(Debug, Args)]
pub struct UnloadArgs {
    /// Only this resident model (default: every one).
    model: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

pub async fn run(a: UnloadArgs) -> anyhow::Result<ExitCode> {
    let server = Server::find(&a.server).await?;
    let body = match &a.model {
        Some(m) => json!({ "model": m }),
        None => json!({}),
    };
    // What is resident now, to name what the unload stops (the answer
    // says only whether it stopped anything).
    let before = match &a.model {
        Some(m) => vec![m.clone()],
        None => server
            .get("/warden/status")
            .await
            .map(|s| residents(&s))
            .unwrap_or_default(),
    };
    let answer = server.post("/warden/unload", &body).await?;
    if a.server.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        println!("{}", format_unloaded(&answer, &before));
    }
    Ok(ExitCode::SUCCESS)
}

/// The resident models of a status, most recently used first.
fn residents(s: &Value) -> Vec<String> {
    let listed: Vec<String> = s
        .get("residents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("model").and_then(Value::as_str).map(str::to_string))
        .collect();
    if listed.is_empty() {
        s.get("model")
            .and_then(Value::as_str)
            .map(str::to_string)
            .into_iter()
            .collect()
    } else {
        listed
    }
}

/// `{"unloaded": bool}` in words, naming `models` (what was resident).
pub fn format_unloaded(v: &Value, models: &[String]) -> String {
    match v.get("unloaded").and_then(Value::as_bool) {
        Some(true) if models.is_empty() => {
            "unloaded the model (its memory is free; the next request loads it again)".into()
        }
        Some(true) => format!(
            "unloaded {} (the memory is free; the next request loads it again)",
            models.join(", ")
        ),
        Some(false) => "nothing was loaded".into(),
        None => format!("the server answered {v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both answers, and an unexpected one, read as sentences.
    #[test]
    fn unloaded_lines() {
        let two = ["smol".to_string(), "gemma".to_string()];
        assert!(format_unloaded(&json!({"unloaded": true}), &[]).starts_with("unloaded the model"));
        // why: with two residents, say which went
        assert!(format_unloaded(&json!({"unloaded": true}), &two).starts_with("unloaded smol, gemma ("));
        assert_eq!(format_unloaded(&json!({"unloaded": false}), &two), "nothing was loaded");
        assert_eq!(format_unloaded(&json!({"x": 1}), &[]), r#"the server answered {"x":1}"#);
        let s = json!({"model": "smol", "residents": [{"model": "smol"}, {"model": "gemma"}]});
        assert_eq!(residents(&s), two);
        assert_eq!(residents(&json!({"model": "smol", "residents": []})), ["smol"]);
        assert!(residents(&json!({"model": null})).is_empty());
    }
}
