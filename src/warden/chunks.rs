//! A turn as typed chunks, for embedders: `Warden::chat` submits a turn
//! exactly as `submit` does (the same queue and bound) and hands back a
//! `TurnStream` whose items are the answer's text, the child's other events
//! parsed, the warden's notices, an error or the end. An embedder never
//! parses SSE bytes itself; `submit` stays for the HTTP layer's zero-copy
//! relay.

use std::collections::VecDeque;

use tokio::sync::mpsc;

use super::{TurnRequest, Warden};
use crate::error::WardenError;
use crate::messages::{Notice, TurnEvent};
use crate::sse::SseParser;

/// One piece of a turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    /// Text of the answer: a streamed `delta.content`, or a whole answer's
    /// `message.content`.
    Text(String),
    /// Any event of the child's without text (the final event with its
    /// `finish_reason` and timings, a tool call, a whole answer's body).
    Event(serde_json::Value),
    /// A notice of the warden (loading, a memory reload or warning, a worker
    /// left out).
    Notice(Notice),
    /// The turn failed; nothing follows.
    Error(WardenError),
    /// The turn completed; nothing follows.
    Done,
}

/// A turn's chunks, in order.
#[derive(Debug)]
pub struct TurnStream {
    rx: mpsc::Receiver<TurnEvent>,
    parser: SseParser,
    ready: VecDeque<Chunk>,
    ended: bool,
}

impl TurnStream {
    fn new(rx: mpsc::Receiver<TurnEvent>) -> Self {
        Self {
            rx,
            parser: SseParser::new(),
            ready: VecDeque::new(),
            ended: false,
        }
    }

    /// The next chunk; `None` after `Done` or `Error` (an engine that went
    /// away mid-turn ends it with `Error(engine_unavailable)`).
    pub async fn next(&mut self) -> Option<Chunk> {
        loop {
            if let Some(c) = self.ready.pop_front() {
                return Some(c);
            }
            if self.ended {
                return None;
            }
            // A channel closed before Done or Error: the engine went away.
            let ev = self
                .rx
                .recv()
                .await
                .unwrap_or_else(|| TurnEvent::Error(WardenError::EngineUnavailable));
            self.take(ev);
        }
    }

    /// The whole answer's text, or the turn's error.
    pub async fn text(mut self) -> Result<String, WardenError> {
        let mut out = String::new();
        while let Some(c) = self.next().await {
            match c {
                Chunk::Text(t) => out.push_str(&t),
                Chunk::Error(e) => return Err(e),
                _ => {}
            }
        }
        Ok(out)
    }

    fn take(&mut self, ev: TurnEvent) {
        match ev {
            TurnEvent::Chunk(raw) => {
                let mut events = Vec::new();
                // An oversized event cannot reach here: the engine's own
                // parser refused it before relaying.
                let _ = self.parser.push(&raw, &mut events);
                for e in events.iter().filter(|e| !e.is_done()) {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&e.data) {
                        self.ready.push_back(chunk_of(v, "/choices/0/delta/content"));
                    }
                }
            }
            TurnEvent::Body { body, .. } => {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
                    if let Some(t) = text_at(&v, "/choices/0/message/content") {
                        self.ready.push_back(Chunk::Text(t));
                    }
                    self.ready.push_back(Chunk::Event(v));
                }
                self.end(Chunk::Done);
            }
            TurnEvent::Notice(n) => self.ready.push_back(Chunk::Notice(n)),
            TurnEvent::Error(e) => self.end(Chunk::Error(e)),
            TurnEvent::Done => self.end(Chunk::Done),
        }
    }

    fn end(&mut self, last: Chunk) {
        self.ready.push_back(last);
        self.ended = true;
    }
}

fn text_at(v: &serde_json::Value, pointer: &str) -> Option<String> {
    v.pointer(pointer)?
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

/// An event with text at `pointer` is `Text`, any other `Event`.
fn chunk_of(v: serde_json::Value, pointer: &str) -> Chunk {
    match text_at(&v, pointer) {
        Some(t) => Chunk::Text(t),
        None => Chunk::Event(v),
    }
}

impl Warden {
    /// Submits a turn (the same queue and bound as `submit`) and hands its
    /// answer back as typed chunks.
    pub fn chat(&self, req: TurnRequest) -> Result<TurnStream, WardenError> {
        self.submit(req).map(TurnStream::new)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn stream_of(events: Vec<TurnEvent>) -> TurnStream {
        let (tx, rx) = mpsc::channel(16);
        for e in events {
            tx.try_send(e).unwrap();
        }
        TurnStream::new(rx)
    }

    async fn all(mut s: TurnStream) -> Vec<Chunk> {
        let mut out = Vec::new();
        while let Some(c) = s.next().await {
            out.push(c);
        }
        out
    }

    #[tokio::test]
    async fn rows() {
        let delta = |t: &str| {
            TurnEvent::Chunk(Bytes::from(format!(
                "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n"
            )))
        };
        let fin = serde_json::json!({"choices": [{"delta": {}, "finish_reason": "length"}]});
        // why: deltas become text, the final event stays an event, [DONE] is
        // not a chunk, and Done ends the stream
        let got = all(stream_of(vec![
            delta("Par"),
            // an event split across two relayed chunks still parses
            TurnEvent::Chunk(Bytes::from_static(b"data: {\"choices\":[{\"delta\":{\"con")),
            TurnEvent::Chunk(Bytes::from_static(b"tent\":\"is\"}}]}\n\n")),
            TurnEvent::Chunk(Bytes::from(format!("data: {fin}\n\n"))),
            TurnEvent::Chunk(Bytes::from_static(b"data: [DONE]\n\n")),
            TurnEvent::Done,
        ]))
        .await;
        assert_eq!(
            got,
            [
                Chunk::Text("Par".into()),
                Chunk::Text("is".into()),
                Chunk::Event(fin),
                Chunk::Done
            ]
        );
        // why: a whole answer gives its text and its body, then the end
        let body = serde_json::json!({"choices": [{"message": {"content": "Paris"}}]});
        let got = all(stream_of(vec![TurnEvent::Body {
            status: 200,
            body: Bytes::from(body.to_string()),
        }]))
        .await;
        assert_eq!(got, [Chunk::Text("Paris".into()), Chunk::Event(body), Chunk::Done]);
        // why: an error ends the stream and `text` returns it
        let e = WardenError::ModelNotFound("x".into());
        let s = stream_of(vec![delta("a"), TurnEvent::Error(e.clone())]);
        assert_eq!(s.text().await.unwrap_err().code(), "model_not_found");
        // why: notices pass through in order
        let n = Notice::Loading { model: "m".into() };
        let got = all(stream_of(vec![
            TurnEvent::Notice(n.clone()),
            delta("x"),
            TurnEvent::Done,
        ]))
        .await;
        assert_eq!(got, [Chunk::Notice(n), Chunk::Text("x".into()), Chunk::Done]);
    }
}
