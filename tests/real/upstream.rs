//! A sound connection to the child: turns sent back to back, streamed and
//! whole, by clients that read to the end and by clients that drop their
//! connection right after `[DONE]`, all succeed against the real
//! llama-server, and the warden reuses the connection of a whole answer
//! turn after turn (the child closes a streamed answer's connection itself;
//! `child::client` describes how that gave 502s).

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use support::*;

/// Connections to or from `port` in TIME_WAIT: each is one connection that
/// was closed within the last minute.
fn time_wait(port: u16) -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .skip(1)
                .filter(|l| {
                    let c: Vec<&str> = l.split_whitespace().collect();
                    let p = |s: &str| s.rsplit(':').next().and_then(|h| u16::from_str_radix(h, 16).ok());
                    c.len() > 3 && c[3] == "06" && (p(c[1]) == Some(port) || p(c[2]) == Some(port))
                })
                .count()
        })
        .sum()
}

fn body(stream: bool) -> String {
    json!({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2, "stream": stream}).to_string()
}

/// A raw client: sends one request, reads until `[DONE]` (streamed) or the
/// whole body (not), then drops the connection at once.
fn raw_turn(addr: &str, stream: bool) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let b = body(stream);
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
        b.len()
    )
    .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("closed early: {}", String::from_utf8_lossy(&got)));
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if !text.starts_with("HTTP/1.1 200") && text.contains("\r\n\r\n") {
            return Err(text.into_owned());
        }
        if text.contains("\"error\"") {
            return Err(text.into_owned());
        }
        if stream && text.contains("data: [DONE]") {
            return Ok(());
        }
        if !stream && let Some(head_end) = text.find("\r\n\r\n") {
            let len = text[..head_end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or_else(|| format!("a whole answer without Content-Length: {text}"))?;
            if got.len() >= head_end + 4 + len {
                return Ok(());
            }
        }
    }
}

/// A reqwest client that reads each answer to its end.
async fn polite_turn(http: &reqwest::Client, base: &str, stream: bool) -> Result<(), String> {
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .header("Content-Type", "application/json")
        .body(body(stream))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status() != 200 {
        return Err(format!("HTTP {}: {}", r.status(), r.text().await.unwrap_or_default()));
    }
    let mut all = Vec::new();
    let mut s = r.bytes_stream();
    while let Some(c) = s.next().await {
        all.extend_from_slice(&c.map_err(|e| e.to_string())?);
    }
    let text = String::from_utf8_lossy(&all);
    if text.contains("\"error\"") || (stream && !text.contains("[DONE]")) {
        return Err(text.into_owned());
    }
    Ok(())
}

/// 2,000 turns back to back (each sent the moment the previous answer
/// ended): streamed and whole, read to the end or dropped right after, with
/// no error at all; and 200 whole answers in a row reuse their connection to
/// the child (at most one new connection per 20 turns: the child ends a
/// connection after 100 requests).
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn two_thousand_turns_back_to_back_never_fail() {
    let (w, _dir) = real_smollm_warden(test_config());
    let base = serve_http(&w);
    let addr = base.trim_start_matches("http://").to_string();
    let http = llm_warden::child::client::shared_http_client();
    polite_turn(&http, &base, false).await.expect("warm-up (the load)");
    let port = w.status().port.expect("the child's port");
    let tw0 = time_wait(port);
    for i in 0..200 {
        polite_turn(&http, &base, false)
            .await
            .unwrap_or_else(|e| panic!("whole turn {i}: {e}"));
    }
    let closed_in_200 = time_wait(port).saturating_sub(tw0);
    assert!(
        closed_in_200 <= 10,
        "{closed_in_200} connections to the child closed for 200 whole answers: they are not reused"
    );
    let turns = soak(2000, 10000);
    let t0 = Instant::now();
    let mut errors = Vec::new();
    for i in 0..turns {
        let stream = i % 4 != 3;
        let r = if i % 2 == 0 {
            polite_turn(&http, &base, stream).await
        } else {
            let a = addr.clone();
            tokio::task::spawn_blocking(move || raw_turn(&a, stream)).await.unwrap()
        };
        if let Err(e) = r {
            errors.push(format!("turn {i} (stream={stream}): {e}"));
        }
    }
    eprintln!(
        "{turns} mixed turns in {:?}, {} errors; 200 whole answers closed {closed_in_200} connections to the child",
        t0.elapsed(),
        errors.len()
    );
    assert!(
        errors.is_empty(),
        "{} of {turns} failed, first: {:?}",
        errors.len(),
        errors.first()
    );
    w.shutdown().await;
}
