//! The side door: the one way past the mailbox to a live child, for the
//! requests that must not wait behind a generation and cannot disturb one:
//! `/tokenize`, `/detokenize`, the token counters and `/apply-template`
//! (llama-server answers them on an HTTP thread from the vocabulary and the
//! template, never through its task loop: `law::route`) and the child's
//! own `/metrics` (a high-priority task there, answered between two decode
//! steps). The engine publishes a `Door` on a watch channel whenever its
//! child changes; `Warden` reads it.
//!
//! A door can do nothing else: its client (and the child's key inside it)
//! is private here and its only methods are those three requests, so the
//! child's key never leaves the engine in a form that could start a
//! generation, and it never appears in a status or a log.

use std::time::Duration;

use bytes::Bytes;

use crate::child::client::ChildClient;
use crate::law::route::Route;

/// The live child, as the side door sees it.
#[derive(Debug, Clone)]
pub struct Door {
    /// The model it runs.
    pub model: String,
    /// Its port (a changed port is a new child).
    pub port: u16,
    client: ChildClient,
    /// Its captured output (redacted as captured): `/warden/logs` and
    /// diagnostics read it without the mailbox.
    output: std::sync::Arc<crate::child::output::OutputLog>,
}

/// Why a door request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoorError {
    /// Not a door route (only those `Route::beside_turns` pass here).
    NotADoorRoute,
    /// The child did not answer in time.
    Timeout,
    /// The connection failed (the child is stopping or gone).
    Transport(String),
}

impl Door {
    /// A door to the live child `c`.
    pub(crate) fn of(c: &super::child_holder::LiveChild) -> Self {
        Self {
            model: c.model_id().to_string(),
            port: c.port.port(),
            client: c.client.clone(),
            output: c.process.output().clone(),
        }
    }

    /// The child's last `lines` lines of output.
    pub fn output_tail(&self, lines: usize) -> Vec<String> {
        self.output.tail(lines)
    }

    /// The lines its output log keeps apart from the ring (`OutputLog::kept`).
    pub fn output_kept(&self) -> Vec<String> {
        self.output.kept()
    }

    /// POSTs a request of a route answered beside turns; its status and body.
    pub async fn tokenizer(&self, route: Route, body: Bytes, timeout: Duration) -> Result<(u16, Bytes), DoorError> {
        if !route.beside_turns() {
            return Err(DoorError::NotADoorRoute);
        }
        let send = async {
            let r = self.client.send_retrying(route.path(), body, false).await?;
            let status = r.status().as_u16();
            Ok::<_, reqwest::Error>((status, r.bytes().await?))
        };
        match tokio::time::timeout(timeout, send).await {
            Err(_) => Err(DoorError::Timeout),
            Ok(Err(e)) => Err(DoorError::Transport(e.without_url().to_string())),
            Ok(Ok(v)) => Ok(v),
        }
    }

    /// The child's own `/metrics` text, `None` when it does not answer in
    /// `timeout`.
    pub async fn child_metrics(&self, timeout: Duration) -> Option<String> {
        let r = self
            .client
            .request(reqwest::Method::GET, "/metrics")
            .timeout(timeout)
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.text().await.ok()
    }
}
