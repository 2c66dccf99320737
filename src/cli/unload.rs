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
    let answer = server.post("/warden/unload", &body).await?;
    if a.server.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        println!("{}", format_unloaded(&answer));
    }
    Ok(ExitCode::SUCCESS)
}

/// `{"unloaded": bool}` in words.
pub fn format_unloaded(v: &Value) -> String {
    match v.get("unloaded").and_then(Value::as_bool) {
        Some(true) => "unloaded the model (its memory is free; the next request loads it again)".into(),
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
        assert!(format_unloaded(&json!({"unloaded": true})).starts_with("unloaded the model"));
        assert_eq!(format_unloaded(&json!({"unloaded": false})), "nothing was loaded");
        assert_eq!(format_unloaded(&json!({"x": 1})), r#"the server answered {"x":1}"#);
    }
}
