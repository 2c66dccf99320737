//! `llm-warden run` and `chat`, the binary, against a warden over the
//! in-process fake child served on a free port: the conversation `run`
//! sends (history, system prompt, a block of several lines, `/clear`), its
//! commands, Ctrl-C stopping an answer and not the program, and `chat`
//! reaching the warden `WARDEN_URL` names instead of starting its own.

use crate::support;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use llm_warden::child::fake::{FakeLlama, Script as ChildScript};
use serde_json::{Value, json};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one run of the binary left.
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Starts `llm-warden args...` with `env` and `stdin` written to it (then
/// closed); the runner's own WARDEN_* variables never leak in.
fn start(args: &[&str], env: &[(&str, &str)], stdin: &str) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-warden"));
    cmd.args(args)
        .env_remove("WARDEN_URL")
        .env_remove("WARDEN_API_KEY")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("the binary runs");
    let mut input = child.stdin.take().unwrap();
    let text = stdin.to_string();
    actix_rt::spawn(async move {
        let _ = input.write_all(text.as_bytes()).await;
    });
    child
}

/// Waits for `child` to exit (bounded) and reads what it left.
async fn finish(child: tokio::process::Child, what: &str) -> Ran {
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what}: the binary did not exit within 60 s"))
        .unwrap();
    let ran = Ran {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!("$ {what}\n{}{}", ran.stdout, ran.stderr);
    ran
}

/// A warden over the in-process fake (answers of `tokens` tokens, `ms`
/// apart) and the base URL it is served on.
fn served(dir: &std::path::Path, tokens: u32, ms: u64) -> (llm_warden::Warden, Arc<FakeLlama>, String) {
    fake_model(dir, "m", json!({}));
    let fake = Arc::new(FakeLlama::new(ChildScript {
        tokens,
        token_delay: Duration::from_millis(ms),
        ..ChildScript::default()
    }));
    let w = TestWarden::in_process(&fake, dir).config(test_config()).start();
    let base = serve_http(&w);
    (w, fake, base)
}

/// The messages of each chat request the child received, in order.
fn conversations(fake: &FakeLlama) -> Vec<Value> {
    fake.requests()
        .into_iter()
        .filter_map(|r| r.get("messages").cloned())
        .collect()
}

/// A session: each message is sent with the history before it and the
/// system prompt set; `/clear` forgets the history; a `"""` block is one
/// message; commands are answered on stderr and never sent; nothing after
/// `/bye` is read.
#[actix_rt::test]
async fn run_holds_a_conversation_and_answers_its_commands() {
    let dir = tempfile::tempdir().unwrap();
    let (w, fake, base) = served(dir.path(), 3, 0);
    let typed = "hello\n/set system Be brief.\n/show system\n/bogus\n\"\"\"\ntwo\nlines\n\"\"\"\n/clear\nagain\n/bye\nnever sent\n";
    let child = start(&["run", "m", "--max-tokens", "3"], &[("WARDEN_URL", &base)], typed);
    let ran = finish(child, "llm-warden run m").await;
    assert!(ran.ok, "{}", ran.stderr);
    assert_eq!(
        ran.stdout.matches("t0 t1 t2").count(),
        3,
        "three answers: {}",
        ran.stdout
    );
    for said in ["loaded m: window ", "Be brief.", "Unknown command '/bogus'", "Cleared"] {
        assert!(ran.stderr.contains(said), "{said:?} missing from:\n{}", ran.stderr);
    }
    assert!(
        !ran.stderr.contains("starting one"),
        "WARDEN_URL names the warden: {}",
        ran.stderr
    );
    let user = |t: &str| json!({"role": "user", "content": t});
    let system = json!({"role": "system", "content": "Be brief."});
    let answer = json!({"role": "assistant", "content": "t0 t1 t2 "});
    assert_eq!(
        conversations(&fake),
        vec![
            json!([user("hello")]),
            json!([system, user("hello"), answer, user("two\nlines")]),
            json!([system, user("again")]),
        ]
    );
    w.shutdown().await;
}

/// A model the warden does not have is refused before the first prompt,
/// with the server's sentence and a non-zero exit.
#[actix_rt::test]
async fn run_refuses_a_model_the_warden_lacks_before_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let (w, fake, base) = served(dir.path(), 3, 0);
    let child = start(&["run", "nope"], &[("WARDEN_URL", &base)], "hello\n");
    let ran = finish(child, "llm-warden run nope").await;
    assert!(!ran.ok);
    assert!(ran.stderr.contains("model_not_found"), "{}", ran.stderr);
    assert!(ran.stderr.starts_with("loading nope"), "{}", ran.stderr);
    assert!(conversations(&fake).is_empty(), "nothing was sent");
    w.shutdown().await;
}

/// Ctrl-C while an answer streams stops that answer (the warden's turn
/// ends, cancelled by the closed stream) and not the program: the next
/// message goes out with what was shown of the stopped answer.
#[cfg(unix)]
#[actix_rt::test]
async fn ctrl_c_stops_the_answer_not_the_program() {
    let dir = tempfile::tempdir().unwrap();
    // 60 tokens 50 ms apart: 3 s an answer, far longer than the test
    // waits for two of them.
    let (w, fake, base) = served(dir.path(), 60, 50);
    let mut child = start(&["run", "m"], &[("WARDEN_URL", &base)], "long\nafter\n/bye\n");
    let pid = child.id().unwrap();
    // The answer as it reaches the terminal, read as it comes.
    let shown = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let into = shown.clone();
    actix_rt::spawn(async move {
        let mut buf = [0u8; 256];
        while let Ok(n) = stdout.read(&mut buf).await {
            if n == 0 {
                break;
            }
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let text = || String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
    poll_until(
        "two tokens shown",
        Duration::from_secs(30),
        || text().contains("t1 "),
        text,
    )
    .await;
    // SIGINT, as a terminal's Ctrl-C sends it.
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let ran = finish(child, "llm-warden run m (Ctrl-C)").await;
    assert!(ran.ok, "the program went on after Ctrl-C: {}", ran.stderr);
    let sent = conversations(&fake);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1][0], json!({"role": "user", "content": "long"}));
    let kept = sent[1][1]["content"].as_str().unwrap().to_string();
    assert!(
        kept.starts_with("t0 t1 ") && !kept.contains("t59"),
        "the stopped answer as shown: {kept:?}"
    );
    assert!(text().starts_with(&kept), "what the terminal showed: {}", text());
    assert_eq!(sent[1][2], json!({"role": "user", "content": "after"}));
    w.shutdown().await;
}

/// `chat` reaches the warden `WARDEN_URL` names; one that answers nothing
/// is an error, never a second warden started beside it.
#[actix_rt::test]
async fn chat_honours_warden_url() {
    let dir = tempfile::tempdir().unwrap();
    let (w, fake, base) = served(dir.path(), 2, 0);
    let child = start(
        &["chat", "hi", "--model", "m", "--max-tokens", "2"],
        &[("WARDEN_URL", &base)],
        "",
    );
    let ran = finish(child, "llm-warden chat hi").await;
    assert!(ran.ok, "{}", ran.stderr);
    assert_eq!(ran.stdout.trim(), "t0 t1");
    assert!(!ran.stderr.contains("starting one"), "{}", ran.stderr);
    assert_eq!(conversations(&fake).len(), 1);

    let nowhere = format!("http://127.0.0.1:{}", support::workers::free_port());
    let child = start(&["chat", "hi"], &[("WARDEN_URL", &nowhere)], "");
    let ran = finish(child, "llm-warden chat hi (nowhere)").await;
    assert!(!ran.ok);
    assert!(
        ran.stderr
            .contains(&format!("no llm-warden server is running on {nowhere}")),
        "{}",
        ran.stderr
    );
    assert!(!ran.stderr.contains("starting one"), "{}", ran.stderr);
    w.shutdown().await;
}
