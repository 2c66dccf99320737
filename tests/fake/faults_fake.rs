//! Fault injection with the fake child run as a real process (the real
//! llama-server cannot print a given failure or die of a given signal on
//! demand): what only a process shows, its exit status and output at load,
//! a signal death named from the wait status. Every fault ends the turn
//! with a coded error, the child is gone, and the next request is served.
//! The watchdogs (first token, stall, request, load timeout, a death
//! mid-stream) run on virtual time in `watchdogs.rs`.

use crate::support;

use serde_json::json;
use support::*;

/// A child exiting during load for each classified reason gets its code,
/// with the child's own line as `raw`; the warden keeps serving another model
/// (resident beside, untouched by the failure).
#[actix_rt::test]
async fn load_failures_are_classified() {
    let dir = tempfile::tempdir().unwrap();
    let rows = [
        // (the fake's failure, the code, why)
        ("corrupt", "model_corrupt"),  // why: tensor data past EOF, as llama.cpp prints it
        ("not_gguf", "not_gguf"),      // why: invalid magic characters
        ("oom", "out_of_memory"),      // why: ggml's host allocation failure
        ("port_taken", "port_in_use"), // why: every port tried is taken (retries exhausted)
    ];
    for (fault, _) in rows {
        fake_model(dir.path(), fault, json!({"exit_on_load": fault}));
    }
    fake_model(dir.path(), "good", json!({}));
    let w = TestWarden::fake(dir.path()).start();
    for (i, (fault, code)) in rows.into_iter().enumerate() {
        let t = collect(w.submit(chat(Some(fault), 2, false)).unwrap()).await;
        let e = t.error.unwrap_or_else(|| panic!("row {i} ({fault}) should fail"));
        assert_eq!(e.code, code, "row {i} ({fault}): {e:?}");
        assert!(
            e.raw.as_deref().is_some_and(|r| !r.is_empty()),
            "row {i}: raw tail missing"
        );
        let s = w.status();
        assert!(
            !s.residents.iter().any(|r| r.model == fault),
            "row {i}: a failed load leaves no child: {:?}",
            s.residents
        );
        let ok = collect(w.submit(chat(Some("good"), 2, false)).unwrap()).await;
        assert!(ok.body.is_some(), "row {i}: the warden must keep serving: {ok:?}");
    }
    w.shutdown().await;
}

/// A failed `/props` degrades to the `-c` given, and the model still loads.
#[actix_rt::test]
async fn a_failed_props_read_keeps_the_requested_window() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"props_fail": true}));
    let cfg = llm_warden::WardenConfig {
        ctx_pin: Some(4096),
        ..test_config()
    };
    let w = TestWarden::fake(dir.path()).config(cfg).start();
    assert!(collect(w.submit(chat(None, 2, true)).unwrap()).await.done);
    assert_eq!(w.status().context_tokens, Some(4096));
    w.shutdown().await;
}

/// A child that dies of a fatal signal while loading is told apart by the
/// signal's name: SIGILL is `illegal_instruction` with the rebuild command in
/// its message; SIGSEGV, SIGBUS and SIGABRT are crashes named in the message
/// and in `raw`'s last line. The warden serves the next model after each.
#[actix_rt::test]
async fn fatal_signals_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let rows = [
        // (signal, code, why)
        ("SIGILL", "illegal_instruction"), // why: a binary built for another CPU (the AMX build)
        ("SIGSEGV", "child_crashed"),      // why: a crash; its name says which
        ("SIGBUS", "child_crashed"),       // why: a mapped model file cut short under the child
        ("SIGABRT", "child_crashed"),      // why: a failed GGML_ASSERT aborts
    ];
    for (sig, _) in rows {
        fake_model(dir.path(), sig, json!({"signal_on_load": sig}));
    }
    fake_model(dir.path(), "good", json!({}));
    let w = TestWarden::fake(dir.path()).start();
    for (i, (sig, code)) in rows.into_iter().enumerate() {
        let t = collect(w.submit(chat(Some(sig), 2, false)).unwrap()).await;
        let e = t.error.unwrap_or_else(|| panic!("row {i} ({sig}) should fail"));
        assert_eq!(e.code, code, "row {i} ({sig}): {e:?}");
        assert!(
            e.message.contains(&format!("killed by {sig}")),
            "row {i}: {}",
            e.message
        );
        assert!(
            !e.message.contains("signal "),
            "row {i}: a number, not the name: {}",
            e.message
        );
        let raw = e.raw.as_deref().unwrap_or("");
        assert!(
            raw.lines().last().is_some_and(|l| l.contains(sig)),
            "row {i}: raw's last line names {sig}: {raw}"
        );
        if sig == "SIGILL" {
            assert!(
                e.message.contains("./build-llama.sh --rebuild"),
                "row {i}: {}",
                e.message
            );
        }
        let ok = collect(w.submit(chat(Some("good"), 2, false)).unwrap()).await;
        assert!(ok.body.is_some(), "row {i}: the warden must keep serving: {ok:?}");
    }
    w.shutdown().await;
}

/// A child killed by SIGSEGV mid-stream ends the stream with an error that
/// names the signal; the next request respawns and is answered.
#[actix_rt::test]
async fn a_signal_death_mid_stream_is_named() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(
        dir.path(),
        "m",
        json!({"tokens": 10, "signal_after": {"signal": "SIGSEGV", "tokens": 3}}),
    );
    let w = TestWarden::fake(dir.path()).start();
    let t = collect(w.submit(chat(None, 10, true)).unwrap()).await;
    let e = t.error.clone().expect("an error event");
    assert_eq!(e.code, "child_crashed", "{e:?}");
    assert!(e.message.contains("killed by SIGSEGV"), "{}", e.message);
    assert!(
        e.raw.as_deref().unwrap_or("").contains("SIGSEGV (segmentation fault"),
        "{e:?}"
    );
    let again = collect(w.submit(chat(None, 2, true)).unwrap()).await;
    assert!(again.done, "2 tokens come before the fault: {again:?}");
    w.shutdown().await;
}
