//! Just enough HTTP/1.1 for the fake: a request head and its
//! `Content-Length` body in; a JSON answer (keep-alive) or a chunked event
//! stream out. What llama-server's cpp-httplib does on the wire, nothing
//! more: no pipelining, no chunked request bodies, no `Expect`.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest request head read (the engine's are a few hundred bytes).
const HEAD_MAX_BYTES: usize = 64 * 1024;
/// The largest request body read.
const BODY_MAX_BYTES: usize = 16 * 1024 * 1024;

/// One request.
#[derive(Debug)]
pub(super) struct Request {
    pub method: String,
    pub path: String,
    headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// A header's value (names compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the client asked to close after the answer.
    pub fn wants_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// The next request on a connection; `None` at its end or on a request
/// this fake cannot read.
pub(super) async fn read_request<R: AsyncBufRead + Unpin>(rd: &mut R) -> Option<Request> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        if rd.read_until(b'\n', &mut head).await.ok()? == 0 || head.len() > HEAD_MAX_BYTES {
            return None;
        }
        if head[before..].starts_with(b"\r\n") || head[before..].starts_with(b"\n") {
            break;
        }
    }
    let text = String::from_utf8(head).ok()?;
    let mut lines = text.lines();
    let mut first = lines.next()?.split_whitespace();
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut req = Request {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    let len: usize = req.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    if len > BODY_MAX_BYTES {
        return None;
    }
    req.body = vec![0; len];
    rd.read_exact(&mut req.body).await.ok()?;
    Some(req)
}

/// The reason phrase of the statuses the fake answers with.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// A whole JSON answer; the connection stays open unless `close`.
pub(super) async fn write_json<W: AsyncWrite + Unpin>(
    wr: &mut W,
    status: u16,
    body: &serde_json::Value,
    close: bool,
) -> std::io::Result<()> {
    let body = body.to_string();
    let connection = if close { "close" } else { "keep-alive" };
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        reason(status),
        body.len()
    );
    wr.write_all(head.as_bytes()).await?;
    wr.write_all(body.as_bytes()).await?;
    wr.flush().await
}

/// The head of a streamed answer (llama-server sends it with the first
/// token).
pub(super) async fn write_stream_head<W: AsyncWrite + Unpin>(wr: &mut W) -> std::io::Result<()> {
    wr.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=100\r\n\r\n",
    )
    .await?;
    wr.flush().await
}

/// One SSE event (`data: ...`) as one chunk.
pub(super) async fn write_event<W: AsyncWrite + Unpin>(wr: &mut W, data: &str) -> std::io::Result<()> {
    let payload = format!("data: {data}\n\n");
    wr.write_all(format!("{:x}\r\n{payload}\r\n", payload.len()).as_bytes())
        .await?;
    wr.flush().await
}

/// The chunked terminator.
pub(super) async fn write_stream_end<W: AsyncWrite + Unpin>(wr: &mut W) -> std::io::Result<()> {
    wr.write_all(b"0\r\n\r\n").await?;
    wr.flush().await
}
