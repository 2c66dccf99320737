//! The rig of the slow- and hostile-client tests (`backpressure.rs`,
//! `hostile_clients.rs`): a real SmolLM2 warden under a short client stall
//! bound, served over HTTP, one test at a time; raw sockets that read
//! slowly or not at all; and the process's descriptor and thread counts.
#![allow(clippy::await_holding_lock)] // SERIAL's guard spans each test (see SERIAL)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use llm_warden::WardenConfig;
use serde_json::json;

use super::serve::serve_http;
use super::warden::{real_smollm_warden, test_config};

/// The stall bound these tests run with (the default is 30 s).
pub const STALL: Duration = Duration::from_secs(3);

/// One test of this file at a time: each runs a real llama-server flat out,
/// and two of them on these 2 cores (2 compute threads each, spin-waiting at
/// every barrier) crawl to a token every few seconds, which no bound here is
/// sized for (seen: 3 tokens in 40 s). The guard is held across awaits on
/// purpose: each `actix_rt::test` runs on its own thread, and blocking the
/// next test's thread is the point.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes this file's turn (a test that failed does not block the others).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn stall_config() -> WardenConfig {
    WardenConfig {
        client_stall_timeout: STALL,
        body_timeout: Duration::from_secs(2),
        ..test_config()
    }
}

/// A real SmolLM2 warden under the stall config, served over HTTP, holding
/// this file's turn for as long as it lives.
pub struct Rig {
    pub w: llm_warden::Warden,
    pub base: String,
    pub http: reqwest::Client,
    _dir: tempfile::TempDir,
    _serial: std::sync::MutexGuard<'static, ()>,
}

pub fn rig() -> Rig {
    let serial = serial();
    let (w, dir) = real_smollm_warden(stall_config());
    let base = serve_http(&w);
    Rig {
        w,
        base,
        http: llm_warden::child::client::shared_http_client(),
        _dir: dir,
        _serial: serial,
    }
}

pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

/// A raw client socket with a tiny receive buffer (so the server's side
/// fills fast once it stops reading).
pub fn tiny_reader(base: &str) -> TcpStream {
    let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&addr.into()).unwrap();
    s.into()
}

/// Sends a streamed chat of `max_tokens` that will not stop early, each
/// event carrying its 20 top logprobs (~3 KB, not ~200 B): a reader that
/// stops fills the warden's buffers to it within tens of tokens, so the
/// stall comes in seconds even where a loaded machine makes 2 tokens a second.
pub fn send_long_chat(sock: &mut TcpStream, max_tokens: u32) {
    let body = json!({
        "messages": [{"role": "user", "content": "Tell me a long story about the sea."}],
        "max_tokens": max_tokens, "stream": true, "ignore_eos": true, "temperature": 0,
        "logprobs": true, "top_logprobs": 20,
    })
    .to_string();
    write!(
        sock,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
}

/// Reads until the response head has arrived, then stops.
pub fn read_head(sock: &mut TcpStream) {
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    sock.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = sock.read(&mut buf).expect("the response head arrives");
        assert!(n > 0, "the connection closed before the head");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
}

/// Reads what the server still sends until it closes the connection.
pub fn drain_until_closed(sock: &mut TcpStream, within: Duration) -> bool {
    sock.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 65536];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

pub async fn short_chat(http: &reqwest::Client, base: &str) -> reqwest::StatusCode {
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let _ = r.bytes().await;
    status
}
