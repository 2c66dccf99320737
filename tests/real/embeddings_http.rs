//! `/v1/embeddings` through the warden against the real llama-server b10883
//! and the default embedding model (all-MiniLM-L6-v2, `./build-llama.sh`):
//! the vectors are llama-server's own (the same request to a llama-server
//! driven directly gives the same vectors), their similarity orders a fixed
//! set by topic, `/v1/models` tells each model's kind, and a request to the
//! other kind of model is a 400 before any load.

use crate::support;

use std::time::Duration;

use llm_warden::child::process::{self, SpawnSpec};
use serde_json::{Value, json};
use support::*;

/// The embedding model's catalog id.
const EMBED_ID: &str = "all-MiniLM-L6-v2.F16";

/// Three topics, two sentences each: each sentence's nearest neighbour is
/// its topic mate.
const SENTENCES: [&str; 6] = [
    "A cat sits on the mat",
    "A kitten is resting on a rug",
    "Stock markets fell sharply today",
    "Share prices dropped on Wall Street",
    "Bake the bread for forty minutes",
    "Put the dough in a hot oven",
];

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

fn vectors(answer: &Value) -> Vec<Vec<f64>> {
    answer["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data in {answer}"))
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

/// The same request to a llama-server driven directly (`--embedding`, the
/// window and batch the warden gives this model), its answer.
async fn direct(input: &Value) -> Value {
    // A port free now (the OS's pick, released at once).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (server, model) = (real_llama_server(), real_model(MINILM));
    let port_s = port.to_string();
    let args = [
        "-m",
        model.to_str().unwrap(),
        "--embedding",
        "-c",
        "512",
        "-b",
        "512",
        "-ub",
        "512",
        "-np",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        &port_s,
    ];
    let spec = SpawnSpec {
        program: server,
        args: args.iter().map(Into::into).collect(),
        env: llm_warden::engines::env::inherited(),
        label: "llama-server",
        secret: None,
    };
    let mut p = process::spawn(&spec).unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    // Bounded: 60 s for a 46 MB model that loads in a tenth of a second.
    let mut ready = false;
    for _ in 0..600 {
        let health = http.get(format!("{base}/health")).send().await;
        if health.is_ok_and(|r| r.status().is_success()) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ready,
        "llama-server direct did not become ready: {}",
        p.output().raw_tail()
    );
    let answer = json_of(
        http.post(format!("{base}/v1/embeddings"))
            .json(&json!({ "input": input })),
    )
    .await;
    process::terminate(&mut p, Duration::from_secs(5)).await;
    answer
}

/// The warden's vectors are llama-server's own, one per input, 384 wide,
/// ordered by topic; the token-id form of `input` works too; the other kind
/// of request is refused before any load, and a chat after the embeddings
/// switches back to the chat model.
#[actix_rt::test]
#[ignore = "needs llama-server, SmolLM2 and the embedding model (./build-llama.sh); ./test.sh runs it"]
async fn embeddings_are_llama_servers_own_and_order_by_topic() {
    let dir = real_smollm_dir(&real_model(SMOLLM2));
    std::os::unix::fs::symlink(real_model(MINILM), dir.path().join(MINILM)).unwrap();
    let w = TestWarden::real_cpu(real_llama_server(), dir.path()).start();
    let base = serve_http(&w);
    let http = reqwest::Client::new();

    // The catalog says what each model serves.
    let models = json_of(http.get(format!("{base}/v1/models"))).await;
    let kind = |id: &str| {
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .map(|m| m["kind"].clone())
    };
    assert_eq!(kind(EMBED_ID), Some(json!("embedding")), "{models}");
    assert_eq!(kind("smollm2"), Some(json!("chat")), "{models}");

    // Each kind's requests to the other kind: a 400 naming the model, and
    // nothing loaded.
    let chat_to_embed = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": EMBED_ID, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat_to_embed.status(), 400);
    let body: Value = chat_to_embed.json().await.unwrap();
    assert_eq!(
        (&body["error"]["code"], &body["error"]["param"]),
        (&json!("wrong_model_kind"), &json!("model"))
    );
    let embed_to_chat = http
        .post(format!("{base}/v1/embeddings"))
        .json(&json!({"model": "smollm2", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(embed_to_chat.status(), 400);
    assert_eq!(w.status().child_pid, None, "a refused request loads nothing");

    // The vectors, through the warden and from llama-server directly.
    let input = json!(SENTENCES);
    let ours = json_of(
        http.post(format!("{base}/v1/embeddings"))
            .json(&json!({"model": EMBED_ID, "input": input})),
    )
    .await;
    assert_eq!(ours["model"], EMBED_ID, "{ours}");
    let v = vectors(&ours);
    assert_eq!(v.len(), SENTENCES.len());
    assert!(v.iter().all(|e| e.len() == 384), "384-wide vectors");
    let theirs = vectors(&direct(&input).await);
    for (i, (a, b)) in v.iter().zip(&theirs).enumerate() {
        // why: the same binary, model, flags and input: the same numbers
        assert!(cosine(a, b) > 0.9999, "sentence {i}: cosine {}", cosine(a, b));
    }
    for (i, a) in v.iter().enumerate() {
        let mate = i ^ 1;
        let (best, _) = v
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(j, b)| (j, cosine(a, b)))
            .fold((usize::MAX, f64::MIN), |acc, x| if x.1 > acc.1 { x } else { acc });
        assert_eq!(best, mate, "'{}' is nearest to '{}'", SENTENCES[i], SENTENCES[best]);
    }

    // Token ids are an input too (OpenAI's shape), through the same child.
    let pid = w.status().child_pid.expect("the embedding model is loaded");
    let ids = json_of(
        http.post(format!("{base}/v1/embeddings"))
            .json(&json!({"model": EMBED_ID, "input": [[101, 7592, 102]]})),
    )
    .await;
    assert_eq!(vectors(&ids).len(), 1, "{ids}");
    assert_eq!(w.status().child_pid, Some(pid));

    // An input longer than the encoder's window is the request's fault: a
    // 400 with the child's words (its own answer is a 500), and the same
    // child serves the next request.
    let long = http
        .post(format!("{base}/v1/embeddings"))
        .json(&json!({"model": EMBED_ID, "input": "word ".repeat(2000)}))
        .send()
        .await
        .unwrap();
    assert_eq!(long.status(), 400);
    let body: Value = long.json().await.unwrap();
    assert!(body.to_string().contains("too large"), "{body}");
    assert_eq!(w.status().child_pid, Some(pid));

    // Ollama's shapes of the same vectors: /api/embed (a list) and the
    // legacy /api/embeddings (one prompt).
    let ollama = json_of(
        http.post(format!("{base}/api/embed"))
            .json(&json!({"model": EMBED_ID, "input": [SENTENCES[0], SENTENCES[1]]})),
    )
    .await;
    let listed: Vec<Vec<f64>> = serde_json::from_value(ollama["embeddings"].clone()).expect("embeddings");
    assert_eq!(listed.len(), 2, "{ollama}");
    assert!(cosine(&listed[0], &v[0]) > 0.9999 && cosine(&listed[1], &v[1]) > 0.9999);
    assert!(ollama["prompt_eval_count"].as_u64().is_some_and(|n| n > 0), "{ollama}");
    let legacy = json_of(
        http.post(format!("{base}/api/embeddings"))
            .json(&json!({"model": EMBED_ID, "prompt": SENTENCES[2]})),
    )
    .await;
    let one: Vec<f64> = serde_json::from_value(legacy["embedding"].clone()).expect("embedding");
    assert!(cosine(&one, &v[2]) > 0.9999, "{legacy}");

    // A chat after it: the chat model is loaded in its place.
    let chat = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    assert_eq!(w.status().model.as_deref(), Some("smollm2"));
    w.shutdown().await;
}
