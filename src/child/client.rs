//! The HTTP client to one child: `/health`, `/props`, the readiness ping and
//! the chat request. Every call carries the child's bearer key (llama-server
//! ignores it on `/health`; mlx-vlm needs it there) and never logs it.
//!
//! One `reqwest::Client` is shared by every child (loopback, keep-alive, no
//! proxy: a system proxy variable must never capture 127.0.0.1 traffic).

use std::time::Duration;

use bytes::Bytes;

use super::key::ApiKey;

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

/// The client every child shares.
pub fn shared_http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        // Building fails only when the TLS backend cannot initialise; this
        // client has no TLS at all.
        .expect("a plain-HTTP reqwest client always builds")
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

    /// The child's base URL (no secret in it).
    pub fn base(&self) -> &str {
        &self.base
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

    /// POSTs a chat request body (already encoded) to `/v1/chat/completions`.
    pub async fn chat(&self, body: Bytes) -> Result<reqwest::Response, reqwest::Error> {
        self.request(reqwest::Method::POST, "/v1/chat/completions")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
    }
}
