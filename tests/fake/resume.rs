//! Turns whose child dies under them go on on the next child, against
//! the in-process fake, which continues an assistant message last as
//! llama-server does (from the words already there) and can die once
//! (`die_times`): the answer a client reads across a death is the one it
//! would have read without it; a turn that had nothing yet runs again; and
//! the turns that must not go on (a death while the prompt was read, a
//! second death, resuming off) end with the death's code and say why.
//! The real llama-server, every dialect, is in tests/real/resume.rs.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use llm_warden::child::fake::{FakeLlama, Script};
use llm_warden::status::WardenEvent;
use llm_warden::{Warden, WardenConfig};
use serde_json::Value;
use support::*;

/// A warden over the in-process fake running `script`, resuming `resume`
/// times; slots_actor.rs's model and memory, so turns run side by side.
fn warden(script: Script, resume: u32) -> (Warden, Arc<FakeLlama>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", serde_json::json!({}));
    let fake = Arc::new(FakeLlama::new(script));
    let cfg = WardenConfig {
        resume_turns: resume,
        ram_override_bytes: Some(8 << 30),
        ..test_config()
    };
    let w = TestWarden::in_process(&fake, dir.path()).config(cfg).start();
    (w, fake, dir)
}

/// The fake's answer of `n` tokens from the first.
fn answer(n: u32) -> String {
    (0..n).map(|i| format!("t{i} ")).collect()
}

/// Every event already published.
fn drained(ev: &mut tokio::sync::broadcast::Receiver<WardenEvent>) -> Vec<WardenEvent> {
    std::iter::from_fn(|| ev.try_recv().ok()).collect()
}

/// The bound the child was asked for, whichever field carried it.
fn bound(body: &Value) -> Option<u64> {
    ["n_predict", "max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
}

/// A stream cut after three tokens goes on on the next child from exactly
/// there: the client reads the whole answer once, with one finish; the next
/// child was asked to continue the three words with the seven tokens left;
/// the resume and the pause are said.
#[actix_rt::test]
async fn a_stream_cut_by_a_crash_goes_on_where_it_stopped() {
    let (w, fake, _dir) = warden(
        Script {
            tokens: 10,
            die_after: Some(3),
            die_times: Some(1),
            ..Script::default()
        },
        1,
    );
    load_default(&w).await;
    let mut ev = w.subscribe();
    let t = collect(w.submit(chat(None, 10, true)).unwrap()).await;
    assert!(t.done && t.error.is_none(), "{t:?}");
    assert_eq!(t.text(), answer(10));
    let finishes = t
        .chunks
        .iter()
        .filter(|c| String::from_utf8_lossy(c).contains("\"finish_reason\":\"length\""))
        .count();
    assert_eq!(finishes, 1, "one end: {:?}", t.chunks);
    assert_eq!(fake.spawns().len(), 2, "the model server was started again");
    let again = fake.requests().pop().expect("the continuation");
    let last = again["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (last["role"].as_str(), last["content"].as_str()),
        (Some("assistant"), Some("t0 t1 t2 "))
    );
    assert_eq!(bound(&again), Some(7), "the tokens left: {again}");
    let events = drained(&mut ev);
    let resumed: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            WardenEvent::TurnResumed {
                how, code, sent_tokens, ..
            } => Some((*how, code.as_str(), *sent_tokens)),
            _ => None,
        })
        .collect();
    assert_eq!(resumed, vec![("continued", "child_crashed", 3)]);
    let paused = events.iter().find_map(|e| match e {
        WardenEvent::TurnEnded { timings: Some(t), .. } => Some(t.paused_s),
        _ => None,
    });
    assert!(
        matches!(paused, Some(Some(p)) if p > 0.0),
        "the pause is said: {paused:?}"
    );
    let exits = events
        .iter()
        .filter(|e| matches!(e, WardenEvent::ChildExited { .. }))
        .count();
    assert_eq!(exits, 1);
    w.shutdown().await;
}

/// A child killed from outside before the first token: the turn had
/// nothing, so the same request runs on the next child.
#[actix_rt::test]
async fn a_turn_killed_before_its_first_token_runs_again() {
    let (w, fake, _dir) = warden(
        Script {
            tokens: 6,
            signal_after: Some((9, 0)),
            die_times: Some(1),
            ..Script::default()
        },
        1,
    );
    load_default(&w).await;
    let mut ev = w.subscribe();
    let t = collect(w.submit(chat(None, 6, true)).unwrap()).await;
    assert!(t.done && t.error.is_none(), "{t:?}");
    assert_eq!(t.text(), answer(6));
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0]["messages"], reqs[1]["messages"], "the same request again");
    let how = drained(&mut ev).into_iter().find_map(|e| match e {
        WardenEvent::TurnResumed { how, code, .. } => Some((how, code)),
        _ => None,
    });
    assert_eq!(how, Some(("rerun", "child_killed".to_string())));
    w.shutdown().await;
}

/// A whole answer whose child crashed runs again (its client had nothing)
/// and is answered whole.
#[actix_rt::test]
async fn a_whole_answer_cut_by_a_crash_is_answered_whole() {
    let (w, fake, _dir) = warden(
        Script {
            tokens: 6,
            die_after: Some(3),
            die_times: Some(1),
            ..Script::default()
        },
        1,
    );
    load_default(&w).await;
    let t = collect(w.submit(chat(None, 6, false)).unwrap()).await;
    let (status, body) = t.body.clone().expect("a whole answer");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 6, "{v}");
    assert_eq!(fake.spawns().len(), 2);
    w.shutdown().await;
}

/// A crash while the prompt was read (nothing streamed yet) may be the
/// prompt's: the turn ends with the crash's code and says why it did not
/// go on; no child is started for it, and the next turn is served.
#[actix_rt::test]
async fn a_crash_before_the_first_token_is_not_run_again() {
    let (w, fake, _dir) = warden(
        Script {
            tokens: 4,
            die_after: Some(0),
            die_times: Some(1),
            ..Script::default()
        },
        1,
    );
    load_default(&w).await;
    let t = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    let e = t.error.expect("the crash");
    assert_eq!(e.code, "child_crashed", "{e:?}");
    assert!(
        e.message.contains("not resumed") && e.message.contains("prompt"),
        "{e:?}"
    );
    assert!(e.raw.as_deref().unwrap_or("").contains("dying mid-stream"), "{e:?}");
    assert_eq!(fake.spawns().len(), 1, "nothing started for it");
    let next = collect(w.submit(chat(None, 4, true)).unwrap()).await;
    assert!(next.done && next.error.is_none(), "{next:?}");
    assert_eq!(next.text(), answer(4));
    w.shutdown().await;
}

/// A child that dies under the continuation too: the turn ends there with
/// the death's code, saying it died again; the text before stays the
/// client's, unrepeated.
#[actix_rt::test]
async fn a_second_death_ends_the_turn_and_says_so() {
    let (w, fake, _dir) = warden(
        Script {
            tokens: 10,
            die_after: Some(3),
            ..Script::default()
        },
        1,
    );
    load_default(&w).await;
    let t = collect(w.submit(chat(None, 10, true)).unwrap()).await;
    let e = t.error.clone().expect("the second death");
    assert_eq!(e.code, "child_crashed", "{e:?}");
    assert!(e.message.contains("died again"), "{e:?}");
    assert_eq!(t.text(), answer(3));
    assert_eq!(fake.spawns().len(), 2);
    w.shutdown().await;
}

/// `resume_turns` 0: a death fails the turn as it did before, saying
/// resuming is off.
#[actix_rt::test]
async fn resuming_off_fails_the_turn() {
    let (w, fake, _dir) = warden(
        Script {
            tokens: 10,
            die_after: Some(3),
            die_times: Some(1),
            ..Script::default()
        },
        0,
    );
    load_default(&w).await;
    let t = collect(w.submit(chat(None, 10, true)).unwrap()).await;
    let e = t.error.clone().expect("the death");
    assert_eq!(e.code, "child_crashed", "{e:?}");
    assert!(e.message.contains("resuming is off"), "{e:?}");
    assert_eq!(t.text(), answer(3));
    assert_eq!(fake.spawns().len(), 1);
    w.shutdown().await;
}

/// One death under three streaming turns: the child is started again once,
/// and each turn goes on and reads its whole answer.
#[actix_rt::test]
async fn three_turns_under_one_death_each_go_on() {
    let (w, fake, _dir) = warden(
        Script {
            tokens: 30,
            token_delay: Duration::from_millis(30),
            die_after: Some(8),
            die_times: Some(1),
            ..Script::default()
        },
        1,
    );
    load_default(&w).await;
    let mut ev = w.subscribe();
    let rxs: Vec<_> = (0..3)
        .map(|i| {
            let req = chat(None, 30, true).conversation(Some(format!("c{i}")));
            w.submit(req).unwrap()
        })
        .collect();
    for t in join_all(rxs.into_iter().map(collect)).await {
        assert!(t.done && t.error.is_none(), "{t:?}");
        // The turn the death fell on had 8 tokens; the others as many as
        // they had read by then; each reads all 30 once.
        assert_eq!(t.text(), answer(30));
    }
    assert_eq!(fake.spawns().len(), 2, "one new child for all three");
    let events = drained(&mut ev);
    let resumed = events
        .iter()
        .filter(|e| matches!(e, WardenEvent::TurnResumed { .. }))
        .count();
    let exits = events
        .iter()
        .filter(|e| matches!(e, WardenEvent::ChildExited { .. }))
        .count();
    assert_eq!((resumed, exits), (3, 1));
    w.shutdown().await;
}

/// A prompt that kills every child that reads it, sent while another turn
/// streams: the streaming turn goes on on the next child and ends whole;
/// the prompt's own turn is not run again (it would kill the next child
/// too) and its error says why; the next child lives.
#[actix_rt::test]
async fn a_prompt_that_crashes_the_child_is_not_retried_and_spares_the_others() {
    let (w, fake, _dir) = warden(
        Script {
            // why: the good turn streams for 2 s, so the poison is read
            // while it is in flight on any machine
            tokens: 40,
            token_delay: Duration::from_millis(50),
            die_on: Some("POISON".into()),
            ..Script::default()
        },
        1,
    );
    load_default(&w).await;
    let mut ev = w.subscribe();
    let mut good = w
        .submit(chat(None, 40, true).conversation(Some("good".into())))
        .unwrap();
    first_chunk(&mut good).await;
    let mut poison = chat(None, 40, true).conversation(Some("bad".into()));
    poison.body.insert(
        "messages".into(),
        serde_json::json!([{"role": "user", "content": "Say POISON."}]),
    );
    let bad = collect(w.submit(poison).unwrap()).await;
    let e = bad.error.clone().expect("the prompt's crash");
    assert_eq!(e.code, "child_crashed", "{e:?}");
    assert!(e.message.contains("while reading this turn's prompt"), "{e:?}");
    let good = collect(good).await;
    assert!(good.done && good.error.is_none(), "{good:?}");
    // The first token was read before `collect`.
    assert_eq!(format!("t0 {}", good.text()), answer(40));
    assert_eq!(fake.spawns().len(), 2, "one death, one new child");
    let poisoned = fake
        .requests()
        .iter()
        .filter(|r| r.to_string().contains("POISON"))
        .count();
    assert_eq!(poisoned, 1, "the prompt was not sent again");
    let resumed = drained(&mut ev)
        .iter()
        .filter(|e| matches!(e, WardenEvent::TurnResumed { .. }))
        .count();
    assert_eq!(resumed, 1);
    w.shutdown().await;
}
