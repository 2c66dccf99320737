//! The routes beside chat against the real llama-server and SmolLM2 over
//! HTTP: raw completions streamed and whole, fill-in-the-middle streamed and
//! whole, and as Ollama's generate with a suffix (on a copy of SmolLM2 given
//! FIM tokens by gguf-py, and refused with a 400 before any turn on a model
//! without them), the tokenizer round trip, a tokenizer call answered while
//! a generation runs, and keep-alive per request (body, header, zero,
//! forever, a short one reaped, a bad one refused).

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use llm_warden::status::{EngineState, WardenEvent};
use llm_warden::{Warden, WardenConfig};
use serde_json::{Value, json};
use support::*;

/// The `data:` payloads of a streamed answer, `[DONE]` included.
async fn stream_events(base: &str, path: &str, body: Value) -> Vec<String> {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// A copy of SmolLM2 whose header names three of its tokens as the
/// fill-in-the-middle markers (gguf-py's own metadata tool), so llama-server
/// serves `/infill` for it: the real server's infill path, on a real model.
fn fim_copy(dir: &Path, smollm: &Path) {
    let tool = client_python().with_file_name("gguf-new-metadata");
    let out = Command::new(tool)
        .arg(smollm)
        .arg(dir.join("smollm2-fim.gguf"))
        .args(["--special-token-by-id", "fim_pre", "4"])
        .args(["--special-token-by-id", "fim_suf", "5"])
        .args(["--special-token-by-id", "fim_mid", "6", "--force"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Raw completions (whole and streamed alike), infill on a FIM model and
/// refused without one, and the tokenizer round trip answer through the warden.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh) and the Python clients (./build-llama.sh clients); ./test.sh runs it"]
async fn completions_infill_and_the_tokenizer_answer_through_the_warden() {
    let (server, smollm) = (real_llama_server(), real_model(SMOLLM2));
    let dir = real_smollm_dir(&smollm);
    fim_copy(dir.path(), &smollm);
    let w = TestWarden::real_cpu(server, dir.path()).start();
    let base = serve_http(&w);

    // Nothing is loaded: the tokenizer call loads the default model first.
    let (s, t) = post(&base, "/tokenize", json!({"content": "Hello world"})).await;
    assert_eq!(s, 200, "{t}");
    let tokens = t["tokens"].as_array().unwrap().clone();
    assert!(!tokens.is_empty());
    let pid = w.status().child_pid.expect("the tokenizer loaded the model");
    let (s, d) = post(&base, "/detokenize", json!({ "tokens": tokens })).await;
    assert_eq!((s, d["content"].as_str()), (200, Some("Hello world")), "{d}");
    // An id past the vocabulary: a 400, and the child lives on.
    let (s, e) = post(&base, "/detokenize", json!({"tokens": [99_999_999]})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_value")), "{e}");
    let (s, e) = post(&base, "/detokenize", json!({"tokens": [-1]})).await;
    assert_eq!((s, e["error"]["param"].as_str()), (400, Some("tokens[0]")), "{e}");
    assert_eq!(w.status().child_pid, Some(pid));

    let prompt = json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0});
    let (s, whole) = post(&base, "/v1/completions", prompt.clone()).await;
    assert_eq!(s, 200, "{whole}");
    assert_eq!(whole["object"], "text_completion");
    let text = whole["choices"][0]["text"].as_str().unwrap().to_string();
    assert!(!text.trim().is_empty());
    let mut streamed = prompt.clone();
    streamed["stream"] = json!(true);
    let events = stream_events(&base, "/v1/completions", streamed).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let joined: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(str::to_string))
        .collect();
    // why: greedy decoding: the stream says what the whole answer said
    assert_eq!(joined, text);
    let (s, e) = post(&base, "/v1/completions", json!({"max_tokens": 2})).await;
    assert_eq!((s, e["error"]["param"].as_str()), (400, Some("prompt")), "{e}");

    // SmolLM2 has no FIM tokens: its header says so before any turn, a
    // 400 naming the model, and the warden serves the next request.
    let fim =
        json!({"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n", "n_predict": 8, "temperature": 0});
    let (s, e) = post(&base, "/infill", fim.clone()).await;
    assert_eq!(
        (s, e["error"]["code"].as_str(), e["error"]["param"].as_str()),
        (400, Some("unsupported_value"), Some("model")),
        "{e}"
    );
    let (s, _) = post(&base, "/v1/completions", prompt.clone()).await;
    assert_eq!(s, 200);
    let (s, e) = post(&base, "/infill", json!({"input_suffix": ""})).await;
    assert_eq!((s, e["error"]["param"].as_str()), (400, Some("input_prefix")), "{e}");
    // The FIM copy answers (the warden switches the child to it).
    let mut on_fim = fim;
    on_fim["model"] = json!("smollm2-fim");
    let (s, a) = post(&base, "/infill", on_fim.clone()).await;
    assert_eq!(s, 200, "{a}");
    assert!(
        a["content"].is_string() && a["tokens_predicted"].as_u64() > Some(0),
        "{a}"
    );
    assert_eq!(w.status().model.as_deref(), Some("smollm2-fim"));
    // Streamed, infill ends with its own `"stop": true` event (no [DONE]),
    // not with a broken stream's error.
    on_fim["stream"] = json!(true);
    let events = stream_events(&base, "/infill", on_fim).await;
    let parsed: Vec<Value> = events.iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert!(parsed.iter().all(|v| v.get("error").is_none()), "{events:?}");
    assert_eq!(parsed.last().unwrap()["stop"], true, "{events:?}");
    let joined: String = parsed.iter().filter_map(|v| v["content"].as_str()).collect();
    // why: greedy decoding: the stream says what the whole answer said
    assert_eq!(joined, a["content"].as_str().unwrap());
    // Ollama's generate with a suffix is the same fill-in-the-middle.
    let (s, g) = post(
        &base,
        "/api/generate",
        json!({"model": "smollm2-fim", "prompt": "def add(a, b):\n    return ", "suffix": "\n",
               "stream": false, "options": {"num_predict": 8, "temperature": 0}}),
    )
    .await;
    assert_eq!((s, g["response"].as_str()), (200, a["content"].as_str()), "{g}");
    w.shutdown().await;
}

/// While a long generation streams, `/tokenize` for the loaded model is
/// answered by the child beside it: the turn is still running when the
/// answer arrives (queued behind it, it would come only after the turn).
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn the_tokenizer_never_waits_behind_a_generation() {
    let (w, _dir) = real_smollm_warden(test_config());
    let base = serve_http(&w);
    let mut ev = w.subscribe();
    let long = json!({
        "messages": [{"role": "user", "content": "Count from one to one thousand."}],
        "max_tokens": 400, "ignore_eos": true, "stream": true, "temperature": 0,
    });
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&long)
        .send()
        .await
        .unwrap();
    let mut body = r.bytes_stream();
    // Past the loading notice (an SSE comment) to the first token.
    let first_token = async { while !body.next().await.unwrap().unwrap().windows(6).any(|w| w == b"data: ") {} };
    tokio::time::timeout(Duration::from_secs(120), first_token)
        .await
        .expect("a first token within 120 s");
    assert_eq!(w.status().state, EngineState::Generating);
    let (s, t) = post(
        &base,
        "/tokenize",
        json!({"content": "Hello world", "with_pieces": true}),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["tokens"][0]["piece"], "Hello");
    assert_eq!(w.status().state, EngineState::Generating, "the turn was still running");
    assert!(
        !std::iter::from_fn(|| ev.try_recv().ok()).any(|e| matches!(e, WardenEvent::TurnEnded { .. })),
        "no turn ended before the tokenizer answered"
    );
    drop(body);
    w.shutdown().await;
}

fn hi() -> Value {
    json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
}

fn hi_with(keep_alive: Value) -> Value {
    let mut body = hi();
    body["keep_alive"] = keep_alive;
    body
}

/// The header sets the idle deadline, a request without one leaves it, and
/// the body wins over the header: negative is forever.
async fn header_body_and_forever(w: &Warden, base: &str) {
    let (s, _) = post_with(base, "/v1/chat/completions", hi(), &[("X-Warden-Keep-Alive", "1h")]).await;
    assert_eq!(s, 200);
    let st = w.status();
    assert_eq!((st.idle_timeout_s, st.keep_alive_s), (Some(3600.0), Some(3600.0)));
    let deadline = st.idle_deadline_ms.unwrap();
    assert_eq!(deadline, st.last_used.unwrap() + 3_600_000);
    post(base, "/v1/chat/completions", hi()).await;
    assert_eq!(w.status().idle_timeout_s, Some(3600.0));
    let forever = hi_with(json!(-1));
    post_with(base, "/v1/chat/completions", forever, &[("X-Warden-Keep-Alive", "0")]).await;
    let st = w.status();
    assert_eq!(
        (st.idle_timeout_s, st.idle_deadline_ms, st.keep_alive_s),
        (None, None, Some(-1.0))
    );
    // No timeout: the idle timer never asks; asked anyway, the engine keeps it.
    let pid = st.child_pid.unwrap();
    let mut ev = w.subscribe();
    w.queue_reap();
    let checked = event_or_fail(&mut ev, "the reap's check", |e| {
        matches!(e, WardenEvent::ReapChecked { .. })
    })
    .await;
    assert_eq!(
        checked,
        WardenEvent::ReapChecked { reaped: false },
        "a model kept forever was reaped"
    );
    assert_eq!(w.status().child_pid, Some(pid), "kept forever");
}

/// A short keep-alive is reaped by the idle timer; zero unloads as soon as
/// the turn ends, streamed or not.
async fn short_and_zero_unload(w: &Warden, base: &str, ev: &mut tokio::sync::broadcast::Receiver<WardenEvent>) {
    post(base, "/v1/chat/completions", hi_with(json!("300ms"))).await;
    event_or_fail(ev, "the reap of a 300 ms keep-alive", |e| {
        matches!(
            e,
            WardenEvent::Unloaded {
                reason: llm_warden::status::UnloadReason::Idle,
                ..
            }
        )
    })
    .await;
    let mut zero = hi_with(json!(0));
    zero["stream"] = json!(true);
    let events = stream_events(base, "/v1/chat/completions", zero).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    event_or_fail(ev, "the unload after a keep_alive 0 turn", |e| {
        matches!(
            e,
            WardenEvent::Unloaded {
                reason: llm_warden::status::UnloadReason::Idle,
                ..
            }
        )
    })
    .await;
    assert_eq!(w.status().model, None);
}

/// Bad values are refused, naming what was wrong, and change nothing.
async fn bad_values_are_refused(w: &Warden, base: &str) {
    let (s, e) = post(base, "/v1/chat/completions", hi_with(json!("soon"))).await;
    assert_eq!((s, e["error"]["param"].as_str()), (400, Some("keep_alive")), "{e}");
    let (s, e) = post_with(base, "/v1/chat/completions", hi(), &[("X-Warden-Keep-Alive", "5 min")]).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_value")), "{e}");
    let (s, _) = post(base, "/warden/load", json!({"keep_alive": true})).await;
    assert_eq!(s, 400);
    // why: a malformed load request once loaded the default model silently
    let (s, e) = post(base, "/warden/load", json!({"model": 5})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_request")), "{e}");
    assert_eq!(w.status().keep_alive_s, Some(600.0), "a refused value changes nothing");
}

/// Keep-alive per request (body, header, zero, forever, short) sets the
/// idle deadline; `/warden/load` takes one too; a bad one is refused.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn keep_alive_per_request_sets_the_idle_deadline() {
    let cfg = WardenConfig {
        idle_tick: Duration::from_millis(100),
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    let mut ev = w.subscribe();
    header_body_and_forever(&w, &base).await;
    short_and_zero_unload(&w, &base, &mut ev).await;
    let (s, l) = post(&base, "/warden/load", json!({"keep_alive": "10m"})).await;
    assert_eq!(s, 200, "{l}");
    assert_eq!(w.status().keep_alive_s, Some(600.0));
    bad_values_are_refused(&w, &base).await;
    w.shutdown().await;
}
