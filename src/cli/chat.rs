//! `llm-warden chat "prompt"`: streams one answer to the terminal, from a
//! running server when there is one, else from a warden started in-process
//! (and stopped after the answer).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::client::http_client;
use crate::TurnEvent;
use crate::server::WARDEN_PORTS;
use crate::sse::{SseEvent, SseParser};
use crate::{TurnRequest, Warden, WardenConfig};
use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use serde_json::json;

/// `chat`'s options.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The question.
    prompt: String,
    /// A running server (default: the first llm-warden found on 27182-27199,
    /// else one started in-process).
    #[arg(long)]
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
    let mut body = json!({"messages": messages, "max_tokens": a.max_tokens, "stream": true});
    if let Some(m) = &a.model {
        body["model"] = json!(m);
    }
    if let Some(t) = a.temperature {
        body["temperature"] = json!(t);
    }
    let mut printer = Printer::default();
    match find_server(a.url.clone()).await {
        Some(base) => over_http(&base, body, &mut printer).await?,
        None => in_process(a, body, &mut printer).await?,
    }
    println!();
    Ok(if printer.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn over_http(base: &str, body: serde_json::Value, p: &mut Printer) -> anyhow::Result<()> {
    let http = http_client();
    let mut req = http.post(format!("{base}/v1/chat/completions")).json(&body);
    if let Ok(key) = std::env::var("WARDEN_API_KEY") {
        req = req.bearer_auth(key);
    }
    let resp = req.send().await?;
    if !resp.status().is_success() {
        let v: serde_json::Value = resp.json().await.unwrap_or_default();
        p.error(&v);
        return Ok(());
    }
    let mut stream = resp.bytes_stream();
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let _ = parser.push(&chunk, &mut events);
        for ev in events.drain(..) {
            p.event(&ev);
        }
        p.notices(&chunk);
    }
    Ok(())
}

async fn in_process(a: ChatArgs, body: serde_json::Value, p: &mut Printer) -> anyhow::Result<()> {
    let cfg = WardenConfig::load(None)?;
    let catalog = super::build_catalog(&cfg, a.models_dir, None, false)?;
    eprintln!("(no llm-warden server running: starting one in-process)");
    let warden = Warden::start(cfg, catalog)?;
    let serde_json::Value::Object(map) = body else {
        unreachable!("built as an object above")
    };
    let req = TurnRequest::new(crate::status::Route::Chat, map)
        .model(a.model)
        .stream(true);
    let mut rx = warden.submit(req).map_err(|e| anyhow::anyhow!("{}: {e}", e.code()))?;
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            TurnEvent::Chunk(raw) => {
                let _ = parser.push(&raw, &mut events);
                for ev in events.drain(..) {
                    p.event(&ev);
                }
            }
            TurnEvent::Notice(n) => eprintln!("[warden] {}", serde_json::to_string(&n).unwrap_or_default()),
            TurnEvent::Error(e) => p.error(&e.to_api().to_body()),
            TurnEvent::Done | TurnEvent::Body { .. } => break,
        }
    }
    warden.shutdown().await;
    Ok(())
}

/// Prints content deltas as they come, notices and errors to stderr.
#[derive(Default)]
struct Printer {
    failed: bool,
}

impl Printer {
    fn event(&mut self, ev: &SseEvent) {
        if ev.is_done() {
            return;
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&ev.data) else {
            return;
        };
        if v.get("error").is_some() {
            self.error(&v);
            return;
        }
        if let Some(text) = v.pointer("/choices/0/delta/content").and_then(|c| c.as_str()) {
            print!("{text}");
            let _ = std::io::stdout().flush();
        }
    }

    /// Warden notices travel as SSE comments, which the parser skips.
    fn notices(&mut self, chunk: &Bytes) {
        for line in chunk.split(|&b| b == b'\n') {
            if let Some(rest) = line.strip_prefix(b": warden ") {
                eprintln!("[warden] {}", String::from_utf8_lossy(rest));
            }
        }
    }

    fn error(&mut self, v: &serde_json::Value) {
        self.failed = true;
        let e = v.get("error").unwrap_or(v);
        eprintln!(
            "\nerror ({}): {}",
            e.get("code").and_then(|c| c.as_str()).unwrap_or("unknown"),
            e.get("message").and_then(|m| m.as_str()).unwrap_or("")
        );
        if let Some(raw) = e.get("raw").and_then(|r| r.as_str()) {
            eprintln!("model server output:\n{raw}");
        }
    }
}
