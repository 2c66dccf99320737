//! A turn as a test sends and reads it: the request (`chat`), everything it
//! sent (`Turn`, `collect`), and receiving with a bound that names what was
//! lost (`recv_or_fail`, `event_or_fail`).
use std::time::Duration;

use llm_warden::TurnEvent;
use llm_warden::TurnRequest;
use llm_warden::status::WardenEvent;
use tokio::sync::{broadcast, mpsc};

/// Receives within 60 s, or fails naming what was lost.
pub async fn recv_or_fail<T>(rx: &mut mpsc::Receiver<T>, what: &str) -> T {
    match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
        Ok(Some(v)) => v,
        Ok(None) => panic!("channel closed while waiting for {what}"),
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// Waits for a turn's first streamed chunk (its notices before it are
/// passed over).
pub async fn first_chunk(rx: &mut mpsc::Receiver<TurnEvent>) {
    loop {
        if let TurnEvent::Chunk(_) = recv_or_fail(rx, "the first token").await {
            return;
        }
    }
}

/// Waits for the first lifecycle event matching `pred`.
pub async fn event_or_fail(
    rx: &mut broadcast::Receiver<WardenEvent>,
    what: &str,
    pred: impl Fn(&WardenEvent) -> bool,
) -> WardenEvent {
    let fut = async {
        loop {
            match rx.recv().await {
                Ok(ev) if pred(&ev) => return ev,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => panic!("events closed while waiting for {what}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// A streamed chat turn's request.
pub fn chat(model: Option<&str>, max_tokens: u32, stream: bool) -> TurnRequest {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 42,
    });
    TurnRequest::new(llm_warden::status::Route::Chat, body.as_object().unwrap().clone())
        .model(model.map(str::to_string))
        .stream(stream)
        // As the HTTP layer sends every chat turn: a conversation's turn.
        .options(llm_warden::TurnOptions {
            stateful: true,
            announce_idle_reload: false,
        })
        .conversation(Some("test-conversation".into()))
}

/// Everything a turn sent, until it ended.
#[derive(Debug, Default)]
pub struct Turn {
    pub notices: Vec<llm_warden::Notice>,
    pub chunks: Vec<bytes::Bytes>,
    pub body: Option<(u16, bytes::Bytes)>,
    pub error: Option<llm_warden::error::ApiError>,
    pub done: bool,
}

impl Turn {
    /// The concatenated `delta.content` of the chunks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.chunks {
            let s = String::from_utf8_lossy(c);
            for line in s.lines() {
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(data)
                    && let Some(t) = v.pointer("/choices/0/delta/content").and_then(|t| t.as_str())
                {
                    out.push_str(t);
                }
            }
        }
        out
    }
}

/// Collects a turn's events until it ends.
pub async fn collect(mut rx: mpsc::Receiver<TurnEvent>) -> Turn {
    let mut t = Turn::default();
    loop {
        match recv_or_fail(&mut rx, "the turn's next event").await {
            TurnEvent::Notice(n) => t.notices.push(n),
            TurnEvent::Chunk(c) => t.chunks.push(c),
            TurnEvent::Body { status, body } => {
                t.body = Some((status, body));
                return t;
            }
            TurnEvent::Error(e) => {
                t.error = Some(e.to_api());
                return t;
            }
            TurnEvent::Done => {
                t.done = true;
                return t;
            }
        }
    }
}

/// A turn collected with when its first chunk and its end arrived.
#[derive(Debug)]
pub struct Timed {
    /// What it sent.
    pub turn: Turn,
    /// Its first streamed chunk.
    pub first: Option<tokio::time::Instant>,
    /// Its last event.
    pub end: tokio::time::Instant,
}

/// Collects a turn's events until it ends, timing its first chunk and end.
pub async fn collect_timed(mut rx: mpsc::Receiver<TurnEvent>) -> Timed {
    let mut t = Turn::default();
    let mut first = None;
    loop {
        let ev = recv_or_fail(&mut rx, "the turn's next event").await;
        let now = tokio::time::Instant::now();
        match ev {
            TurnEvent::Notice(n) => t.notices.push(n),
            TurnEvent::Chunk(c) => {
                first.get_or_insert(now);
                t.chunks.push(c);
            }
            TurnEvent::Body { status, body } => t.body = Some((status, body)),
            TurnEvent::Error(e) => t.error = Some(e.to_api()),
            TurnEvent::Done => t.done = true,
        }
        if t.done || t.error.is_some() || t.body.is_some() {
            return Timed {
                turn: t,
                first,
                end: now,
            };
        }
    }
}
