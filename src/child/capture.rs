//! The child's output on its way in: one drain task per stream (stdout,
//! stderr) forwarding each line to `tracing` and the `OutputLog`, with the
//! child's key redacted first. Called by `process::spawn` only.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::secret::ApiKey;
use super::output::OutputLog;
use super::process::SpawnSpec;

/// One drain task per output stream, both into one redacted log.
pub(super) fn capture(
    child: &mut tokio::process::Child,
    spec: &SpawnSpec,
    pid: u32,
) -> (Arc<OutputLog>, Vec<tokio::task::JoinHandle<()>>) {
    let output = Arc::new(OutputLog::default());
    let redact = Redactor::new(spec.secret.as_ref());
    let mut drains = Vec::with_capacity(2);
    if let Some(out) = child.stdout.take() {
        drains.push(tokio::spawn(drain(
            out,
            output.clone(),
            spec.label,
            pid,
            redact.clone(),
        )));
    }
    if let Some(err) = child.stderr.take() {
        drains.push(tokio::spawn(drain(err, output.clone(), spec.label, pid, redact)));
    }
    (output, drains)
}

/// Removes the key (whole, and the `****abcd` suffix form) from output lines.
#[derive(Clone, Default)]
struct Redactor {
    needles: Vec<String>,
}

impl Redactor {
    fn new(key: Option<&ApiKey>) -> Self {
        let needles = key
            .map(|k| {
                let s = k.expose();
                vec![s.to_string(), format!("****{}", &s[s.len().saturating_sub(4)..])]
            })
            .unwrap_or_default();
        Self { needles }
    }

    fn apply<'a>(&self, line: &'a str) -> std::borrow::Cow<'a, str> {
        let mut out = std::borrow::Cow::Borrowed(line);
        for n in &self.needles {
            if out.contains(n.as_str()) {
                out = std::borrow::Cow::Owned(out.replace(n.as_str(), "<redacted>"));
            }
        }
        out
    }
}

/// Forwards one output stream, line by line, to `tracing` and the log.
async fn drain<R: AsyncRead + Unpin>(stream: R, log: Arc<OutputLog>, label: &'static str, pid: u32, redact: Redactor) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::with_capacity(256);
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                while matches!(buf.last(), Some(b'\n' | b'\r')) {
                    buf.pop();
                }
                let lossy = String::from_utf8_lossy(&buf);
                let line = redact.apply(&lossy);
                tracing::debug!(target: "llm_warden::child", pid, child = label, "{line}");
                log.push(&line);
            }
        }
    }
}
