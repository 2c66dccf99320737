//! One chat turn timed at the client, the same way for llama-server direct
//! and for the warden.
//!
//! The body is encoded once, before the clock starts. The response is read
//! chunk by chunk through the warden's own SSE parser
//! (`llm_warden::sse::SseParser`); each chunk is stamped when it
//! arrives, before any parsing. A *token* is a data event whose
//! `choices[0].delta.content` is a non-empty string (llama-server sends one
//! per generated token; the role-only opening event is not one). Recorded:
//!
//! - `ttft`: request sent to first token;
//! - client decode rate: `(tokens - 1) / (last token - first token)`, what a
//!   user sees;
//! - server decode rate: `timings.predicted_per_second` of the final event;
//! - the prompt tokens the server processed and reused (`timings.prompt_n`,
//!   `timings.cache_n` of the final event);
//! - the instants of the last data event before `[DONE]` and of `[DONE]`
//!   itself (the warden holds `[DONE]` back until the brake's turn end is
//!   done, so the gap is the brake's time);
//! - warden notices (`: warden {json}` SSE comments), which the parser skips.
//!
//! llama-server closes its connection after every streamed answer while
//! advertising keep-alive (see `llm_warden::child::client`), so a pooled
//! connection to it may be dead when the next turn takes it: the request
//! then fails before any byte of an answer ("connection closed before
//! message completed"; the pairs phase failed on it once in 8 rounds, on
//! the direct side). Such a request never reached the server; it is sent
//! once more on a fresh connection and the clock restarts there, for both
//! sides alike (`send`). A real client of llama-server meets the same.

use std::time::Duration;

use anyhow::bail;
use bytes::Bytes;
use futures::StreamExt;
use llm_warden::child::client::never_reached;
use llm_warden::sse::SseParser;
use serde_json::{Value, json};
use tokio::time::Instant;

/// Where a turn goes: a base URL and, for llama-server, its key.
#[derive(Clone)]
pub struct Target {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `Bearer KEY`, when the server wants one.
    pub bearer: Option<String>,
    /// `X-Warden-Conversation`, for the kv phase's conversations.
    pub conversation: Option<String>,
}

impl Target {
    /// A POST to `/v1/chat/completions` with `body`.
    fn chat(&self, http: &reqwest::Client, body: Bytes) -> reqwest::RequestBuilder {
        let mut r = http
            .post(format!("{}/v1/chat/completions", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(b) = &self.bearer {
            r = r.header(reqwest::header::AUTHORIZATION, b);
        }
        if let Some(c) = &self.conversation {
            r = r.header("X-Warden-Conversation", c);
        }
        r
    }
}

/// A chat body: greedy, seeded, `max_tokens` exactly (`ignore_eos`, so both
/// sides generate the same count), streamed or not.
pub fn body(prompt: &str, max_tokens: u32, stream: bool) -> Bytes {
    let v = json!({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 42,
        "ignore_eos": true,
        "stream": stream,
    });
    Bytes::from(serde_json::to_vec(&v).expect("JSON encodes"))
}

/// What one streamed turn looked like from the client.
#[derive(Debug, Clone)]
pub struct Turn {
    /// When the request was handed to the client library.
    pub sent: Instant,
    /// The first token's arrival.
    pub first_token: Option<Instant>,
    /// The last token's arrival.
    pub last_token: Option<Instant>,
    /// The last data event before `[DONE]` (the timings event).
    pub last_event: Option<Instant>,
    /// `[DONE]`'s arrival (or the end of the body without one).
    pub done: Option<Instant>,
    /// Tokens (content events) received.
    pub tokens: usize,
    /// `timings.predicted_per_second` of the final event.
    pub server_tps: Option<f64>,
    /// `timings.prompt_n` of the final event: prompt tokens the model
    /// server processed (the kv phase's proof of a re-read).
    pub prompt_n: Option<u64>,
    /// `timings.cache_n`: prompt tokens it reused from its slot.
    pub cache_n: Option<u64>,
    /// `timings.prompt_ms`: the model server's time on the prompt.
    pub prompt_ms: Option<f64>,
    /// Warden notices seen (`: warden {json}`), as their JSON text.
    pub notices: Vec<String>,
}

impl Turn {
    /// Request to first token, in ms.
    pub fn ttft_ms(&self) -> Option<f64> {
        Some(ms(self.first_token? - self.sent))
    }

    /// The whole turn: sent to `[DONE]` (or the body's end).
    pub fn whole_ms(&self) -> Option<f64> {
        Some(ms(self.done? - self.sent))
    }

    /// Tokens per second from the first to the last token.
    pub fn client_tps(&self) -> Option<f64> {
        let span = (self.last_token? - self.first_token?).as_secs_f64();
        (self.tokens >= 2 && span > 0.0).then(|| (self.tokens - 1) as f64 / span)
    }
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Sends `body` (which must ask for a stream) and reads the answer to its
/// end.
pub async fn stream(http: &reqwest::Client, to: &Target, body: Bytes) -> anyhow::Result<Turn> {
    let (sent, resp) = send(http, to, body).await?;
    if !resp.status().is_success() {
        let status = resp.status();
        bail!("HTTP {status}: {}", resp.text().await.unwrap_or_default());
    }
    let mut t = Turn {
        sent,
        first_token: None,
        last_token: None,
        last_event: None,
        done: None,
        tokens: 0,
        server_tps: None,
        prompt_n: None,
        cache_n: None,
        prompt_ms: None,
        notices: Vec::new(),
    };
    let mut parser = SseParser::new();
    let mut events = Vec::with_capacity(4);
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let now = Instant::now();
        let chunk = chunk?;
        collect_notices(&chunk, &mut t.notices);
        parser.push(&chunk, &mut events)?;
        for ev in events.drain(..) {
            if ev.is_done() {
                t.done = Some(now);
                return Ok(t);
            }
            if ev.is_error() {
                bail!("error event: {}", String::from_utf8_lossy(&ev.data));
            }
            t.last_event = Some(now);
            let v: Value = serde_json::from_slice(&ev.data)?;
            if v.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                t.tokens += 1;
                t.first_token.get_or_insert(now);
                t.last_token = Some(now);
            }
            if let Some(tps) = v.pointer("/timings/predicted_per_second").and_then(Value::as_f64) {
                t.server_tps = Some(tps);
            }
            if let Some(n) = v.pointer("/timings/prompt_n").and_then(Value::as_u64) {
                t.prompt_n = Some(n);
                t.cache_n = v.pointer("/timings/cache_n").and_then(Value::as_u64);
                t.prompt_ms = v.pointer("/timings/prompt_ms").and_then(Value::as_f64);
            }
        }
    }
    t.done = Some(Instant::now());
    Ok(t)
}

/// Sends a chat request; when it provably never reached the server (the
/// warden's own rule for its child, `never_reached`), once more. The
/// instant it was sent (the attempt that reached it) and the response.
async fn send(http: &reqwest::Client, to: &Target, body: Bytes) -> anyhow::Result<(Instant, reqwest::Response)> {
    let sent = Instant::now();
    match to.chat(http, body.clone()).send().await {
        Ok(r) => Ok((sent, r)),
        Err(e) if never_reached(&e) => {
            let sent = Instant::now();
            Ok((sent, to.chat(http, body).send().await?))
        }
        Err(e) => Err(e.into()),
    }
}

/// A non-streamed turn, read whole; returns the body.
pub async fn whole(http: &reqwest::Client, to: &Target, body: Bytes) -> anyhow::Result<Bytes> {
    let (_, resp) = send(http, to, body).await?;
    let status = resp.status();
    let bytes = resp.bytes().await?;
    if !status.is_success() {
        bail!("HTTP {status}: {}", String::from_utf8_lossy(&bytes));
    }
    Ok(bytes)
}

/// Appends the JSON of every `: warden {json}` comment line in `chunk` (the
/// warden writes each notice as one chunk).
fn collect_notices(chunk: &[u8], out: &mut Vec<String>) {
    const TAG: &[u8] = b": warden ";
    for start in memchr::memmem::find_iter(chunk, TAG) {
        let rest = &chunk[start + TAG.len()..];
        let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
        out.push(String::from_utf8_lossy(&rest[..end]).into_owned());
    }
}

/// Times `n` sequential GETs of `url`, each read whole; milliseconds.
pub async fn time_gets(http: &reqwest::Client, url: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = http.get(url).send().await?;
        let ok = r.status().is_success();
        let _ = r.bytes().await?;
        out.push(ms(t.elapsed()));
        if !ok {
            bail!("GET {url} failed");
        }
    }
    Ok(out)
}
