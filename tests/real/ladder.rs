//! The brake's ladder over two real residents (SmolLM2 in use, MiniLM
//! idle), walked down and back up by scripted readings on the real
//! llama-server: each rung is the cheapest to rebuild of those left
//! (`law::residents::brake`'s module docs), one action per sample, and each
//! is undone once the pressure is gone.
//!
//! Down: (1) a critical turn end evicts the idle resident, SmolLM2's child
//! untouched; (2) the next one shrinks SmolLM2's window by a respawn after
//! its turn; (3) critical idle samples arm, then take, the unload. Up: the
//! next message reloads SmolLM2 at the window the brake left (said as a
//! brake reload); calm idle samples end the episode and grow the window
//! back (under 90 % of the one that hurt); MiniLM comes back at its next
//! request.
//!
//! The script, not the machine, says the pressure, so the walk is the same
//! on any machine; the idle samples are sent by the test (no sensor clock,
//! no pacing), and nothing waits for a time.

use crate::support;

use llm_warden::law::brake::{Level, Readings};
use llm_warden::status::WardenEvent;
use llm_warden::{Warden, WardenConfig};
use support::pressure::Script;
use support::*;

/// SmolLM2 and MiniLM side by side.
fn two_models() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (id, file) in [("smollm2", SMOLLM2), ("minilm", MINILM)] {
        std::os::unix::fs::symlink(real_model(file), dir.path().join(format!("{id}.gguf"))).unwrap();
    }
    dir
}

/// The brake events and unloads among `events`, as `action:model-or-window`.
fn steps(events: &[WardenEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            WardenEvent::Brake { action, window_to, .. } => {
                Some(format!("{action}:{}", window_to.map_or("-".into(), |w| w.to_string())))
            }
            WardenEvent::Unloaded { model, reason, .. } => Some(format!("unloaded:{model}:{}", reason.as_str())),
            _ => None,
        })
        .collect()
}

type Events = tokio::sync::broadcast::Receiver<WardenEvent>;

/// The events up to and including the first that `last` matches (bounded).
async fn until(rx: &mut Events, what: &str, last: impl Fn(&WardenEvent) -> bool) -> Vec<WardenEvent> {
    let mut seen = Vec::new();
    let fut = async {
        loop {
            match rx.recv().await {
                Ok(e) => {
                    let end = last(&e);
                    seen.push(e);
                    if end {
                        return;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => panic!("events lagged waiting for {what}"),
                Err(e) => panic!("events {e} waiting for {what}"),
            }
        }
    };
    if tokio::time::timeout(std::time::Duration::from_secs(120), fut)
        .await
        .is_err()
    {
        panic!("timed out waiting for {what}; saw {:?}", steps(&seen));
    }
    seen
}

/// The end of a turn, after its end sample and what the brake did there
/// (a held respawn is carried out in the same handler).
fn turn_ended(e: &WardenEvent) -> bool {
    matches!(e, WardenEvent::TurnEnded { .. })
}

/// One SmolLM2 turn (its model loaded) whose start and end read `start`
/// and `end`; the events up to its end.
async fn turn(w: &Warden, ev: &mut Events, script: &Script, start: Level, end: Level) -> (Turn, Vec<WardenEvent>) {
    assert_eq!(script.left(), 0, "every reading queued was taken");
    script.push(start, false);
    script.push(end, true);
    let t = collect(w.submit(chat(Some("smollm2"), 8, true)).unwrap()).await;
    assert!(t.done && t.error.is_none(), "{t:?}");
    let seen = until(ev, "the turn's end", turn_ended).await;
    (t, seen)
}

fn resident_models(w: &Warden) -> Vec<String> {
    let mut v: Vec<String> = w.status().residents.iter().map(|r| r.model.clone()).collect();
    v.sort();
    v
}

fn smollm_pid(w: &Warden) -> Option<u32> {
    w.status()
        .residents
        .iter()
        .find(|r| r.model == "smollm2")
        .and_then(|r| r.child_pid)
}

fn reading(level: Level) -> Readings {
    Readings {
        level,
        paging: Some(level != Level::Calm),
        footprint_bytes: None,
    }
}

#[actix_rt::test]
#[ignore = "needs the real llama-server and the models (./build-llama.sh); ./test.sh runs it"]
async fn pressure_walks_down_the_ladder_and_back_up() {
    let dir = two_models();
    let script = Script::default();
    let w = TestWarden::real_cpu(real_llama_server(), dir.path())
        // 1 GiB of RAM: SmolLM2's KV is a share of it the brake calls its
        // own (`law::brake::not_ours`), so critical pressure shrinks it.
        .config(WardenConfig {
            ram_override_bytes: Some(1 << 30),
            ..test_config()
        })
        .default_model("smollm2")
        .sensor(script.clone())
        .start();
    let mut ev = w.subscribe();
    w.load(Some("minilm".into()), None).await.expect("MiniLM loads");
    w.load(Some("smollm2".into()), None).await.expect("SmolLM2 loads");
    turn(&w, &mut ev, &script, Level::Calm, Level::Calm).await;
    assert_eq!(resident_models(&w), ["minilm", "smollm2"]);
    let window = w.status().context_tokens.expect("SmolLM2's window");
    let pid = smollm_pid(&w).unwrap();

    // 1. The idle resident goes first; SmolLM2's child is untouched.
    let (_, seen) = turn(&w, &mut ev, &script, Level::Calm, Level::Critical).await;
    let mut seen = steps(&seen);
    if !seen.iter().any(|s| s.starts_with("unloaded:")) {
        // The evicted engine says its unload from its own handler.
        seen.extend(steps(
            &until(&mut ev, "MiniLM's unload", |e| {
                matches!(e, WardenEvent::Unloaded { .. })
            })
            .await,
        ));
    }
    assert_eq!(seen, ["evict:-", "unloaded:minilm:evicted"], "rung 1");
    assert_eq!(resident_models(&w), ["smollm2"]);
    assert_eq!(smollm_pid(&w), Some(pid), "the model in use kept its child");

    // 2. Nothing idle is left: SmolLM2's window is halved by a respawn
    //    after its turn.
    let (_, seen) = turn(&w, &mut ev, &script, Level::Calm, Level::Critical).await;
    let seen = steps(&seen);
    assert_eq!(seen.len(), 1, "rung 2 is one step: {seen:?}");
    assert!(seen[0].starts_with("shrink+respawn:"), "rung 2: {seen:?}");
    let shrunk = w.status().context_tokens.unwrap();
    assert!(shrunk < window, "shrunk: {window} -> {shrunk}");
    assert_ne!(smollm_pid(&w), Some(pid), "respawned");

    // 3. Lasting critical pressure with the user away: armed, then
    //    unloaded. A sample is answered once every engine handled it.
    w.brake_sample_now(Ok(reading(Level::Critical))).await;
    let seen = steps(&until(&mut ev, "the unload armed", |e| matches!(e, WardenEvent::Brake { .. })).await);
    assert!(
        seen.len() == 1 && seen[0].starts_with("arm-unload:"),
        "rung 3 is armed first: {seen:?}"
    );
    w.brake_sample_now(Ok(reading(Level::Critical))).await;
    let mut seen = steps(
        &until(
            &mut ev,
            "the unload",
            |e| matches!(e, WardenEvent::Brake { action, .. } if *action == llm_warden::law::brake::BrakeDid::Unload),
        )
        .await,
    );
    seen.sort();
    assert!(
        seen.len() == 2 && seen[0].starts_with("unload:") && seen[1] == "unloaded:smollm2:brake",
        "rung 3: {seen:?}"
    );
    assert!(w.status().residents.is_empty(), "{:?}", w.status().residents);

    // Up: the next message reloads at the window the brake left, said.
    // (Not loaded: its start takes no sample, its end one.)
    script.push(Level::Calm, false);
    let t = collect(w.submit(chat(Some("smollm2"), 8, true)).unwrap()).await;
    assert!(t.done && t.error.is_none(), "{t:?}");
    until(&mut ev, "the reload's turn end", turn_ended).await;
    assert!(
        t.notices
            .contains(&llm_warden::Notice::MemoryReload { reason: "brake" }),
        "the reload is announced: {:?}",
        t.notices
    );
    assert_eq!(w.status().context_tokens, Some(shrunk), "reloaded with the brake's cap");
    // Calm idle samples end the episode, then grow the window back once.
    let mut grown = None;
    for _ in 0..2 * llm_warden::law::brake::GROW_AFTER_CALM_SAMPLES {
        w.brake_sample_now(Ok(reading(Level::Calm))).await;
        let mut seen = Vec::new();
        while let Ok(e) = ev.try_recv() {
            seen.push(e);
        }
        let seen = steps(&seen);
        if let Some(g) = seen.iter().find(|s| s.starts_with("grow+respawn:")) {
            grown = Some(g.clone());
            break;
        }
        assert!(seen.is_empty(), "calm samples take no other step: {seen:?}");
    }
    let grown = grown.expect("calm samples grow the window back");
    let back = w.status().context_tokens.unwrap();
    assert!(
        back > shrunk && back < window,
        "grown to under 90% of the window that hurt: {shrunk} -> {back} (was {window}); {grown}"
    );
    eprintln!("ladder: SmolLM2's window {window} -> shrunk {shrunk} -> unloaded -> reloaded {shrunk} -> grown {back}");
    turn(&w, &mut ev, &script, Level::Calm, Level::Calm).await;
    // MiniLM comes back at its next request.
    w.load(Some("minilm".into()), None).await.expect("MiniLM reloads");
    assert_eq!(resident_models(&w), ["minilm", "smollm2"]);
    w.shutdown().await;
}
