//! Scripted-message tests of `EngineActor` over the fake child: ordering
//! (the mailbox is the lock), the reap's re-check, disconnects, model
//! switches and request translation. Faults live in `tests/fake/faults_fake.rs`.

use crate::support;

use std::time::Duration;

use llm_warden::status::WardenEvent;
use serde_json::json;
use support::*;

/// A reap tick while a turn runs finds the model busy and leaves it: the
/// turn is never interrupted, and the next tick after its end reaps.
#[actix_rt::test]
async fn reap_waits_for_the_turn_and_never_interrupts_it() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 20, "token_ms": 25}));
    let cfg = llm_warden::WardenConfig {
        idle_timeout: Duration::ZERO,
        ..test_config()
    };
    let w = TestWarden::fake(dir.path()).config(cfg).start();
    let mut ev = w.subscribe();
    let first = w.submit(chat(None, 20, true)).unwrap();
    event_or_fail(&mut ev, "turn 0 start", |e| {
        matches!(e, WardenEvent::TurnStarted { seq: 0 })
    })
    .await;
    w.queue_reap();
    let e = event_or_fail(&mut ev, "the reap check", |e| {
        matches!(e, WardenEvent::ReapChecked { .. })
    })
    .await;
    assert_eq!(
        e,
        WardenEvent::ReapChecked { reaped: false },
        "a reap while a turn runs"
    );
    let t1 = collect(first).await;
    assert!(t1.done && t1.error.is_none(), "turn 0 was interrupted: {t1:?}");
    assert_eq!(t1.text().split_whitespace().count(), 20);
    w.queue_reap();
    let e = event_or_fail(&mut ev, "the reap after the turn", |e| {
        matches!(e, WardenEvent::ReapChecked { .. })
    })
    .await;
    assert_eq!(e, WardenEvent::ReapChecked { reaped: true });
    assert!(w.status().child_pid.is_none(), "reaped once idle");
    w.shutdown().await;
}

/// A reap tick queued behind a turn re-checks idleness when handled: the
/// turn just ended, so a 60 s timeout leaves the model (same pid after).
#[actix_rt::test]
async fn a_queued_reap_rechecks_idleness() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 10, "token_ms": 20}));
    let w = TestWarden::fake(dir.path()).start();
    let mut ev = w.subscribe();
    let first = w.submit(chat(None, 10, true)).unwrap();
    event_or_fail(&mut ev, "turn start", |e| matches!(e, WardenEvent::TurnStarted { .. })).await;
    w.queue_reap();
    assert!(collect(first).await.done);
    let e = event_or_fail(&mut ev, "the reap check", |e| {
        matches!(e, WardenEvent::ReapChecked { .. })
    })
    .await;
    assert_eq!(e, WardenEvent::ReapChecked { reaped: false });
    let pid = w.status().child_pid.expect("still loaded");
    assert!(collect(w.submit(chat(None, 2, true)).unwrap()).await.done);
    assert_eq!(w.status().child_pid, Some(pid));
    w.shutdown().await;
}

/// At one slot (`WARDEN_PARALLEL=1`) turns are served one at a time in
/// arrival order.
#[actix_rt::test]
async fn turns_are_served_in_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 2, "token_ms": 1}));
    let cfg = llm_warden::WardenConfig {
        parallel: llm_warden::config::Parallel::Fixed(1),
        ..test_config()
    };
    let w = TestWarden::fake(dir.path()).config(cfg).start();
    let mut ev = w.subscribe();
    let rxs: Vec<_> = (0..20).map(|_| w.submit(chat(None, 2, true)).unwrap()).collect();
    let mut started = Vec::new();
    let mut open: Option<u64> = None;
    while started.len() < 20 {
        match event_or_fail(&mut ev, "turn events", |e| {
            matches!(e, WardenEvent::TurnStarted { .. } | WardenEvent::TurnEnded { .. })
        })
        .await
        {
            WardenEvent::TurnStarted { seq } => {
                assert_eq!(open, None, "turn {seq} started while another ran");
                open = Some(seq);
                started.push(seq);
            }
            WardenEvent::TurnEnded { seq, .. } => {
                assert_eq!(open, Some(seq));
                open = None;
            }
            _ => unreachable!(),
        }
    }
    assert_eq!(started, (0..20).collect::<Vec<u64>>());
    for rx in rxs {
        assert!(collect(rx).await.done);
    }
    w.shutdown().await;
}

/// A client that goes away mid-stream ends the turn as abandoned, the child
/// cancels the generation, and the next turn is served by the same child.
#[actix_rt::test]
async fn a_disconnect_abandons_the_turn_and_the_next_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.log");
    fake_model(dir.path(), "m", json!({"tokens": 200, "token_ms": 20, "log": log}));
    let w = TestWarden::fake(dir.path()).start();
    let mut ev = w.subscribe();
    let mut rx = w.submit(chat(None, 200, true)).unwrap();
    loop {
        if let llm_warden::TurnEvent::Chunk(_) = recv_or_fail(&mut rx, "a first chunk").await {
            break;
        }
    }
    drop(rx);
    let e = event_or_fail(&mut ev, "the abandoned end", |e| {
        matches!(e, WardenEvent::TurnEnded { .. })
    })
    .await;
    assert_eq!(
        e,
        WardenEvent::TurnEnded {
            seq: 0,
            route: llm_warden::law::route::Route::Chat,
            outcome: llm_warden::status::TurnOutcome::Abandoned,
            timings: None,
        }
    );
    let pid = w.status().child_pid.unwrap();
    let t = collect(w.submit(chat(None, 3, true)).unwrap()).await;
    assert!(t.done);
    assert_eq!(w.status().child_pid, Some(pid));
    w.shutdown().await;
}

/// A turn whose client left while it was queued (one slot, busy) is
/// skipped, never run.
#[actix_rt::test]
async fn a_turn_abandoned_in_the_queue_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 10, "token_ms": 20}));
    let cfg = llm_warden::WardenConfig {
        parallel: llm_warden::config::Parallel::Fixed(1),
        ..test_config()
    };
    let w = TestWarden::fake(dir.path()).config(cfg).start();
    let mut ev = w.subscribe();
    let first = w.submit(chat(None, 10, true)).unwrap();
    drop(w.submit(chat(None, 10, true)).unwrap());
    assert!(collect(first).await.done);
    let mut ends = Vec::new();
    while ends.len() < 2 {
        match event_or_fail(&mut ev, "both ends", |e| matches!(e, WardenEvent::TurnEnded { .. })).await {
            WardenEvent::TurnEnded { seq, outcome, .. } => ends.push((seq, outcome)),
            _ => unreachable!(),
        }
    }
    ends.sort_by_key(|(seq, _)| *seq);
    use llm_warden::status::TurnOutcome;
    assert_eq!(ends, [(0, TurnOutcome::Completed), (1, TurnOutcome::Skipped)]);
    assert_eq!(w.queue_depth(), 0);
    w.shutdown().await;
}

/// Naming another model loads it beside the first (memory allows both):
/// two children, each its own engine; an unknown id is a 404 that leaves
/// both untouched. With `WARDEN_MAX_RESIDENT=1` the same request evicts the
/// idle first model instead (today's switch, as an eviction).
#[actix_rt::test]
async fn another_model_loads_beside_and_unknown_model() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "a", json!({}));
    fake_model(dir.path(), "b", json!({}));
    let w = TestWarden::fake(dir.path()).start();
    assert!(collect(w.submit(chat(Some("a"), 2, true)).unwrap()).await.done);
    let pid_a = w.status().child_pid.unwrap();
    assert_eq!(w.status().model.as_deref(), Some("a"));
    let err = w.submit(chat(Some("nope"), 2, true)).unwrap_err().to_api();
    assert_eq!((err.status, err.code.as_str()), (404, "model_not_found"));
    assert_eq!(w.status().child_pid, Some(pid_a));
    assert!(
        collect(w.submit(chat(Some("b"), 2, false)).unwrap())
            .await
            .body
            .is_some()
    );
    let s = w.status();
    assert_eq!(s.model.as_deref(), Some("b"), "the top level is the last used");
    assert!(alive(pid_a), "the first model stays resident");
    let residents: Vec<_> = s.residents.iter().map(|r| r.model.as_str()).collect();
    assert_eq!(residents, ["b", "a"], "most recently used first");
    assert_ne!(s.residents[0].child_pid, s.residents[1].child_pid);
    w.shutdown().await;
    assert!(!alive(pid_a), "shutdown stops every resident");

    let cfg = llm_warden::WardenConfig {
        max_resident: Some(1),
        ..test_config()
    };
    let w = TestWarden::fake(dir.path()).config(cfg).start();
    let mut ev = w.subscribe();
    assert!(collect(w.submit(chat(Some("a"), 2, true)).unwrap()).await.done);
    let pid_a = w.status().child_pid.unwrap();
    assert!(collect(w.submit(chat(Some("b"), 2, true)).unwrap()).await.done);
    let e = event_or_fail(&mut ev, "the eviction", |e| matches!(e, WardenEvent::Unloaded { .. })).await;
    match e {
        WardenEvent::Unloaded {
            model,
            reason,
            freed_bytes,
        } => {
            assert_eq!((model.as_str(), reason.as_str()), ("a", "evicted"));
            assert!(freed_bytes.is_some_and(|b| b > 0), "an eviction says what it freed");
        }
        _ => unreachable!(),
    }
    assert!(!alive(pid_a), "the evicted child must be gone");
    assert_eq!(w.status().residents.len(), 1);
    w.shutdown().await;
}

/// `repetition_penalty` reaches the child as `repeat_penalty`.
#[actix_rt::test]
async fn repetition_penalty_is_translated() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.log");
    fake_model(dir.path(), "m", json!({"log": log}));
    let w = TestWarden::fake(dir.path()).start();
    let mut req = chat(None, 2, true);
    req.body.insert("repetition_penalty".into(), json!(1.3));
    assert!(collect(w.submit(req).unwrap()).await.done);
    let logged: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&log).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!(logged["repeat_penalty"], json!(1.3));
    assert!(logged.get("repetition_penalty").is_none());
    w.shutdown().await;
}

/// Load, status and unload by message; the window comes from `/props`.
#[actix_rt::test]
async fn load_status_unload() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"props_ctx": 6144}));
    let w = TestWarden::fake(dir.path()).start();
    let s = load_default(&w).await;
    assert_eq!(s.context_tokens, Some(6144));
    let pid = s.child_pid.unwrap();
    assert!(alive(pid));
    assert!(w.unload().await.unwrap());
    assert!(wait_gone(pid, 5).await);
    assert_eq!(w.status().child_pid, None);
    assert_eq!(w.status().context_tokens, None);
    assert!(!w.unload().await.unwrap());
    w.shutdown().await;
}

/// Two models whose floors do not fit together (two heavy-KV models on
/// 2 GiB of overridden RAM): a load for the second never stops the first's
/// turn in flight. It waits for the turn's end, bounded by the load
/// timeout; past it, 503 `model_does_not_fit` naming the resident in its
/// turn, whose stream ends whole. Once the turn has ended, the same request
/// evicts the idle first model and loads.
#[actix_rt::test]
async fn a_turn_in_flight_is_never_stopped_for_another_model() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "a", json!({"tokens": 150, "token_ms": 20}));
    heavy_model(dir.path(), "b", json!({"tokens": 150, "token_ms": 20}));
    let cfg = llm_warden::WardenConfig {
        ram_override_bytes: Some(2 << 30),
        load_timeout: Duration::from_millis(1500),
        ..test_config()
    };
    let w = TestWarden::fake(dir.path()).config(cfg).start();
    let mut ev = w.subscribe();
    // 1. a streams for 3 s; b waits 1.5 s, then is refused.
    let a = w.submit(chat(Some("a"), 150, true)).unwrap();
    let ready = event_or_fail(&mut ev, "a's load", |e| matches!(e, WardenEvent::Ready { .. })).await;
    let WardenEvent::Ready { pid: pid_a, .. } = ready else {
        unreachable!()
    };
    let b = collect(w.submit(chat(Some("b"), 2, true)).unwrap()).await;
    let e = b.error.expect("refused");
    assert_eq!((e.status, e.code.as_str()), (503, "model_does_not_fit"), "{e:?}");
    assert!(
        e.message.contains("a (chat) holds") && e.message.contains("in a turn"),
        "names the resident and what it holds: {}",
        e.message
    );
    let t = collect(a).await;
    assert!(t.done && t.error.is_none(), "a's turn ends whole: {t:?}");
    assert_eq!(t.text().split_whitespace().count(), 150);
    assert!(alive(pid_a));
    // 2. a is idle now: b evicts it and loads.
    assert!(collect(w.submit(chat(Some("b"), 2, true)).unwrap()).await.done);
    assert!(!alive(pid_a), "the idle first model was evicted");
    let s = w.status();
    assert_eq!(s.residents.iter().map(|r| r.model.as_str()).collect::<Vec<_>>(), ["b"]);
    // 3. b streams; a waits for its end (under the timeout), then loads.
    let long_b = w.submit(chat(Some("b"), 40, true)).unwrap();
    let again_a = w.submit(chat(Some("a"), 2, true)).unwrap();
    let (tb, ta) = futures::join!(collect(long_b), collect(again_a));
    assert!(tb.done && tb.error.is_none(), "{tb:?}");
    assert!(
        ta.done && ta.error.is_none(),
        "a waited for b's turn, then loaded: {ta:?}"
    );
    assert_eq!(w.status().model.as_deref(), Some("a"));
    w.shutdown().await;
}

/// A load waiting for room does not hold its engine: while the first
/// model's turn runs, the second model's waiting turn leaves the line as
/// soon as its client goes (it never loads a model nobody waits for), and
/// an explicit load that waits leaves the engine free to answer an unload
/// at once. Both while the first model's turn still runs: its client does
/// not read until the end, so the turn cannot end meanwhile, however slow
/// the machine (up to the stall bound, raised here).
#[actix_rt::test]
async fn a_load_waiting_for_room_keeps_its_engine_open_and_leaves_with_its_client() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "a", json!({"tokens": 400, "token_ms": 20}));
    heavy_model(dir.path(), "b", json!({"tokens": 4, "token_ms": 20}));
    let cfg = llm_warden::WardenConfig {
        ram_override_bytes: Some(2 << 30),
        load_timeout: Duration::from_secs(120),
        client_stall_timeout: Duration::from_secs(300),
        ..test_config()
    };
    let w = TestWarden::fake(dir.path()).config(cfg).start();
    let mut ev = w.subscribe();
    let a = w.submit(chat(Some("a"), 400, true)).unwrap();
    event_or_fail(&mut ev, "a's load", |e| matches!(e, WardenEvent::Ready { .. })).await;
    let waiting = |w: &llm_warden::Warden| {
        w.status()
            .waiting_models
            .iter()
            .map(|m| m.model.clone())
            .collect::<Vec<_>>()
    };
    // 1. A turn for b waits in the line; its client leaves.
    let b = w.submit(chat(Some("b"), 4, true)).unwrap();
    poll_until(
        "b's load in the line",
        Duration::from_secs(30),
        || waiting(&w) == ["b"],
        || format!("{:?}", w.status().waiting_models),
    )
    .await;
    drop(b);
    poll_until(
        "b's load to leave the line",
        Duration::from_secs(30),
        || waiting(&w).is_empty(),
        || format!("{:?}", w.status().waiting_models),
    )
    .await;
    let a_runs = |w: &llm_warden::Warden| {
        w.status()
            .residents
            .iter()
            .any(|r| r.model == "a" && r.state == llm_warden::status::EngineState::Generating)
    };
    assert!(a_runs(&w), "b left the line while a's turn still ran");
    // 2. An explicit load of b waits; an unload of b is answered meanwhile.
    let w2 = w.clone();
    let load = actix_rt::spawn(async move { w2.load(Some("b".into()), None).await });
    poll_until(
        "the explicit load in the line",
        Duration::from_secs(30),
        || waiting(&w) == ["b"],
        || format!("{:?}", w.status().waiting_models),
    )
    .await;
    assert!(!w.unload_model(Some("b")).await.unwrap(), "nothing of b is loaded");
    assert!(a_runs(&w), "the unload was answered while a's turn still ran");
    load.abort();
    // 3. a's turn ends whole; b, which nobody waits for any more, never loads.
    let t = collect(a).await;
    assert!(t.done && t.error.is_none(), "{t:?}");
    poll_until(
        "the abandoned load to leave the line",
        Duration::from_secs(30),
        || waiting(&w).is_empty(),
        || format!("{:?}", w.status().waiting_models),
    )
    .await;
    let s = w.status();
    assert_eq!(
        s.residents.iter().map(|r| r.model.as_str()).collect::<Vec<_>>(),
        ["a"],
        "{s:?}"
    );
    let mut skipped = 0;
    while let Ok(e) = ev.try_recv() {
        match e {
            WardenEvent::Loading { model, .. } if model == "b" => panic!("b was loaded for nobody"),
            WardenEvent::TurnEnded {
                outcome: llm_warden::status::TurnOutcome::Skipped,
                ..
            } => skipped += 1,
            _ => {}
        }
    }
    assert_eq!(skipped, 1, "b's turn ended once, skipped");
    w.shutdown().await;
}

/// The idle-reload record (the spec's `_idle_unload`): a turn after an
/// idle unload is told the model reloads for `idle`; any other unload
/// since (a load, then a manual unload) clears the record, so the next
/// turn is told nothing.
#[actix_rt::test]
async fn an_idle_reload_is_announced_only_after_the_last_unload_was_idle() {
    use llm_warden::warden::KeepAlive;
    let announced = |t: &Turn| t.notices.contains(&llm_warden::Notice::MemoryReload { reason: "idle" });
    let turn = || {
        chat(None, 2, true).options(llm_warden::TurnOptions {
            stateful: true,
            announce_idle_reload: true,
        })
    };
    for manual_unload_between in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        model_file(dir.path(), "m");
        let w = TestWarden::fake(dir.path()).config(test_config()).start();
        // A turn that asks keep_alive 0 unloads as the idle reap does.
        let first = collect(
            w.submit(turn().keep_alive(Some(KeepAlive::For(Duration::ZERO))))
                .unwrap(),
        )
        .await;
        assert!(first.done && !announced(&first), "{first:?}");
        poll_until(
            "the idle unload",
            Duration::from_secs(30),
            || w.status().model.is_none(),
            || format!("{:?}", w.status().state),
        )
        .await;
        if manual_unload_between {
            w.load(None, None).await.unwrap();
            assert!(w.unload().await.unwrap());
        }
        let next = collect(w.submit(turn()).unwrap()).await;
        assert!(next.done, "{next:?}");
        assert_eq!(
            announced(&next),
            !manual_unload_between,
            "manual unload between: {manual_unload_between}; notices {:?}",
            next.notices
        );
        w.shutdown().await;
    }
}
