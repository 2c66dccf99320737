//! The HTTP surface against the real llama-server: a prompt larger than the
//! window is a 400 in OpenAI's shape (`context_length_exceeded`), nothing
//! crashes, and the next request is answered.

use crate::support;

use llm_warden::WardenConfig;
use serde_json::{Value, json};
use support::*;

/// A prompt larger than the window is a 400 `context_length_exceeded`, and the
/// next request is answered.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_prompt_larger_than_the_window_is_a_400() {
    let cfg = WardenConfig {
        ctx_pin: Some(4096),
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    let http = llm_warden::child::client::shared_http_client();
    let huge = "the lighthouse keeper counted the waves ".repeat(1200);
    for stream in [false, true] {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": huge}], "max_tokens": 8, "stream": stream}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        // A stream that had already started (the loading notice) carries the
        // error as its last event; otherwise the status says it.
        let err: Value = if stream && status == 200 {
            let data = text
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("data: "))
                .expect("an error event");
            serde_json::from_str(data).unwrap()
        } else {
            assert_eq!(status, 400, "{text}");
            serde_json::from_str(&text).unwrap()
        };
        assert_eq!(
            err["error"]["code"], "context_length_exceeded",
            "stream={stream}: {err}"
        );
        assert_eq!(err["error"]["type"], "invalid_request_error");
        let ok = http
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200, "the warden keeps serving");
    }
    w.shutdown().await;
}
