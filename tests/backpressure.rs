//! No client can freeze the warden: a client that stops reading mid-stream,
//! a body trickled in, a flood of idle sockets, an events subscriber that
//! never reads and an embedder that stops polling each cost the others at
//! most the stall bound, against the real llama-server over real sockets;
//! afterwards no child, thread or file descriptor is left over.

#![allow(clippy::await_holding_lock)] // SERIAL's guard spans each test (see SERIAL)

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use llm_warden::WardenConfig;
use llm_warden::status::WardenEvent;
use serde_json::json;
use support::*;

/// The stall bound these tests run with (the default is 30 s).
const STALL: Duration = Duration::from_secs(3);

/// One test of this file at a time: each runs a real llama-server flat out,
/// and two of them on these 2 cores (2 compute threads each, spin-waiting at
/// every barrier) crawl to a token every few seconds, which no bound here is
/// sized for (seen: 3 tokens in 40 s). The guard is held across awaits on
/// purpose: each `actix_rt::test` runs on its own thread, and blocking the
/// next test's thread is the point.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes this file's turn (a test that failed does not block the others).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn stall_config() -> WardenConfig {
    WardenConfig {
        client_stall_timeout: STALL,
        body_timeout: Duration::from_secs(2),
        ..test_config()
    }
}

/// A real SmolLM2 warden under the stall config, served over HTTP, holding
/// this file's turn for as long as it lives.
struct Rig {
    w: llm_warden::Warden,
    base: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
    _serial: std::sync::MutexGuard<'static, ()>,
}

fn rig() -> Option<Rig> {
    let serial = serial();
    let (w, dir) = real_smollm_warden(stall_config())?;
    let base = serve_http(&w);
    Some(Rig {
        w,
        base,
        http: llm_warden::child::client::shared_http_client(),
        _dir: dir,
        _serial: serial,
    })
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

/// Whether `done` holds within 10 s (polled every 100 ms).
async fn eventually(done: impl Fn() -> bool) -> bool {
    for _ in 0..100 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A raw client socket with a tiny receive buffer (so the server's side
/// fills fast once it stops reading).
fn tiny_reader(base: &str) -> TcpStream {
    let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&addr.into()).unwrap();
    s.into()
}

/// Sends a streamed chat of `max_tokens` that will not stop early.
fn send_long_chat(sock: &mut TcpStream, max_tokens: u32) {
    let body = json!({
        "messages": [{"role": "user", "content": "Tell me a long story about the sea."}],
        "max_tokens": max_tokens, "stream": true, "ignore_eos": true, "temperature": 0,
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
fn read_head(sock: &mut TcpStream) {
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
fn drain_until_closed(sock: &mut TcpStream, within: Duration) -> bool {
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

async fn short_chat(http: &reqwest::Client, base: &str) -> reqwest::StatusCode {
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

/// A client with a tiny receive buffer that stops reading mid-stream: while
/// it stalls, `/warden/status` answers at once and another client's chat is
/// answered once the stall bound has let the first turn go; that turn ends
/// `stalled`, its connection is closed, `POST /warden/unload` completes, and
/// no child, thread or descriptor is left over.
#[actix_rt::test]
async fn a_client_that_stops_reading_cannot_freeze_the_warden() {
    let Some(rig) = rig() else {
        return;
    };
    let (w, base, http) = (&rig.w, &rig.base, &rig.http);
    assert_eq!(short_chat(http, base).await, 200, "warm-up (the load)");
    let (fds0, threads0) = (open_fds(), threads());
    let mut ev = w.subscribe();

    let mut stuck = tiny_reader(base);
    send_long_chat(&mut stuck, 6000);
    let t0 = Instant::now();
    let mut stuck = tokio::task::spawn_blocking(move || {
        read_head(&mut stuck);
        stuck
    })
    .await
    .unwrap();
    let started = event_or_fail(&mut ev, "the stuck turn's start", |e| {
        matches!(e, WardenEvent::TurnStarted { .. })
    })
    .await;
    let WardenEvent::TurnStarted { seq: stuck_seq } = started else {
        unreachable!()
    };

    // While it stalls, the status answers without the mailbox.
    let mut worst_status = Duration::ZERO;
    for _ in 0..20 {
        let t = Instant::now();
        let s = json_of(http.get(format!("{base}/warden/status"))).await;
        worst_status = worst_status.max(t.elapsed());
        assert_eq!(s["state"], "generating", "{s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(worst_status < Duration::from_secs(1), "status took {worst_status:?}");

    // Another client's chat is answered once the stall bound let the turn go.
    let t1 = Instant::now();
    let second = tokio::time::timeout(Duration::from_secs(300), short_chat(http, base))
        .await
        .expect("the second client is answered");
    assert_eq!(second, 200);
    let waited = t1.elapsed();
    let stalled = event_or_fail(
        &mut ev,
        "the stall's event",
        |e| matches!(e, WardenEvent::ClientStalled { seq, .. } if *seq == stuck_seq),
    )
    .await;
    eprintln!(
        "stuck turn let go after {:?} ({stalled:?}); second chat waited {waited:?}; worst status {worst_status:?}",
        t0.elapsed()
    );
    let mut ended = w.subscribe();
    let _ = ended.try_recv();

    // The stalled connection was closed by the warden.
    let closed = tokio::task::spawn_blocking(move || drain_until_closed(&mut stuck, Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(closed, "the warden closes the stalled client's connection");

    let pid = w.status().child_pid.expect("a child");
    let r = json_of(http.post(format!("{base}/warden/unload"))).await;
    assert_eq!(r["unloaded"], true, "{r}");
    assert!(wait_gone(pid, 10).await, "the child is gone after unload");

    // Nothing leaked: the descriptors and threads are back where they were
    // once the pooled connections age out.
    let settled = eventually(|| open_fds() <= fds0 && threads() <= threads0).await;
    assert!(
        settled,
        "descriptors {fds0} -> {}, threads {threads0} -> {}",
        open_fds(),
        threads()
    );
    w.shutdown().await;
}

/// The `llm-warden` binary stops on SIGTERM while a client is stalled on it:
/// the process exits and its child is gone.
#[actix_rt::test]
async fn sigterm_completes_while_a_client_is_stalled() {
    let _serial = serial();
    let (Some(server), Some(model)) = (real_llama_server(), real_model(SMOLLM2)) else {
        return;
    };
    // `serve` scans WARDEN_CACHE_DIR/models: the model goes there.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("models")).unwrap();
    std::os::unix::fs::symlink(&model, dir.path().join("models/smollm2.gguf")).unwrap();
    let (mut proc, base) = spawn_warden_binary(&[
        ("WARDEN_LLAMA_SERVER", server.to_str().unwrap()),
        ("WARDEN_CACHE_DIR", dir.path().to_str().unwrap()),
        ("WARDEN_CLIENT_STALL_TIMEOUT_S", "600"),
        ("WARDEN_FORCE_CPU", "1"),
    ])
    .await;
    let mut stuck = tiny_reader(&base);
    send_long_chat(&mut stuck, 6000);
    let stuck = tokio::task::spawn_blocking(move || {
        read_head(&mut stuck);
        stuck
    })
    .await
    .unwrap();
    let http = llm_warden::child::client::shared_http_client();
    // The head comes with the loading notice; the child is up a moment later.
    let mut child = None;
    for _ in 0..300 {
        let status = json_of(http.get(format!("{base}/warden/status"))).await;
        child = status["child_pid"].as_u64();
        if child.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let child = child.expect("a child is loaded") as u32;
    // Give the stream time to fill every buffer, so the engine is parked on
    // the stalled client when the signal comes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proc.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(30), proc.wait())
        .await
        .expect("the warden exits on SIGTERM with a client stalled")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(wait_gone(child, 10).await, "no orphaned child");
    drop(stuck);
}

/// A body trickled in byte by byte is refused with 408 once the body bound
/// passes, and no turn ever reaches the engine.
#[actix_rt::test]
async fn a_trickled_body_gets_408_without_a_turn() {
    let Some(rig) = rig() else {
        return;
    };
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
async fn an_idle_socket_flood_does_not_stop_a_normal_client() {
    let Some(rig) = rig() else {
        return;
    };
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
    let settled = eventually(|| open_fds() <= fds0 + 4).await;
    assert!(settled, "descriptors {fds0} -> {}", open_fds());
    w.shutdown().await;
}

/// A `/warden/events` subscriber that never reads does not slow the engine:
/// 40 turns complete while it sits on an unread socket.
#[actix_rt::test]
async fn an_events_subscriber_that_never_reads_does_not_slow_the_engine() {
    let Some(rig) = rig() else {
        return;
    };
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

/// An embedder that stops polling a turn's events cannot freeze the engine:
/// after the stall bound the turn ends `stalled` and the next turn runs.
#[actix_rt::test]
async fn an_embedder_that_stops_polling_is_let_go() {
    let _serial = serial();
    let Some((w, _dir)) = real_smollm_warden(stall_config()) else {
        return;
    };
    let mut ev = w.subscribe();
    let mut req = chat(None, 400, true);
    req.body.insert("ignore_eos".into(), json!(true));
    // Held, never polled: 400 events cannot fit its 64-event channel.
    let held = w.submit(req).unwrap();
    let next = tokio::time::timeout(
        Duration::from_secs(120),
        collect(w.submit(chat(None, 4, true)).unwrap()),
    )
    .await
    .expect("the next turn runs");
    assert!(next.done, "{next:?}");
    event_or_fail(&mut ev, "the held turn's end", |e| {
        matches!(e, WardenEvent::TurnEnded { outcome: "stalled", .. })
    })
    .await;
    drop(held);
    w.shutdown().await;
}
