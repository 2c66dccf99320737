//! KV saves against a child that misbehaves with them, on virtual time (the
//! in-process fake, `child::fake`, and tokio's clock paused): a restore the
//! child never answers costs its turn `SLOT_IO_TIMEOUT_S` and keeps the
//! save, since an unanswered call says nothing about the file; a restore
//! the child refuses removes the save. Either way the turn is answered in
//! full and the warden goes on. The same with the real llama-server, for
//! the faults it can be made to show (a corrupt or truncated file), is in
//! `kv_save.rs`.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use llm_warden::WardenConfig;
use llm_warden::child::fake::{FakeLlama, Script, SlotRestore};
use llm_warden::law::kv_save::SLOT_IO_TIMEOUT_S;
use support::*;
use tokio::time::Instant;

/// A conversation's turn whose prompt is long enough to be worth saving
/// (its bytes over 4 are past `MIN_SAVE_TOKENS`).
fn long_turn() -> llm_warden::TurnRequest {
    let mut t = chat(None, 4, true);
    t.body.insert(
        "messages".into(),
        serde_json::json!([{"role": "user", "content": "word ".repeat(400)}]),
    );
    t
}

/// The conversations the store holds.
fn saved(w: &llm_warden::Warden) -> Vec<String> {
    w.status()
        .kv_saves
        .map(|v| v.saves.into_iter().map(|s| s.conversation).collect())
        .unwrap_or_default()
}

/// Per row: a turn, an unload (which saves), the next turn (a new child,
/// which restores as scripted): what it cost and whether the save stayed.
#[actix_rt::test]
async fn an_unanswered_restore_keeps_the_save_and_a_refused_one_removes_it() {
    let rows = [
        // (restore, the save stays, the turn waits for the bound)
        // why: the file is fine; nothing to lose
        (SlotRestore::Restores, true, false),
        // why: no answer says nothing about the file: it stays for the next turn
        (SlotRestore::Hangs, true, true),
        // why: the child's word that the file is of no use
        (SlotRestore::Refuses, false, false),
    ];
    tokio::time::pause();
    for (restore, stays, waits) in rows {
        let dir = tempfile::tempdir().unwrap();
        let kv = tempfile::tempdir().unwrap();
        model_file(dir.path(), "m");
        let fake = Arc::new(FakeLlama::new(Script {
            restore,
            ..Script::default()
        }));
        let cfg = WardenConfig {
            kv_save_dir: Some(kv.path().to_path_buf()),
            ..test_config()
        };
        let w = TestWarden::in_process(&fake, dir.path()).config(cfg).start();
        let first = collect(w.submit(long_turn()).unwrap()).await;
        assert!(first.done, "{restore:?}: {first:?}");
        assert!(w.unload().await.unwrap());
        assert_eq!(saved(&w), vec!["test-conversation".to_string()], "{restore:?}");
        let at = Instant::now();
        let next = collect(w.submit(long_turn()).unwrap()).await;
        let took = at.elapsed();
        assert!(
            next.done && next.error.is_none(),
            "{restore:?}: answered in full: {next:?}"
        );
        assert_eq!(fake.slot_actions(), vec!["save", "restore"], "{restore:?}");
        let bound = Duration::from_secs(SLOT_IO_TIMEOUT_S);
        assert_eq!(took >= bound, waits, "{restore:?}: took {took:?}");
        assert!(took < bound + Duration::from_secs(1), "{restore:?}: took {took:?}");
        assert_eq!(!saved(&w).is_empty(), stays, "{restore:?}: {:?}", saved(&w));
        // The warden goes on: one more turn of the same conversation.
        assert!(collect(w.submit(long_turn()).unwrap()).await.done, "{restore:?}");
        w.shutdown().await;
    }
}

/// A long conversation held idle, then another's turn with a long answer
/// ahead, on a model whose cells are heavy: the law moves the idle one to
/// disk before the new turn starts, saved first and only then erased. When
/// the child cannot save it (a full disk), it is not erased: it stays in
/// its slot with its cells counted, and nothing else happens to it.
#[actix_rt::test]
async fn compaction_saves_before_it_erases_and_a_failed_save_keeps_the_conversation() {
    for save_fails in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let kv = tempfile::tempdir().unwrap();
        heavy_model(dir.path(), "m", serde_json::json!({}));
        let fake = Arc::new(FakeLlama::new(Script {
            save_fails,
            ..Script::default()
        }));
        let cfg = WardenConfig {
            kv_save_dir: Some(kv.path().to_path_buf()),
            ..test_config()
        };
        let w = TestWarden::in_process(&fake, dir.path()).config(cfg).start();
        let mut events = w.subscribe();
        let held = collect(w.submit(long_turn().conversation(Some("held".into()))).unwrap()).await;
        assert!(held.done, "{held:?}");
        let held_tokens = |st: &llm_warden::status::EngineStatus| {
            st.slots
                .iter()
                .find(|s| s.conversation.as_deref() == Some("held"))
                .map(|s| s.tokens)
        };
        let before = held_tokens(&w.status()).expect("the held conversation has its slot");
        let next = collect(
            w.submit(chat(None, 2048, true).conversation(Some("next".into())))
                .unwrap(),
        )
        .await;
        assert!(next.done && next.error.is_none(), "save_fails {save_fails}: {next:?}");
        let mut moved = Vec::new();
        while let Ok(e) = events.try_recv() {
            if let llm_warden::status::WardenEvent::PoolCompacted { conversation, .. } = e {
                moved.push(conversation);
            }
        }
        let st = w.status();
        let holds = held_tokens(&st);
        let pool = st.pool.expect("a live child has a pool");
        if save_fails {
            assert_eq!(fake.slot_actions(), vec!["save"], "no erase after a failed save");
            assert!(moved.is_empty(), "{moved:?}");
            assert!(holds == Some(before), "the conversation stays, counted: {:?}", st.slots);
            assert_eq!((pool.moved, pool.idle_cells >= before), (0, true), "{pool:?}");
        } else {
            assert_eq!(fake.slot_actions(), vec!["save", "erase"], "saved, then erased");
            assert_eq!(moved, vec!["held".to_string()]);
            assert_eq!(holds, None, "{:?}", st.slots);
            assert_eq!(saved(&w), vec!["held".to_string()]);
            assert_eq!(pool.moved, 1, "{pool:?}");
        }
        w.shutdown().await;
    }
}

/// A long conversation left idle past the save ahead's delay is written
/// while nobody waits; the next conversation's turn that moves it off the
/// pool writes nothing on its way to its first token (no second save) and
/// takes its slot (the child keeps the cells both prompts begin with and
/// frees the rest: no erase either), and the conversation comes back from
/// that one save. A turn that arrives before the delay writes nothing
/// ahead.
#[actix_rt::test]
async fn an_idle_conversation_is_saved_ahead_and_its_move_writes_nothing() {
    tokio::time::pause();
    let dir = tempfile::tempdir().unwrap();
    let kv = tempfile::tempdir().unwrap();
    heavy_model(dir.path(), "m", serde_json::json!({}));
    let fake = Arc::new(FakeLlama::new(Script::default()));
    let after = Duration::from_secs(2);
    let cfg = WardenConfig {
        kv_save_dir: Some(kv.path().to_path_buf()),
        kv_save_ahead: after,
        ..test_config()
    };
    let w = TestWarden::in_process(&fake, dir.path()).config(cfg).start();
    let mut events = w.subscribe();
    let held = collect(w.submit(long_turn().conversation(Some("held".into()))).unwrap()).await;
    assert!(held.done, "{held:?}");
    // Back to back: nothing is written ahead of a turn that comes first.
    tokio::time::sleep(after / 4).await;
    let again = collect(w.submit(long_turn().conversation(Some("held".into()))).unwrap()).await;
    assert!(again.done, "{again:?}");
    assert!(fake.slot_actions().is_empty(), "{:?}", fake.slot_actions());
    // Idle past the delay: the save ahead writes it once (virtual time,
    // bounded).
    let deadline = Instant::now() + Duration::from_secs(60);
    while saved(&w).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(saved(&w), vec!["held".to_string()], "saved ahead while idle");
    assert_eq!(fake.slot_actions(), vec!["save"]);
    let st = w.status();
    let held_slot = st
        .slots
        .iter()
        .find(|s| s.conversation.as_deref() == Some("held"))
        .map(|s| s.id);
    assert!(held_slot.is_some(), "it stays in its slot: {:?}", st.slots);
    // Another conversation's long turn moves it off the pool and takes its
    // slot: no write, no erase.
    let next = collect(
        w.submit(chat(None, 2048, true).conversation(Some("next".into())))
            .unwrap(),
    )
    .await;
    assert!(next.done && next.error.is_none(), "{next:?}");
    let mut moved = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let llm_warden::status::WardenEvent::PoolCompacted { conversation, .. } = e {
            moved.push(conversation);
        }
    }
    assert_eq!(moved, vec!["held".to_string()]);
    assert_eq!(
        fake.slot_actions(),
        vec!["save"],
        "moved without a second save, nor an erase"
    );
    let st = w.status();
    let slot_of = |c: &str| {
        st.slots
            .iter()
            .find(|s| s.conversation.as_deref() == Some(c))
            .map(|s| s.id)
    };
    assert!(slot_of("held").is_none(), "{:?}", st.slots);
    assert_eq!(
        slot_of("next"),
        held_slot,
        "the new conversation took the moved one's slot"
    );
    // It returns from that save.
    let back = collect(w.submit(long_turn().conversation(Some("held".into()))).unwrap()).await;
    assert!(back.done && back.error.is_none(), "{back:?}");
    assert_eq!(
        fake.slot_actions().last().map(String::as_str),
        Some("restore"),
        "{:?}",
        fake.slot_actions()
    );
    w.shutdown().await;
}
