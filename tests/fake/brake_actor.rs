//! The memory brake carried out by the engine actor, driven by a scripted
//! pressure view (the engine's window on the sensor) over the in-process
//! fake child on paused tokio time (the idle pacing runs on its real 60 s
//! clock in virtual milliseconds), and over the fake run as a process where a real
//! process must fail: whole sequences of
//! turns and idle ticks, asserting the respawns (new pids, smaller windows
//! read back from the child), the unload, the carries, the notices in the
//! stream and the events. The real llama-server version is in
//! `tests/real/real_brake.rs`.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use llm_warden::Notice;
use llm_warden::child::fake::{FakeLlama, Script as ChildScript};
use llm_warden::law::brake::Level;
use llm_warden::status::WardenEvent;
use llm_warden::{Warden, WardenConfig};
use serde_json::json;
use support::pressure::Script;
use support::*;

/// A warden over the in-process fake on paused time, its brake reading
/// `Script`; the machine has 8 GiB.
fn brake_warden(dir: &Path, cfg: WardenConfig) -> (Warden, Script, Arc<FakeLlama>) {
    tokio::time::pause();
    let fake = Arc::new(FakeLlama::new(ChildScript::default()));
    let script = Script::default();
    let w = TestWarden::in_process(&fake, dir)
        .config(eight_gib(cfg))
        .sensor(script.clone())
        .start();
    (w, script, fake)
}

/// As `brake_warden`, over the fake run as a process (a real process, whose model
/// file scripts how it fails).
fn brake_warden_process(dir: &Path, cfg: WardenConfig) -> (Warden, Script) {
    let script = Script::default();
    let w = TestWarden::fake(dir)
        .config(eight_gib(cfg))
        .sensor(script.clone())
        .start();
    (w, script)
}

fn eight_gib(cfg: WardenConfig) -> WardenConfig {
    WardenConfig {
        ram_override_bytes: Some(8 << 30),
        ..cfg
    }
}

/// Whether the fake's child `pid` has exited.
fn exited(fake: &FakeLlama, pid: u32) -> bool {
    fake.spawns().iter().any(|s| s.pid == pid && s.exit().is_some())
}

/// Sends an idle sample with the script's next reading (the sensor's clock,
/// here the test's) and waits until the engine handled it.
async fn idle_tick(w: &Warden, script: &Script) {
    let reading = Ok(script.next());
    w.brake_sample_now(reading).await;
}

fn brake_actions(events: &[WardenEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            WardenEvent::Brake { action, window_to, .. } => {
                Some(format!("{action}:{}", window_to.map_or("-".into(), |w| w.to_string())))
            }
            _ => None,
        })
        .collect()
}

fn drain(rx: &mut tokio::sync::broadcast::Receiver<WardenEvent>) -> Vec<WardenEvent> {
    let mut v = Vec::new();
    while let Ok(e) = rx.try_recv() {
        v.push(e);
    }
    v
}

/// Critical at a turn's end, then two idle ticks: the turn ends after a
/// respawn at half the window (new pid, the `acted` notice in its stream),
/// the first tick arms, the second unloads; the next message announces the
/// reload and loads at the reduced window, seeded with the episode.
#[actix_rt::test]
async fn critical_turn_end_then_two_idle_ticks() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let (w, script, fake) = brake_warden(dir.path(), test_config());
    let mut ev = w.subscribe();
    // Turn 1 loads the model (no turn_start sample: nothing was loaded).
    script.push(Level::Critical, false);
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert!(t.done, "{t:?}");
    assert_eq!(t.notices.last(), Some(&Notice::MemoryWarning { reason: "acted" }));
    let s = w.status();
    assert_eq!(s.context_tokens, Some(8192), "respawned at half of 16384");
    let pid1 = s.child_pid.unwrap();
    // Two idle ticks under lasting critical pressure.
    script.push(Level::Critical, false);
    idle_tick(&w, &script).await;
    assert_eq!(w.status().child_pid, Some(pid1), "the first tick only arms");
    script.push(Level::Critical, false);
    idle_tick(&w, &script).await;
    assert_eq!(w.status().child_pid, None, "the second tick unloads");
    assert!(exited(&fake, pid1), "the unloaded child stopped");
    assert_eq!(w.status().brake.reload_pending.as_deref(), Some("m"));
    assert_eq!(
        brake_actions(&drain(&mut ev)),
        ["shrink+respawn:8192", "arm-unload:8192", "unload:-"]
    );
    // The next message: the reload is announced first, and loads at the cap.
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert_eq!(t.notices.first(), Some(&Notice::MemoryReload { reason: "brake" }));
    assert!(t.done);
    let s = w.status();
    assert_eq!(s.context_tokens, Some(8192));
    assert!(s.brake.state.seeded, "the carried episode continues");
    assert_eq!(s.brake.reload_pending, None, "a successful spawn forgets the record");
    w.shutdown().await;
}

/// Warning with paging at a turn's end: decided, said nothing, applied by the
/// next idle tick's respawn, said (acted) at the next turn's end along with
/// the reload. Warning without paging: nothing at all.
#[actix_rt::test]
async fn warning_with_and_without_paging() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let (w, script, _fake) = brake_warden(dir.path(), test_config());
    script.push(Level::Warning, false);
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert!(t.notices.iter().all(|n| !matches!(n, Notice::MemoryWarning { .. })));
    assert_eq!(w.status().brake.state.pending_cap, None, "held back without paging");
    let pid = w.status().child_pid.unwrap();
    script.push(Level::Warning, false); // turn_start
    script.push(Level::Warning, true); // turn_end, with paging
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert!(
        t.notices.iter().all(|n| !matches!(n, Notice::MemoryWarning { .. })),
        "{t:?}"
    );
    assert_eq!(w.status().brake.state.pending_cap, Some(8192));
    assert_eq!(w.status().child_pid, Some(pid), "no respawn while the user is here");
    script.push(Level::Warning, false);
    idle_tick(&w, &script).await;
    let s = w.status();
    assert_ne!(s.child_pid, Some(pid));
    assert_eq!(s.context_tokens, Some(8192));
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert_eq!(t.notices.first(), Some(&Notice::MemoryReload { reason: "brake" }));
    assert_eq!(t.notices.last(), Some(&Notice::MemoryWarning { reason: "acted" }));
    w.shutdown().await;
}

/// Pressure the model does not cause (its window's KV is under 10 % of RAM):
/// the `external` notice, nothing resized.
#[actix_rt::test]
async fn external_pressure_is_said_and_nothing_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "small", json!({}));
    let (w, script, _fake) = brake_warden(dir.path(), test_config());
    script.push(Level::Critical, false);
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert_eq!(t.notices.last(), Some(&Notice::MemoryWarning { reason: "external" }));
    let s = w.status();
    assert_eq!(s.context_tokens, Some(8192));
    assert_eq!(s.brake.state.cap, None);
    w.shutdown().await;
}

/// With WARDEN_CTX pinned nothing is resized and no `acted` notice is drawn;
/// the unload still applies after two idle criticals.
#[actix_rt::test]
async fn a_pinned_window_is_not_resized_but_unloads() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let cfg = WardenConfig {
        ctx_pin: Some(16384),
        ..test_config()
    };
    let (w, script, fake) = brake_warden(dir.path(), cfg);
    script.push(Level::Critical, false);
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert!(
        t.notices.iter().all(|n| !matches!(n, Notice::MemoryWarning { .. })),
        "{t:?}"
    );
    let pid = w.status().child_pid.unwrap();
    assert_eq!(w.status().context_tokens, Some(16384));
    script.push(Level::Critical, false);
    idle_tick(&w, &script).await;
    script.push(Level::Critical, false);
    idle_tick(&w, &script).await;
    assert_eq!(w.status().child_pid, None);
    assert!(exited(&fake, pid), "the unloaded child stopped");
    w.shutdown().await;
}

/// A respawn that fails degrades into an unload (one WARNING, the record
/// kept); the next message announces the reload, and a second failure at
/// the same window surfaces as the load error it is.
#[actix_rt::test]
async fn a_failed_respawn_degrades_into_an_unload() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({"exit_on_ctx": {"8192": "oom"}}));
    let (w, script) = brake_warden_process(dir.path(), test_config());
    let mut ev = w.subscribe();
    script.push(Level::Critical, false);
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert!(t.done, "the turn itself completed: {t:?}");
    assert_eq!(w.status().child_pid, None);
    assert_eq!(w.status().brake.reload_pending.as_deref(), Some("m"));
    assert!(brake_actions(&drain(&mut ev)).contains(&"respawn-failed:-".to_string()));
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert_eq!(t.notices.first(), Some(&Notice::MemoryReload { reason: "brake" }));
    assert_eq!(t.error.expect("the reload fails the same way").code, "out_of_memory");
    w.shutdown().await;
}

/// The idle pacing on the brake's own clock (`WARDEN_BRAKE_TICK_S` = 60 s,
/// on virtual time): an idle sample within 55 s of the end of the last turn,
/// or of the previous sample, is skipped; one past that acts. Critical
/// throughout: the first sample taken shrinks by a respawn and arms the
/// unload (a respawn is not a use: the idle clock stays), the next unloads.
#[actix_rt::test]
async fn idle_samples_are_paced_by_the_brake_clock() {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", json!({}));
    let cfg = WardenConfig {
        brake_tick: Duration::from_secs(60),
        ..test_config()
    };
    let (w, script, fake) = brake_warden(dir.path(), cfg);
    let mut ev = w.subscribe();
    assert!(collect(w.submit(chat(None, 4, true)).unwrap()).await.done);
    let pid = w.status().child_pid.unwrap();
    drain(&mut ev);
    let critical_idle = |at: u64| {
        let script = script.clone();
        let w = w.clone();
        async move {
            tokio::time::advance(Duration::from_secs(at)).await;
            script.push(Level::Critical, false);
            idle_tick(&w, &script).await;
        }
    };
    critical_idle(54).await; // 54 s after the turn: skipped
    assert_eq!(
        brake_actions(&drain(&mut ev)),
        Vec::<String>::new(),
        "54 s after a turn"
    );
    critical_idle(2).await; // 56 s after the turn: taken
    assert_eq!(brake_actions(&drain(&mut ev)), ["shrink+respawn:8192"]);
    assert!(exited(&fake, pid), "respawned");
    let pid = w.status().child_pid.unwrap();
    critical_idle(54).await; // 54 s after the last sample: skipped
    assert_eq!(
        brake_actions(&drain(&mut ev)),
        Vec::<String>::new(),
        "54 s after a sample"
    );
    assert_eq!(w.status().child_pid, Some(pid));
    critical_idle(2).await; // 56 s after it: taken
    assert_eq!(brake_actions(&drain(&mut ev)), ["unload:-"]);
    assert!(exited(&fake, pid));
    w.shutdown().await;
}
