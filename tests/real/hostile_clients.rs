//! Clients that flood or trickle cannot stop the warden: a body trickled in
//! byte by byte is refused without a turn, a thousand idle sockets do not
//! stop a normal client, an events subscriber that never reads does not slow
//! the engine; against the real llama-server over real sockets.

#![allow(clippy::await_holding_lock)] // the rig's serial guard spans each test

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use llm_warden::status::WardenEvent;
use support::slow_clients::*;
use support::*;

/// A body trickled in byte by byte is refused with 408 once the body bound
/// passes, and no turn ever reaches the engine.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_trickled_body_gets_408_without_a_turn() {
    let rig = rig();
    let (w, base, http) = (&rig.w, &rig.base, &rig.http);
    let mut ev = w.subscribe();
    let addr = base.trim_start_matches("http://").to_string();
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{{"
        )
        .unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..40 {
            let _ = s.write_all(b" ");
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    if got.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Err(_) => continue,
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout") || answer.len() < 4096, "{answer}");
    // No turn started for it.
    while let Ok(e) = ev.try_recv() {
        assert!(
            !matches!(e, WardenEvent::TurnStarted { .. }),
            "a trickled body reached the engine: {e:?}"
        );
    }
    assert_eq!(short_chat(http, base).await, 200, "the warden keeps serving");
    w.shutdown().await;
}

/// 1,000 open sockets that send nothing do not stop a normal client: its
/// chat is answered and the status answers; the sockets' descriptors are
/// released once they are closed.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn an_idle_socket_flood_does_not_stop_a_normal_client() {
    let rig = rig();
    let (w, base, http) = (&rig.w, &rig.base, &rig.http);
    assert_eq!(short_chat(http, base).await, 200, "warm-up (the load)");
    let fds0 = open_fds();
    let addr = base.trim_start_matches("http://").to_string();
    let idle: Vec<TcpStream> = (0..1000).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    let t = Instant::now();
    let s = json_of(http.get(format!("{base}/warden/status"))).await;
    assert_eq!(s["state"], "ready", "{s}");
    assert_eq!(short_chat(http, base).await, 200, "a normal client is answered");
    eprintln!(
        "status and a chat answered in {:?} beside 1,000 idle sockets",
        t.elapsed()
    );
    drop(idle);
    poll_until(
        "the idle sockets' descriptors released",
        Duration::from_secs(10),
        || open_fds() <= fds0 + 4,
        || format!("descriptors {fds0} -> {}", open_fds()),
    )
    .await;
    w.shutdown().await;
}

/// A `/warden/events` subscriber that never reads does not slow the engine:
/// 40 turns complete while it sits on an unread socket.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn an_events_subscriber_that_never_reads_does_not_slow_the_engine() {
    let rig = rig();
    let (w, base, http) = (&rig.w, &rig.base, &rig.http);
    let mut sub = tiny_reader(base);
    write!(sub, "GET /warden/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    for i in 0..40 {
        let r = tokio::time::timeout(Duration::from_secs(60), short_chat(http, base))
            .await
            .unwrap_or_else(|_| panic!("turn {i} waited on the subscriber"));
        assert_eq!(r, 200, "turn {i}");
    }
    drop(sub);
    w.shutdown().await;
}
