//! `llm-warden chat "prompt"`: streams one answer to the terminal, from the
//! server `--url` / `WARDEN_URL` names, else a running one, else a warden
//! started in-process (and stopped after the answer): `turns::Target`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::client::http_client;
use super::turns::Target;
use crate::server::WARDEN_PORTS;
use clap::Args;
use serde_json::{Value, json};

/// `chat`'s options.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The question.
    prompt: String,
    /// A running server (default: the first llm-warden found on 27182-27199,
    /// else one started in-process).
    #[arg(long, env = "WARDEN_URL")]
    url: Option<String>,
    /// The model id (default: the server's default).
    #[arg(long)]
    model: Option<String>,
    /// The most tokens to generate.
    #[arg(long, default_value_t = 256)]
    max_tokens: u32,
    /// A system prompt.
    #[arg(long)]
    system: Option<String>,
    /// Sampling temperature (0: greedy, the same answer every time; default:
    /// the model server's own).
    #[arg(long)]
    temperature: Option<f64>,
    /// The models directory, for an in-process warden.
    #[arg(long)]
    models_dir: Option<PathBuf>,
}

/// The first llm-warden answering `/health` (or `url` as given).
pub async fn find_server(url: Option<String>) -> Option<String> {
    if let Some(u) = url {
        return Some(u.trim_end_matches('/').to_string());
    }
    let http = http_client();
    for port in WARDEN_PORTS {
        let base = format!("http://127.0.0.1:{port}");
        let ok = http
            .get(format!("{base}/health"))
            .timeout(Duration::from_millis(300))
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success());
        if let Some(r) = ok
            && let Ok(v) = r.json::<serde_json::Value>().await
            && v.get("service").and_then(|s| s.as_str()) == Some("llm-warden")
        {
            return Some(base);
        }
    }
    None
}

pub async fn run(a: ChatArgs) -> anyhow::Result<ExitCode> {
    let mut messages = Vec::new();
    if let Some(s) = &a.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    messages.push(json!({"role": "user", "content": a.prompt}));
    let target = Target::reach(a.url.as_deref(), a.models_dir, None).await?;
    let body = request(messages, a.model.as_deref(), Some(a.max_tokens), a.temperature);
    let answer = target.ask(&body, std::future::pending()).await;
    target.close().await;
    let answer = answer?;
    println!();
    Ok(if answer.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A streamed chat request: only what was given, so the server's
/// defaults apply to the rest.
pub(crate) fn request(
    messages: Vec<Value>,
    model: Option<&str>,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
) -> Value {
    let mut body = json!({"messages": messages, "stream": true});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    if let Some(n) = max_tokens {
        body["max_tokens"] = json!(n);
    }
    if let Some(t) = temperature {
        body["temperature"] = json!(t);
    }
    body
}
