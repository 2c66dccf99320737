//! The watchdogs on virtual time: the in-process fake child
//! (`child::fake`), the engine on the test's own runtime and tokio's clock
//! paused, so every bound runs at its configured value in milliseconds and
//! the test can assert *when* it fired, not only that it did. The bounds
//! differ from one another (7, 3, 11 and 30 s), so a watchdog that used
//! the wrong one fails its row.
//!
//! The same faults from a real process are in `faults_fake.rs` (the Python
//! fake: signals and exit statuses) and `reliability.rs` (the real
//! llama-server SIGSTOPped mid-stream).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use llm_warden::WardenConfig;
use llm_warden::child::fake::{FakeLlama, Script};
use llm_warden::status::WardenEvent;
use support::*;
use tokio::time::Instant;

const FIRST_TOKEN: Duration = Duration::from_secs(7);
const STALL: Duration = Duration::from_secs(3);
const REQUEST: Duration = Duration::from_secs(11);
const LOAD: Duration = Duration::from_secs(30);
const GRACE: Duration = Duration::from_secs(2);
/// Virtual time a turn may take past its scripted figure: each loopback hop
/// between the engine and the fake costs a heartbeat step or two (see
/// `child::fake`, the heartbeat rule).
const HOPS: Duration = Duration::from_millis(50);

/// A warden over the in-process fake running `script`, on paused time.
struct Rig {
    w: llm_warden::Warden,
    fake: Arc<FakeLlama>,
    _dir: tempfile::TempDir,
}

fn rig(script: Script) -> Rig {
    tokio::time::pause();
    let dir = tempfile::tempdir().unwrap();
    model_file(dir.path(), "m");
    let fake = Arc::new(FakeLlama::new(script));
    let cfg = WardenConfig {
        first_token_timeout: FIRST_TOKEN,
        stall_timeout: STALL,
        request_timeout: REQUEST,
        load_timeout: LOAD,
        stop_grace: GRACE,
        // why: these time each watchdog's error; a turn that goes on after
        // one is resume.rs's
        resume_turns: 0,
        ..test_config()
    };
    let w = TestWarden::in_process(&fake, dir.path()).config(cfg).start();
    Rig { w, fake, _dir: dir }
}

/// A turn and the virtual time it took, from submission to its end.
async fn timed(w: &llm_warden::Warden, req: llm_warden::TurnRequest) -> (Turn, Duration) {
    let at = Instant::now();
    let t = collect(w.submit(req).unwrap()).await;
    (t, at.elapsed())
}

/// `got` is `want` plus at most the hops' slack.
fn assert_at(what: &str, got: Duration, want: Duration) {
    assert!(
        got >= want && got <= want + HOPS,
        "{what}: took {got:?} of virtual time, want {want:?} (+ at most {HOPS:?})"
    );
}

/// The first-token ceiling fires at exactly its bound for a child that
/// never answers; the child is stopped (SIGTERM) and nothing runs.
#[actix_rt::test]
async fn the_first_token_ceiling_fires_at_its_bound() {
    let r = rig(Script {
        hang_after: Some(0),
        ..Script::default()
    });
    load_default(&r.w).await;
    let (t, took) = timed(&r.w, chat(None, 4, true)).await;
    let e = t.error.expect("a hung error");
    assert_eq!(e.code, "child_hung", "{e:?}");
    assert!(e.message.contains("before the first token"), "{e:?}");
    assert_at("the first-token ceiling", took, FIRST_TOKEN);
    assert_eq!(r.w.status().child_pid, None);
    let spawns = r.fake.spawns();
    assert_eq!(spawns.len(), 1);
    assert_eq!(spawns[0].exit().and_then(|x| x.code), Some(0), "stopped by SIGTERM");
    r.w.shutdown().await;
}

/// A first token that comes one second inside the ceiling is served, and
/// its measured time to first token is the fake's virtual delay.
#[actix_rt::test]
async fn a_slow_first_token_inside_the_bound_is_served() {
    let delay = FIRST_TOKEN - Duration::from_secs(1);
    let r = rig(Script {
        first_token_delay: delay,
        token_delay: Duration::from_millis(100),
        ..Script::default()
    });
    load_default(&r.w).await;
    let mut ev = r.w.subscribe();
    let (t, took) = timed(&r.w, chat(None, 4, true)).await;
    assert!(t.done, "{t:?}");
    assert_eq!(t.text(), "t0 t1 t2 t3 ");
    assert_at("the turn", took, delay + 3 * Duration::from_millis(100));
    let end = event_or_fail(&mut ev, "the turn's end", |e| {
        matches!(e, WardenEvent::TurnEnded { .. })
    })
    .await;
    let WardenEvent::TurnEnded { timings, .. } = end else {
        unreachable!()
    };
    let ttft = timings.and_then(|t| t.ttft_s).expect("a time to first token");
    assert!(
        (delay.as_secs_f64()..delay.as_secs_f64() + HOPS.as_secs_f64()).contains(&ttft),
        "ttft {ttft} s, want {delay:?}"
    );
    r.w.shutdown().await;
}

/// A child that stops after two tokens is caught by the stall watchdog at
/// exactly the stall bound after its last token; it is unloaded as hung and
/// the next turn respawns it.
#[actix_rt::test]
async fn a_stall_between_tokens_fires_at_its_bound() {
    let (first, step) = (Duration::from_millis(500), Duration::from_millis(100));
    let r = rig(Script {
        first_token_delay: first,
        token_delay: step,
        hang_after: Some(2),
        ..Script::default()
    });
    load_default(&r.w).await;
    let mut ev = r.w.subscribe();
    let (t, took) = timed(&r.w, chat(None, 10, true)).await;
    let e = t.error.clone().expect("a hung error");
    assert_eq!(e.code, "child_hung", "{e:?}");
    assert!(e.message.contains("between tokens"), "{e:?}");
    assert_eq!(t.text(), "t0 t1 ", "the tokens before the stall were relayed");
    assert_at("the stall watchdog", took, first + step + STALL);
    let e = event_or_fail(&mut ev, "the hung unload", |e| {
        matches!(e, WardenEvent::Unloaded { .. })
    })
    .await;
    assert!(
        matches!(
            e,
            WardenEvent::Unloaded {
                reason: llm_warden::status::UnloadReason::Hung,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(r.w.status().child_pid, None);
    // Two tokens come before the fault: the respawned child answers them.
    let again = collect(r.w.submit(chat(None, 2, true)).unwrap()).await;
    assert!(again.done, "{again:?}");
    assert_eq!(r.fake.spawns().len(), 2, "the next turn respawned the child");
    r.w.shutdown().await;
}

/// A whole (non-streamed) answer that never comes is bounded by the
/// request timeout, at exactly that bound.
#[actix_rt::test]
async fn a_whole_answer_is_bounded_by_the_request_timeout() {
    let r = rig(Script {
        hang_after: Some(0),
        ..Script::default()
    });
    load_default(&r.w).await;
    let (t, took) = timed(&r.w, chat(None, 4, false)).await;
    let e = t.error.expect("a hung error");
    assert_eq!(e.code, "child_hung", "{e:?}");
    assert!(e.message.contains("before the answer completed"), "{e:?}");
    assert_at("the request timeout", took, REQUEST);
    r.w.shutdown().await;
}

/// A child that never gets ready is stopped at exactly the load timeout,
/// with `load_timeout`; nothing of it remains.
#[actix_rt::test]
async fn a_child_that_never_gets_ready_times_out_at_the_load_bound() {
    let r = rig(Script {
        never_ready: true,
        ..Script::default()
    });
    let (t, took) = timed(&r.w, chat(None, 2, true)).await;
    let e = t.error.expect("a load error");
    assert_eq!(e.code, "load_timeout", "{e:?}");
    assert_at("the load timeout", took, LOAD);
    assert_eq!(r.w.status().child_pid, None);
    assert_eq!(r.fake.running(), 0, "the child was stopped");
    r.w.shutdown().await;
}

/// A child that dies after three tokens ends the stream at once (no
/// watchdog waits) with `child_crashed` and its last words in `raw`; the
/// next turn respawns it.
#[actix_rt::test]
async fn a_child_dying_mid_stream_is_reported_at_once_and_respawned() {
    let (first, step) = (Duration::from_millis(200), Duration::from_millis(100));
    let r = rig(Script {
        first_token_delay: first,
        token_delay: step,
        die_after: Some(3),
        ..Script::default()
    });
    load_default(&r.w).await;
    let (t, took) = timed(&r.w, chat(None, 10, true)).await;
    let e = t.error.clone().expect("an error event");
    assert_eq!(e.code, "child_crashed", "{e:?}");
    assert!(e.raw.as_deref().unwrap_or("").contains("dying mid-stream"), "{e:?}");
    assert_eq!(t.text(), "t0 t1 t2 ");
    assert_at("the death's report", took, first + 2 * step);
    assert_eq!(r.fake.spawns()[0].exit().and_then(|x| x.code), Some(3));
    let again = collect(r.w.submit(chat(None, 2, true)).unwrap()).await;
    assert!(again.done, "two tokens come before the fault: {again:?}");
    assert_eq!(r.fake.spawns().len(), 2);
    r.w.shutdown().await;
}

/// A hung child that ignores SIGTERM is killed when the stop grace ends:
/// the turn's error comes at the stall bound plus the grace, and the child
/// died of SIGKILL.
#[actix_rt::test]
async fn a_hung_child_ignoring_sigterm_is_killed_after_the_grace() {
    let first = Duration::from_millis(500);
    let r = rig(Script {
        first_token_delay: first,
        hang_after: Some(1),
        ignore_term: true,
        ..Script::default()
    });
    load_default(&r.w).await;
    let (t, took) = timed(&r.w, chat(None, 10, true)).await;
    assert_eq!(t.error.expect("a hung error").code, "child_hung");
    assert_at("the stall bound and the grace", took, first + STALL + GRACE);
    let exit = r.fake.spawns()[0].exit().expect("the child ended");
    assert_eq!(exit.signal, Some(9), "killed, not stopped: {exit:?}");
    r.w.shutdown().await;
}

/// The time a model served runs while one of its turns relays, and only
/// then: a ten-token turn 100 ms apart counts its second, five idle
/// seconds after it count nothing (virtual time).
#[actix_rt::test]
async fn serving_time_runs_only_while_a_turn_relays() {
    let (first, step) = (Duration::from_millis(100), Duration::from_millis(100));
    let r = rig(Script {
        tokens: 10,
        first_token_delay: first,
        token_delay: step,
        ..Script::default()
    });
    load_default(&r.w).await;
    assert_eq!(r.w.status().loads.serving_ms, 0, "nothing served yet");
    let (t, _) = timed(&r.w, chat(None, 10, true)).await;
    assert!(t.done, "{t:?}");
    let served = Duration::from_millis(r.w.status().loads.serving_ms);
    assert_at("the turn's serving time", served, first + 9 * step);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        r.w.status().loads.serving_ms,
        served.as_millis() as u64,
        "idle time is not serving"
    );
    r.w.shutdown().await;
}
