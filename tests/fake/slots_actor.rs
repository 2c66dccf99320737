//! Several turns on one model, the engine's decisions one by one over
//! the in-process fake: turns stream side by side up to the slots and the
//! rest wait in arrival order; a brake respawn decided while turns run
//! waits for them; an unload waits for the running turns; a dead child
//! gives every turn on it the same coded error; the status counts the busy
//! slots and the waiting turns. The real llama-server version is
//! `tests/real/slots.rs`.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use llm_warden::child::fake::{FakeLlama, Script as ChildScript};
use llm_warden::law::brake::Level;
use llm_warden::status::WardenEvent;
use llm_warden::{TurnRequest, Warden, WardenConfig};
use serde_json::json;
use support::pressure::Script;
use support::*;

/// A streamed chat turn of its own conversation.
fn turn(conversation: &str, max_tokens: u32) -> TurnRequest {
    chat(None, max_tokens, true).conversation(Some(conversation.into()))
}

/// A warden over the in-process fake (answers of `tokens` tokens, `ms`
/// apart), the brake reading `script`, 8 GiB of RAM.
fn warden(dir: &std::path::Path, tokens: u32, ms: u64, script: &Script) -> (Warden, Arc<FakeLlama>) {
    let fake = Arc::new(FakeLlama::new(ChildScript {
        tokens,
        token_delay: Duration::from_millis(ms),
        ..ChildScript::default()
    }));
    let w = TestWarden::in_process(&fake, dir)
        .config(WardenConfig {
            ram_override_bytes: Some(8 << 30),
            ..test_config()
        })
        .sensor(script.clone())
        .start();
    (w, fake)
}

/// Reads events until `n` turns ended; each `TurnStarted`/`TurnEnded` in
/// order, as `+seq` / `-seq`.
async fn starts_and_ends(ev: &mut tokio::sync::broadcast::Receiver<WardenEvent>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.iter().filter(|s: &&String| s.starts_with('-')).count() < n {
        match event_or_fail(ev, "turn events", |e| {
            matches!(e, WardenEvent::TurnStarted { .. } | WardenEvent::TurnEnded { .. })
        })
        .await
        {
            WardenEvent::TurnStarted { seq } => out.push(format!("+{seq}")),
            WardenEvent::TurnEnded { seq, .. } => out.push(format!("-{seq}")),
            _ => unreachable!(),
        }
    }
    out
}

/// Six turns over four slots: four run at once, the other two wait and
/// start, in arrival order, as running ones end; every answer is whole.
#[actix_rt::test]
async fn turns_run_side_by_side_up_to_the_slots_and_the_rest_wait_in_order() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let (w, _fake) = warden(dir.path(), 12, 20, &Script::default());
    load_default(&w).await;
    let mut ev = w.subscribe();
    let rxs: Vec<_> = (0..6).map(|i| w.submit(turn(&format!("c{i}"), 12)).unwrap()).collect();
    let ends = actix_rt::spawn(join_all(rxs.into_iter().map(collect)));
    let order = starts_and_ends(&mut ev, 6).await;
    let mut open = 0usize;
    let mut most = 0;
    let mut started = Vec::new();
    for e in &order {
        if let Some(s) = e.strip_prefix('+') {
            open += 1;
            started.push(s.parse::<u64>().unwrap());
        } else {
            open -= 1;
        }
        most = most.max(open);
    }
    assert_eq!(most, 4, "four slots ran at once: {order:?}");
    assert_eq!(started, (0..6).collect::<Vec<_>>(), "arrival order: {order:?}");
    for t in ends.await.unwrap() {
        assert!(t.done && t.error.is_none(), "{t:?}");
        assert_eq!(t.text().split_whitespace().count(), 12);
    }
    w.shutdown().await;
}

/// While four turns run and two wait, the status shows four busy slots
/// (each with its conversation and reservation) and two waiting turns.
#[actix_rt::test]
async fn the_status_shows_busy_slots_and_waiting_turns() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let (w, _fake) = warden(dir.path(), 40, 25, &Script::default());
    load_default(&w).await;
    let mut rxs: Vec<_> = (0..6).map(|i| w.submit(turn(&format!("c{i}"), 40)).unwrap()).collect();
    for rx in rxs.iter_mut().take(4) {
        first_chunk(rx).await;
    }
    let s = w.status();
    let busy: Vec<_> = s.slots.iter().filter(|x| x.busy).collect();
    assert_eq!((busy.len(), s.waiting_turns), (4, 2), "{:?}", s.slots);
    assert!(
        busy.iter()
            .all(|x| x.conversation.is_some() && x.reserved_tokens.is_some())
    );
    assert_eq!(s.residents[0].busy_slots, 4);
    for t in join_all(rxs.into_iter().map(collect)).await {
        assert!(t.done, "{t:?}");
    }
    let s = w.status();
    assert_eq!((s.slots.iter().filter(|x| x.busy).count(), s.waiting_turns), (0, 0));
    w.shutdown().await;
}

/// A stream is relayed on the arbiter its reader submitted from; when that
/// arbiter stops mid-stream, the relay is dropped with it and still tells
/// the engine: the turn ends (its slot freed, `TurnEnded` said) and the
/// next turn runs on the same child.
#[actix_rt::test]
async fn a_stream_whose_readers_arbiter_stops_still_ends_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let (w, _fake) = warden(dir.path(), 400, 20, &Script::default());
    let pid = load_default(&w).await.child_pid.unwrap();
    let mut ev = w.subscribe();
    let reader = actix_rt::Arbiter::new();
    let (first, got_first) = tokio::sync::oneshot::channel();
    let w2 = w.clone();
    reader.spawn(async move {
        let mut rx = w2.submit(turn("c", 400)).unwrap();
        first_chunk(&mut rx).await;
        let _ = first.send(());
        // The reader holds its stream until its arbiter goes.
        std::future::pending::<()>().await;
        drop(rx);
    });
    tokio::time::timeout(Duration::from_secs(30), got_first)
        .await
        .expect("a first token on the reader's arbiter")
        .unwrap();
    assert_eq!(w.status().residents[0].busy_slots, 1);
    reader.stop();
    event_or_fail(&mut ev, "the stopped reader's turn to end", |e| {
        matches!(e, WardenEvent::TurnEnded { .. })
    })
    .await;
    let s = w.status();
    assert_eq!((s.residents[0].busy_slots, s.waiting_turns), (0, 0), "{:?}", s.slots);
    let t = collect(w.submit(turn("next", 3)).unwrap()).await;
    assert!(t.done && t.error.is_none(), "{t:?}");
    assert_eq!(w.status().child_pid, Some(pid), "the same child");
    w.shutdown().await;
}

/// Critical pressure at the first of three turns' ends: the respawn is
/// held until the other two ended (both whole, on the old child), a turn
/// sent meanwhile waits and is served by the new child.
#[actix_rt::test]
async fn a_brake_respawn_waits_for_the_running_turns() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let script = Script::default();
    let (w, _fake) = warden(dir.path(), 30, 20, &script);
    let pid = load_default(&w).await.child_pid.unwrap();
    let mut ev = w.subscribe();
    for _ in 0..3 {
        script.push(Level::Calm, false);
    }
    script.push(Level::Critical, true);
    let short = w.submit(turn("short", 2)).unwrap();
    let longs: Vec<_> = (0..2)
        .map(|i| w.submit(turn(&format!("long{i}"), 30)).unwrap())
        .collect();
    let short = collect(short).await;
    assert!(short.done, "{short:?}");
    let late = w.submit(turn("late", 2)).unwrap();
    assert_eq!(w.status().child_pid, Some(pid), "no respawn while two turns run");
    for t in join_all(longs.into_iter().map(collect)).await {
        assert!(t.done && t.error.is_none(), "a running turn was cut: {t:?}");
        assert_eq!(t.text().split_whitespace().count(), 30);
    }
    let late = collect(late).await;
    assert!(late.done, "{late:?}");
    let s = w.status();
    assert_ne!(s.child_pid, Some(pid), "respawned once they ended");
    assert_eq!(s.context_tokens, Some(8192), "at half of 16384");
    // The respawn came after the running turns' ends, before the late one.
    let mut seen = Vec::new();
    while let Ok(e) = ev.try_recv() {
        match e {
            WardenEvent::TurnEnded { seq, .. } => seen.push(format!("end{seq}")),
            WardenEvent::TurnStarted { seq } => seen.push(format!("start{seq}")),
            WardenEvent::Brake { action, .. } => seen.push(format!("{action}")),
            _ => {}
        }
    }
    let at = |s: &str| {
        seen.iter()
            .position(|x| x == s)
            .unwrap_or_else(|| panic!("{s} in {seen:?}"))
    };
    let respawn = seen
        .iter()
        .position(|x| x.contains("respawn"))
        .unwrap_or_else(|| panic!("{seen:?}"));
    assert!(
        at("end1") < respawn && at("end2") < respawn && respawn < at("start3"),
        "{seen:?}"
    );
    w.shutdown().await;
}

/// An unload while two turns run waits for them: both end whole, then the
/// model is unloaded and the unload answers.
#[actix_rt::test]
async fn an_unload_waits_for_the_running_turns() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let (w, _fake) = warden(dir.path(), 20, 20, &Script::default());
    load_default(&w).await;
    let mut rxs: Vec<_> = (0..2).map(|i| w.submit(turn(&format!("u{i}"), 20)).unwrap()).collect();
    for rx in &mut rxs {
        first_chunk(rx).await;
    }
    let w2 = w.clone();
    let unload = actix_rt::spawn(async move { w2.unload().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!unload.is_finished(), "the unload did not wait");
    assert!(w.status().child_pid.is_some());
    for t in join_all(rxs.into_iter().map(collect)).await {
        assert!(t.done && t.error.is_none(), "cut by the unload: {t:?}");
        // Every token but the first, which was read above.
        assert_eq!(t.text().split_whitespace().count(), 19);
    }
    assert!(unload.await.unwrap().unwrap(), "a model was loaded");
    assert!(w.status().child_pid.is_none());
    w.shutdown().await;
}

/// A child that dies under three turns, resuming off: each gets the same
/// coded error, and the death is said once (resume.rs has them go on).
#[actix_rt::test]
async fn a_death_under_three_turns_is_each_turns_coded_error() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let fake = Arc::new(FakeLlama::new(ChildScript {
        tokens: 40,
        token_delay: Duration::from_millis(20),
        die_after: Some(10),
        ..ChildScript::default()
    }));
    let cfg = WardenConfig {
        resume_turns: 0,
        ..test_config()
    };
    let w = TestWarden::in_process(&fake, dir.path()).config(cfg).start();
    load_default(&w).await;
    let mut ev = w.subscribe();
    let rxs: Vec<_> = (0..3).map(|i| w.submit(turn(&format!("d{i}"), 40)).unwrap()).collect();
    let ends = join_all(rxs.into_iter().map(collect)).await;
    let codes: Vec<_> = ends.iter().map(|t| t.error.as_ref().map(|e| e.code.clone())).collect();
    assert!(
        codes.iter().all(|c| c.is_some() && *c == codes[0]),
        "each turn its coded error: {codes:?}"
    );
    let mut exits = 0;
    while let Ok(e) = ev.try_recv() {
        exits += usize::from(matches!(e, WardenEvent::ChildExited { .. }));
    }
    assert_eq!(exits, 1, "the death is said once");
    w.shutdown().await;
}
