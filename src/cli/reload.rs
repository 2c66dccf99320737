//! `llm-warden reload`: `POST /warden/reload`, which reads the settings file
//! and the model stores again now (the server also does every
//! `WARDEN_WATCH_S`, and on SIGHUP), and says what changed.

use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

use super::client::{Server, ServerArgs};

/// `reload`'s options.
#[derive(Debug, Args)]
pub struct ReloadArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub async fn run(a: ReloadArgs) -> anyhow::Result<ExitCode> {
    let server = Server::find(&a.server).await?;
    let answer = server.post("/warden/reload", &serde_json::json!({})).await?;
    if a.server.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        println!("{}", format_reloaded(&answer));
    }
    Ok(ExitCode::SUCCESS)
}

/// What a reload changed, in words.
pub fn format_reloaded(v: &Value) -> String {
    let Some(a) = v.get("applied").filter(|a| a.is_object()) else {
        return "nothing changed".into();
    };
    let list = |k: &str| {
        a[k].as_array()
            .map(|l| l.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    };
    let mut parts = Vec::new();
    for (key, said) in [
        ("added", "added"),
        ("removed", "removed (each unloads once its turns end)"),
        (
            "changed",
            "changed (a window, slots or arguments apply at the next load)",
        ),
        ("restart_needed", "applies only at the next start"),
    ] {
        let l = list(key);
        if !l.is_empty() {
            parts.push(format!("{said}: {l}"));
        }
    }
    if parts.is_empty() {
        "reloaded: the settings apply".into()
    } else {
        format!("reloaded; {}", parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Nothing, a change, and each list, as sentences.
    #[test]
    fn reloaded_lines() {
        assert_eq!(format_reloaded(&json!({"applied": null})), "nothing changed");
        let v = json!({"applied": {"added": ["a", "b"], "removed": [], "changed": ["c"], "restart_needed": ["WARDEN_API_KEY"]}});
        assert_eq!(
            format_reloaded(&v),
            "reloaded; added: a, b; changed (a window, slots or arguments apply at the next load): c; applies only at the next start: WARDEN_API_KEY"
        );
        let v = json!({"applied": {"added": [], "removed": [], "changed": [], "restart_needed": []}});
        assert_eq!(format_reloaded(&v), "reloaded: the settings apply");
    }
}
