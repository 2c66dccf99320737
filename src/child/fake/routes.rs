//! The fake's routes, shaped as llama-server b10883 answers them (the
//! tests against the real llama-server are the reference):
//! `/health` (503 loading, then 200; no key needed), `/props`
//! (`default_generation_settings.n_ctx`), the `/completion` readiness ping,
//! and `/v1/chat/completions`, streamed as SSE chunks ending in `[DONE]`
//! (then the connection closes, as llama-server's does) or whole, and
//! `/slots/0?action=save|restore` into `--slot-save-path` (the restore as
//! scripted: `SlotRestore`). Any other route is a 404, as a route the build
//! lacks would be.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use super::http::{self, Request};
use super::SlotRestore;
use super::life::Child;
use crate::child::process::ExitInfo;

/// The status a scripted death exits with.
const DEATH_STATUS: i32 = 3;

/// Serves one connection until it closes, or forever when the script hangs
/// or dies in it (the fake's end then closes it).
pub(super) async fn connection(sock: TcpStream, child: Arc<Child>, died: mpsc::Sender<ExitInfo>) {
    let (rd, mut wr) = sock.into_split();
    let mut rd = BufReader::new(rd);
    while let Some(req) = http::read_request(&mut rd).await {
        match answer(&req, &mut wr, &child, &died).await {
            Ok(true) if !req.wants_close() => continue,
            _ => return,
        }
    }
}

/// Answers one request; whether the connection stays open.
async fn answer(
    req: &Request,
    wr: &mut OwnedWriteHalf,
    child: &Child,
    died: &mpsc::Sender<ExitInfo>,
) -> std::io::Result<bool> {
    let close = req.wants_close();
    if req.method == "GET" && req.path == "/health" {
        let (status, body) = if child.ready() {
            (200, json!({"status": "ok"}))
        } else {
            (503, loading())
        };
        http::write_json(wr, status, &body, close).await?;
        return Ok(true);
    }
    if req.header("authorization") != Some(&format!("Bearer {}", child.key)) {
        let body = json!({"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}});
        http::write_json(wr, 401, &body, close).await?;
        return Ok(true);
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/props") if child.script.props_fail => {
            http::write_json(wr, 500, &json!({"error": {"code": 500, "message": "boom"}}), close).await?;
        }
        ("GET", "/props") => {
            let n_ctx = child.script.props_ctx.or(child.ctx).unwrap_or(4096);
            let body = json!({"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1});
            http::write_json(wr, 200, &body, close).await?;
        }
        ("POST", "/completion") if child.ready() => {
            let body = json!({"content": "t", "tokens_predicted": 1, "stop": true});
            http::write_json(wr, 200, &body, close).await?;
        }
        ("POST", "/v1/chat/completions") if child.ready() => return chat(req, wr, child, died).await,
        ("POST", "/tokenize") if child.ready() => {
            // One token per word, as the fake's answers count them.
            let words = serde_json::from_slice::<Value>(&req.body)
                .ok()
                .and_then(|b| b["content"].as_str().map(|c| c.split_whitespace().count()))
                .unwrap_or(0);
            http::write_json(wr, 200, &json!({"tokens": vec![1; words]}), close).await?;
        }
        ("POST", path) if child.ready() && let Some((slot, action)) = slot_path(path) => {
            return slot_action(req, wr, child, slot, action).await;
        }
        ("POST", "/completion" | "/v1/chat/completions") => http::write_json(wr, 503, &loading(), close).await?,
        _ => {
            http::write_json(wr, 404, &json!({"error": {"code": 404, "message": "Not Found"}}), close).await?;
        }
    }
    Ok(true)
}

/// A slot action's path, `/slots/N?action=A`: the slot and the action.
fn slot_path(path: &str) -> Option<(u32, &str)> {
    let (slot, action) = path.strip_prefix("/slots/")?.split_once("?action=")?;
    Some((slot.parse().ok()?, action))
}

/// `/slots/N?action=save|restore` with `{"filename"}` in `--slot-save-path`,
/// and `erase`, answered in llama-server's shape: a save writes the slots'
/// token count (the fake keeps one count for all slots; or fails, as
/// scripted), a restore reads it back (or refuses, or hangs, as scripted),
/// an erase clears it. Like
/// llama-server, none without `--slot-save-path`.
async fn slot_action(req: &Request, wr: &mut OwnedWriteHalf, child: &Child, slot: u32, action: &str) -> std::io::Result<bool> {
    use std::sync::atomic::Ordering;
    child.fake.record_slot_action(action);
    let close = req.wants_close();
    let file = serde_json::from_slice::<Value>(&req.body)
        .ok()
        .and_then(|v| v["filename"].as_str().map(str::to_string));
    let not_supported = json!({"error": {"code": 501, "message": "This server does not support slots action.", "type": "not_supported_error"}});
    if child.slot_dir.is_some() && action == "erase" {
        let n = child.slot_tokens.swap(0, Ordering::AcqRel);
        http::write_json(wr, 200, &json!({"id_slot": slot, "n_erased": n}), close).await?;
        return Ok(true);
    }
    let (Some(dir), Some(file)) = (child.slot_dir.as_ref(), file) else {
        http::write_json(wr, 501, &not_supported, close).await?;
        return Ok(true);
    };
    let path = dir.join(&file);
    let refused = || json!({"error": {"code": 400, "message": "Unable to restore slot", "type": "invalid_request_error"}});
    match (action, child.script.restore) {
        ("save", _) if child.script.save_fails => {
            let e = json!({"error": {"code": 500, "message": "failed to save slot", "type": "server_error"}});
            http::write_json(wr, 500, &e, close).await?;
        }
        ("save", _) => {
            let n = child.slot_tokens.load(Ordering::Acquire);
            std::fs::write(&path, format!("{n:>64}"))?;
            let body = json!({"id_slot": slot, "filename": file, "n_saved": n, "n_written": 64, "timings": {"save_ms": 1.0}});
            http::write_json(wr, 200, &body, close).await?;
        }
        ("restore", SlotRestore::Hangs) => std::future::pending::<()>().await,
        ("restore", SlotRestore::Refuses) => http::write_json(wr, 400, &refused(), close).await?,
        ("restore", SlotRestore::Restores) => match std::fs::read_to_string(&path).map(|t| t.trim().parse::<u32>()) {
            Ok(Ok(n)) => {
                child.slot_tokens.store(n, Ordering::Release);
                let body = json!({"id_slot": slot, "filename": file, "n_restored": n, "n_read": 64, "timings": {"restore_ms": 1.0}});
                http::write_json(wr, 200, &body, close).await?;
            }
            _ => http::write_json(wr, 400, &refused(), close).await?,
        },
        _ => http::write_json(wr, 400, &json!({"error": {"code": 400, "message": "Invalid action"}}), close).await?,
    }
    Ok(true)
}

/// llama-server's answer while loading.
fn loading() -> Value {
    json!({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
}

/// A chat request, streamed or whole; whether the connection stays open.
async fn chat(
    req: &Request,
    wr: &mut OwnedWriteHalf,
    child: &Child,
    died: &mpsc::Sender<ExitInfo>,
) -> std::io::Result<bool> {
    let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
        let e = json!({"error": {"code": 400, "message": "invalid JSON", "type": "invalid_request_error"}});
        http::write_json(wr, 400, &e, true).await?;
        return Ok(false);
    };
    child.fake.record_request(body.clone());
    // The slot now holds this prompt (about its bytes over 4, as tokens).
    child
        .slot_tokens
        .store((req.body.len() / 4) as u32, std::sync::atomic::Ordering::Release);
    // The bound as llama-server reads it: the first of these present (the
    // warden sends n_predict).
    let asked = ["n_predict", "max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
        .unwrap_or(u64::MAX);
    // An assistant message last is continued, as llama-server continues
    // it: the answer goes on from the words already there.
    let messages = body.get("messages").and_then(Value::as_array);
    let from = messages
        .and_then(|m| m.last())
        .filter(|m| m["role"] == "assistant")
        .and_then(|m| m["content"].as_str())
        .map_or(0, |c| c.split_whitespace().count() as u32);
    let n = u64::from(child.script.tokens.saturating_sub(from)).min(asked) as u32;
    let answer = from..from + n;
    if let Some(poison) = child.script.die_on.as_deref()
        && req.body.windows(poison.len()).any(|w| w == poison.as_bytes())
    {
        // Before the answer's headers: it dies reading the prompt.
        child.say("fake: dying on this prompt");
        die(died, Some(DEATH_STATUS), None).await;
    }
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        if let Err(e) = stream(wr, child, answer, died).await {
            // The client went away mid-stream: llama-server cancels the slot.
            child.say("srv  stop: cancel task, id_task = 0");
            return Err(e);
        }
        return Ok(false);
    }
    whole(wr, child, answer, died, req.wants_close()).await?;
    Ok(true)
}

/// What the script says happens before token `i` (of an answer's tokens;
/// a fault scripted at or past its length never happens, as in the Python
/// fake): nothing, a hang (forever: the fake's end closes the connection),
/// or its death.
async fn before_token(i: u32, child: &Child, died: &mpsc::Sender<ExitInfo>) {
    if let Some((sig, at)) = child.script.signal_after
        && at == i
        && child.fake.may_die(child.script.die_times)
    {
        die(died, None, Some(sig)).await;
    }
    if child.script.die_after == Some(i) && child.fake.may_die(child.script.die_times) {
        child.say("fake: dying mid-stream");
        die(died, Some(DEATH_STATUS), None).await;
    }
    if child.script.hang_after == Some(i) {
        std::future::pending::<()>().await;
    }
}

/// Ends the fake with this exit status or signal; never returns (the
/// fake's end closes the connection).
async fn die(died: &mpsc::Sender<ExitInfo>, code: Option<i32>, signal: Option<i32>) {
    let _ = died.send(ExitInfo { code, signal }).await;
    std::future::pending::<()>().await;
}

/// A streamed answer: tokens `answer` (`t{i}`) as chunks, the final chunk
/// with `timings`, `[DONE]`.
async fn stream(
    wr: &mut OwnedWriteHalf,
    child: &Child,
    answer: std::ops::Range<u32>,
    died: &mpsc::Sender<ExitInfo>,
) -> std::io::Result<()> {
    let s = &child.script;
    let (start, n) = (answer.start, answer.len() as u32);
    for i in answer {
        before_token(i, child, died).await;
        tokio::time::sleep(if i == start { s.first_token_delay } else { s.token_delay }).await;
        if i == start {
            http::write_stream_head(wr).await?;
        }
        let ev = json!({"object": "chat.completion.chunk", "model": "fake",
            "choices": [{"index": 0, "delta": {"content": format!("t{i} ")}, "finish_reason": null}]});
        http::write_event(wr, &ev.to_string()).await?;
    }
    if n == 0 {
        http::write_stream_head(wr).await?;
    }
    let last = json!({"object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "timings": {"predicted_n": n}});
    http::write_event(wr, &last.to_string()).await?;
    http::write_event(wr, "[DONE]").await?;
    http::write_stream_end(wr).await
}

/// A whole answer, after the time its tokens take.
async fn whole(
    wr: &mut OwnedWriteHalf,
    child: &Child,
    answer: std::ops::Range<u32>,
    died: &mpsc::Sender<ExitInfo>,
    close: bool,
) -> std::io::Result<()> {
    let s = &child.script;
    let (start, n) = (answer.start, answer.len() as u32);
    for i in answer {
        before_token(i, child, died).await;
        tokio::time::sleep(if i == start { s.first_token_delay } else { s.token_delay }).await;
    }
    let body = json!({
        "object": "chat.completion", "model": "fake",
        "choices": [{"index": 0, "finish_reason": "length",
            "message": {"role": "assistant", "content": "tok ".repeat(n as usize)}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n},
    });
    http::write_json(wr, 200, &body, close).await
}
