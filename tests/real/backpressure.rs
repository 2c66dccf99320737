//! No client can freeze the warden by not reading: a client that stops
//! reading mid-stream, the binary's SIGTERM while a client is stalled, and
//! an embedder that stops polling each cost the others at most the stall
//! bound, against the real llama-server over real sockets; afterwards no
//! child, thread or file descriptor is left over. The clients that flood or
//! trickle are in `hostile_clients.rs`.

#![allow(clippy::await_holding_lock)] // the rig's serial guard spans each test

use crate::support;

use std::time::{Duration, Instant};

use llm_warden::http::stall::CLIENT_SEND_BUFFER_BYTES;
use llm_warden::status::WardenEvent;
use serde_json::json;
use support::slow_clients::*;
use support::*;

/// A client with a tiny receive buffer that stops reading mid-stream: while
/// it stalls, `/warden/status` answers at once and another client's chat is
/// answered once the stall bound has let the first turn go; that turn ends
/// `stalled`, its connection is closed, `POST /warden/unload` completes, and
/// no child, thread or descriptor is left over.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_client_that_stops_reading_cannot_freeze_the_warden() {
    let rig = rig();
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

    // While it stalls, the status answers without the mailbox: every answer
    // comes back while the stuck turn still holds the engine (generating,
    // and not yet let go by the stall bound), not after it.
    let mut during = w.subscribe();
    let mut worst_status = Duration::ZERO;
    for i in 0..20 {
        let t = Instant::now();
        let s = json_of(http.get(format!("{base}/warden/status"))).await;
        worst_status = worst_status.max(t.elapsed());
        assert_eq!(s["state"], "generating", "reading {i}: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let let_go = std::iter::from_fn(|| during.try_recv().ok()).find(|e| {
        matches!(e, WardenEvent::ClientStalled { seq, .. } | WardenEvent::TurnEnded { seq, .. } if *seq == stuck_seq)
    });
    assert!(
        let_go.is_none(),
        "the status readings waited until the stuck turn was let go: {let_go:?}"
    );

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
    poll_until(
        "the descriptors and threads back where they were",
        Duration::from_secs(10),
        || open_fds() <= fds0 && threads() <= threads0,
        || {
            format!(
                "descriptors {fds0} -> {}, threads {threads0} -> {}",
                open_fds(),
                threads()
            )
        },
    )
    .await;
    w.shutdown().await;
}

/// The `llm-warden` binary stops on SIGTERM while its writes to a stalled
/// client wait: the process exits and its child is gone.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn sigterm_completes_while_a_client_is_stalled() {
    let _serial = serial();
    let (server, model) = (real_llama_server(), real_model(SMOLLM2));
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
    let stuck_port = stuck.local_addr().unwrap().port();
    let warden_port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
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
    // The signal comes once the client stalls the warden: the warden's send
    // buffer to it is full, so its writes to it wait (behind them actix's
    // buffer and the turn's channel fill, and the engine pauses; no outside
    // view shows that last step: the relay's HTTP client reads ahead).
    let unsent = || {
        tcp_sides()
            .iter()
            .find(|s| (s.local_port, s.remote_port) == (warden_port, stuck_port))
            .map_or(0, |s| s.unsent)
    };
    poll_until(
        "the warden's send buffer to the stalled client full",
        Duration::from_secs(300),
        || unsent() >= CLIENT_SEND_BUFFER_BYTES as u64,
        || format!("{} bytes unsent to the client", unsent()),
    )
    .await;
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

/// An embedder that stops polling a turn's events cannot freeze the engine:
/// after the stall bound the turn ends `stalled` and the next turn runs.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn an_embedder_that_stops_polling_is_let_go() {
    let _serial = serial();
    let (w, _dir) = real_smollm_warden(stall_config());
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
        matches!(
            e,
            WardenEvent::TurnEnded {
                outcome: llm_warden::status::TurnOutcome::Stalled,
                ..
            }
        )
    })
    .await;
    drop(held);
    w.shutdown().await;
}
