//! What `chat` and `run` share: the warden they talk to (`Target`: the one
//! `--url` / `WARDEN_URL` names, else the first found on 27182-27199, else
//! one started in-process and served on a free loopback port, so every
//! answer goes the same way, over HTTP), and one streamed answer printed
//! as it comes (`Target::ask`), which an interrupt stops.
//!
//! The warden's notices (a load, the memory brake) travel in the stream as
//! SSE comments; they are printed to standard error as sentences
//! (`notice_text`), the answer alone to standard output.

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

use super::client::{Server, http_client, normalise_url};
use crate::sse::{SseEvent, SseParser};
use crate::{Warden, WardenConfig};

/// The warden a terminal session talks to.
pub(crate) struct Target {
    /// Its HTTP API.
    pub server: Server,
    /// The warden started for this session (stopped by `close`), when none
    /// was running.
    local: Option<Warden>,
}

/// How one answer ended.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    /// The text shown.
    pub text: String,
    /// The interrupt stopped it.
    pub interrupted: bool,
    /// It ended with an error (printed).
    pub failed: bool,
}

impl Target {
    /// The warden `url` names; else the first one answering on the port
    /// pool; else one started here over `models_dir` with `model` (a path
    /// or an id) as its default. A `url` that answers nothing is an error:
    /// a second warden is never started beside the one named.
    pub async fn reach(url: Option<&str>, models_dir: Option<PathBuf>, model: Option<&str>) -> anyhow::Result<Self> {
        let key = std::env::var("WARDEN_API_KEY").ok().filter(|k| !k.is_empty());
        if let Some(u) = url {
            return Ok(Self {
                server: Server::at(normalise_url(u), key),
                local: None,
            });
        }
        if let Some(base) = super::chat::find_server(None).await {
            return Ok(Self {
                server: Server::at(base, key),
                local: None,
            });
        }
        let cfg = WardenConfig::load(None)?;
        let catalog = super::build_catalog(&cfg, models_dir, model.map(str::to_string), false)?;
        eprintln!("(no llm-warden server running: starting one for this session)");
        let warden = Warden::start(cfg, catalog)?;
        let bound = crate::server::bind(warden.clone(), "127.0.0.1", Some(0))?;
        actix_web::rt::spawn(bound.server);
        Ok(Self {
            server: Server::at(format!("http://127.0.0.1:{}", bound.port), key),
            local: Some(warden),
        })
    }

    /// Whether the warden was started for this session (its default model
    /// is then the one asked for).
    pub fn is_local(&self) -> bool {
        self.local.is_some()
    }

    /// Streams the answer to `body` (a chat completion request), printing
    /// it as it comes, until it ends or `interrupt` completes (the answer
    /// is then dropped, which cancels it in the warden).
    pub async fn ask(&self, body: &Value, interrupt: impl Future<Output = ()>) -> anyhow::Result<Answer> {
        let mut p = Printer::default();
        let mut req = http_client()
            .post(format!("{}/v1/chat/completions", self.server.base()))
            .json(body);
        if let Some(k) = self.server.key() {
            req = req.bearer_auth(k);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() => bail!(
                "no llm-warden server is running on {} (start one with `llm-warden serve`)",
                self.server.base()
            ),
            Err(e) => return Err(e.into()),
        };
        if !resp.status().is_success() {
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            let what = "POST /v1/chat/completions";
            let said =
                super::client::describe_failure(self.server.base(), what, status, &text, self.server.key().is_some());
            eprintln!("llm-warden: error: {said}");
            p.answer.failed = true;
            return Ok(p.answer);
        }
        let mut stream = resp.bytes_stream();
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        tokio::pin!(interrupt);
        loop {
            tokio::select! {
                chunk = stream.next() => {
                    let Some(chunk) = chunk else { break };
                    let chunk = chunk?;
                    let _ = parser.push(&chunk, &mut events);
                    for ev in events.drain(..) {
                        p.event(&ev);
                    }
                    p.notices(&chunk);
                }
                () = &mut interrupt => {
                    p.answer.interrupted = true;
                    break;
                }
            }
        }
        Ok(p.answer)
    }

    /// Stops the warden started for this session (its child with it).
    pub async fn close(self) {
        if let Some(w) = self.local {
            w.shutdown().await;
        }
    }
}

/// Prints content deltas as they come, notices and errors to stderr.
#[derive(Default)]
struct Printer {
    answer: Answer,
}

impl Printer {
    fn event(&mut self, ev: &SseEvent) {
        if ev.is_done() {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(&ev.data) else {
            return;
        };
        if v.get("error").is_some() {
            self.error(&v);
            return;
        }
        if let Some(text) = v.pointer("/choices/0/delta/content").and_then(|c| c.as_str()) {
            print!("{text}");
            let _ = std::io::stdout().flush();
            self.answer.text.push_str(text);
        }
    }

    /// Warden notices travel as SSE comments, which the parser skips.
    fn notices(&mut self, chunk: &Bytes) {
        for line in chunk.split(|&b| b == b'\n') {
            if let Some(rest) = line.strip_prefix(b": warden ") {
                let v = serde_json::from_slice::<Value>(rest).unwrap_or(Value::Null);
                eprintln!(
                    "[warden] {}",
                    notice_text(&v).unwrap_or_else(|| String::from_utf8_lossy(rest).into())
                );
            }
        }
    }

    fn error(&mut self, v: &Value) {
        self.answer.failed = true;
        eprintln!("\nllm-warden: error: {}", error_text(v));
        if let Some(raw) = v.pointer("/error/raw").and_then(|r| r.as_str()) {
            eprintln!("model server output:\n{raw}");
        }
    }
}

/// An error event's sentence: its message, then its code.
pub(crate) fn error_text(v: &Value) -> String {
    let e = v.get("error").unwrap_or(v);
    let message = e.get("message").and_then(|m| m.as_str()).unwrap_or("the answer failed");
    match e.get("code").and_then(|c| c.as_str()) {
        Some(code) => format!("{message} ({code})"),
        None => message.to_string(),
    }
}

/// A notice of the warden (`status::Notice` as JSON) as a sentence for a
/// person at a terminal; `None` for one this client does not know (it is
/// then shown as it came).
pub(crate) fn notice_text(v: &Value) -> Option<String> {
    let s = |k: &str| v.get(k).and_then(Value::as_str);
    Some(match s("t")? {
        "loading" => format!("loading {}…", s("model")?),
        "loaded" => {
            let ms = v.get("load_ms").and_then(Value::as_u64)?;
            format!("{} loaded in {:.1} s", s("model")?, ms as f64 / 1000.0)
        }
        "memory_reload" if s("reason")? == "idle" => "the model was unloaded while idle: reloading it".into(),
        "memory_reload" => "memory ran short: the model reloads with less memory".into(),
        "memory_warning" if s("reason")? == "external" => {
            "memory is short, and not because of this model: other programs hold it".into()
        }
        "memory_warning" => "memory ran short: the warden gave the model less of it".into(),
        "worker_missing" => {
            let workers: Vec<&str> = v.get("workers")?.as_array()?.iter().filter_map(Value::as_str).collect();
            let window = v.get("window").and_then(Value::as_u64);
            let full = v.get("full_window").and_then(Value::as_u64);
            let mut line = format!("loaded without the RPC workers {}", workers.join(", "));
            match (window, full) {
                (Some(w), Some(f)) => line.push_str(&format!(": a window of {w} tokens instead of {f}")),
                (Some(w), None) => line.push_str(&format!(": a window of {w} tokens")),
                _ => {}
            }
            line
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each notice reads as a sentence; an unknown one is left to its JSON.
    #[test]
    fn notices_read_as_sentences() {
        let rows = [
            (json!({"t": "loading", "model": "smol"}), Some("loading smol…")),
            (
                json!({"t": "loaded", "model": "smol", "load_ms": 1234}),
                Some("smol loaded in 1.2 s"),
            ),
            (
                json!({"t": "memory_reload", "reason": "idle"}),
                Some("the model was unloaded while idle: reloading it"),
            ),
            (
                json!({"t": "memory_reload", "reason": "brake"}),
                Some("memory ran short: the model reloads with less memory"),
            ),
            (
                json!({"t": "memory_warning", "reason": "external"}),
                Some("memory is short, and not because of this model: other programs hold it"),
            ),
            (
                json!({"t": "memory_warning", "reason": "acted"}),
                Some("memory ran short: the warden gave the model less of it"),
            ),
            (
                json!({"t": "worker_missing", "workers": ["a:50052"], "window": 4096, "full_window": 8192}),
                Some("loaded without the RPC workers a:50052: a window of 4096 tokens instead of 8192"),
            ),
            // why: a notice of a newer warden: shown as it came
            (json!({"t": "something_new"}), None),
            // why: a known notice missing its fields: the same
            (json!({"t": "loaded", "model": "smol"}), None),
        ];
        for (i, (v, want)) in rows.into_iter().enumerate() {
            assert_eq!(notice_text(&v).as_deref(), want, "row {i}");
        }
    }

    /// An error reads as its message then its code, under one prefix.
    #[test]
    fn errors_read_as_message_and_code() {
        let rows = [
            (
                json!({"error": {"message": "the model server died", "code": "child_killed"}}),
                "the model server died (child_killed)",
            ),
            (json!({"error": {"message": "no code here"}}), "no code here"),
            (json!({"message": "bare", "code": "x"}), "bare (x)"),
            (json!({}), "the answer failed"),
        ];
        for (i, (v, want)) in rows.into_iter().enumerate() {
            assert_eq!(error_text(&v), want, "row {i}");
        }
    }
}
