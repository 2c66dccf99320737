//! The HTTP client to one child: `/health`, `/props`, the readiness ping,
//! the turns' requests (`send_retrying`) and the slot actions (`post_json`). Every call carries the child's bearer key (llama-server
//! ignores it on `/health`; mlx-vlm needs it there) and never logs it.
//!
//! One `reqwest::Client` is shared by every child (loopback, keep-alive, no
//! proxy: a system proxy variable must never capture 127.0.0.1 traffic);
//! a stream goes on a connection of its own, from a client that pools
//! none (`unpooled`, see `send_retrying`).
//!
//! # The connection to the child
//!
//! Measured on llama-server b10883 (cpp-httplib): it keeps a connection
//! alive 5 s idle and for at most 100 requests, and it **closes the
//! connection after every streamed answer** although that answer advertised
//! `Keep-Alive` (its chunked content provider returns `false` after
//! `sink.done()`, which httplib takes for a failed write; `curl` shows
//! "Re-using existing connection ... Connection died" on the second streamed
//! request). hyper saw a clean chunked end and a keep-alive header and put
//! such a connection back in its pool; the next request sent on it as the
//! child's FIN arrived met a closed socket: measured against the warden
//! before this fix, 2 of 1,000 back-to-back turns (3 streamed for each one
//! whole) failed this way after a 1 s wait, as a 502 `upstream_transport`
//! from a healthy child, and `./bench/run.sh`'s `rss` phase failed on it;
//! `ss` showed a new connection to the child for every streamed turn
//! (hundreds in TIME-WAIT) while a whole answer's connection was reused.
//!
//! The fixes, at the root: a streamed request says `Connection: close`, so
//! the pool never holds a connection the child is about to close (a new
//! loopback connection costs well under a millisecond); every answer is read
//! to its end (`turn::read_to_end`), so a whole answer's connection is
//! reused turn after turn; the pool drops an idle connection after
//! `POOL_IDLE` (below the child's 5 s) and keeps at most `POOL_MAX_IDLE`;
//! the child's HTTP threads are set explicitly (`engines::llama`); and a
//! request that provably never reached the child (refused, or closed before
//! any byte of an answer) is sent once more on a fresh connection
//! (`send_retrying`).

use std::time::Duration;

use bytes::Bytes;

use crate::secret::ApiKey;

/// What `/health` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// 200: the model is loaded.
    Ready,
    /// 503: llama-server is loading the model.
    Loading,
    /// Nothing listens yet (mlx-vlm until its model is in) or the connection failed.
    Unreachable,
    /// Any other status.
    Other(u16),
}

/// A handle for talking to one child.
#[derive(Debug, Clone)]
pub struct ChildClient {
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>`.
    base: String,
    key: ApiKey,
}

/// How long an idle pooled connection is kept: well under the child's own
/// 5 s keep-alive, so the pool never offers one the child is closing.
pub const POOL_IDLE: Duration = Duration::from_secs(2);
/// Idle connections kept per child: one for the next turn, one for a probe.
pub const POOL_MAX_IDLE: usize = 2;

/// The client every child shares.
pub fn shared_http_client() -> reqwest::Client {
    client_with_pool(POOL_MAX_IDLE)
}

/// A client that keeps no connection: each request opens its own, on the
/// runtime that sends it, and closes it at its end.
fn unpooled() -> &'static reqwest::Client {
    static UNPOOLED: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    UNPOOLED.get_or_init(|| client_with_pool(0))
}

fn client_with_pool(max_idle: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(max_idle)
        .build()
        // Building fails only when the TLS backend cannot initialise; this
        // client has no TLS at all.
        .expect("a plain-HTTP reqwest client always builds")
}

/// Whether a failed send proves the child never saw the request: the
/// connection was refused, or it failed before any byte of an answer came
/// back (a pooled connection the child had just closed). A timeout proves
/// nothing (the child may be working on it) and is never retried.
pub fn never_reached(e: &reqwest::Error) -> bool {
    !e.is_timeout() && (e.is_connect() || e.is_request())
}

impl ChildClient {
    /// A client for the child on `port`.
    pub fn new(http: reqwest::Client, port: u16, key: ApiKey) -> Self {
        Self {
            http,
            base: format!("http://127.0.0.1:{port}"),
            key,
        }
    }

    /// A request builder for `path` with the bearer key set.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{}", self.base, path))
            .header(reqwest::header::AUTHORIZATION, self.key.bearer())
    }

    /// One `/health` probe.
    pub async fn health(&self, timeout: Duration) -> Health {
        match self
            .request(reqwest::Method::GET, "/health")
            .timeout(timeout)
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => Health::Ready,
            Ok(r) if r.status().as_u16() == 503 => Health::Loading,
            Ok(r) => Health::Other(r.status().as_u16()),
            Err(_) => Health::Unreachable,
        }
    }

    /// GET `path` as JSON, bounded by `timeout`.
    pub async fn get_json(&self, path: &str, timeout: Duration) -> Result<serde_json::Value, reqwest::Error> {
        self.request(reqwest::Method::GET, path)
            .timeout(timeout)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    }

    /// POSTs a JSON body (already encoded) to `path`.
    pub async fn post_json(&self, path: &str, body: Bytes) -> Result<reqwest::Response, reqwest::Error> {
        self.request(reqwest::Method::POST, path)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
    }

    /// POSTs `body` to `path`; a send that never reached the child is tried
    /// once more on a fresh connection (never one from the pool). With
    /// `close` (a stream, which the child closes at its end), the request
    /// says `Connection: close` and goes on a connection of its own, opened
    /// where it is sent: a pooled one would be served by the task of the
    /// runtime that opened it (the engine's), and every token of the stream
    /// would cross to the relay's thread (`Outbox::home`).
    pub async fn send_retrying(
        &self,
        path: &str,
        body: Bytes,
        close: bool,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let post = |http: &reqwest::Client, body: Bytes| {
            let r = http
                .post(format!("{}{}", self.base, path))
                .header(reqwest::header::AUTHORIZATION, self.key.bearer())
                .header(reqwest::header::CONTENT_TYPE, "application/json");
            let r = if close {
                r.header(reqwest::header::CONNECTION, "close")
            } else {
                r
            };
            r.body(body).send()
        };
        let first = if close { unpooled() } else { &self.http };
        match post(first, body.clone()).await {
            Err(e) if never_reached(&e) => {
                tracing::debug!(
                    path,
                    "the request never reached the model server ({e}); sending it once more on a fresh connection"
                );
                post(unpooled(), body).await
            }
            r => r,
        }
    }
}
