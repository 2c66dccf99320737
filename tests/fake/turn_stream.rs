//! `Warden::chat`: a turn as typed chunks over the fake child (a test double
//! standing in for llama-server): the text in order, the final event, the
//! end; and a refusal before the queue.

use crate::support;

use llm_warden::Chunk;
use serde_json::json;
use support::*;

/// `Warden::chat` hands an embedder the text in order, the notices and the end
/// as typed chunks.
#[actix_rt::test]
async fn chat_hands_an_embedder_typed_chunks() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", json!({"tokens": 5, "token_ms": 1}));
    let w = TestWarden::fake(dir.path()).start();
    let mut s = w.chat(chat(None, 5, true)).unwrap();
    let mut got = Vec::new();
    while let Some(c) = s.next().await {
        got.push(c);
    }
    let text: String = got
        .iter()
        .filter_map(|c| match c {
            Chunk::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "t0 t1 t2 t3 t4 ");
    assert!(
        got.iter().any(|c| matches!(c, Chunk::Notice(_))),
        "the loading notice: {got:?}"
    );
    assert!(
        got.iter()
            .any(|c| matches!(c, Chunk::Event(v) if v["choices"][0]["finish_reason"] == "length")),
        "the final event: {got:?}"
    );
    assert_eq!(got.last(), Some(&Chunk::Done));
    // A whole answer, the same way.
    let whole = w.chat(chat(None, 3, false)).unwrap().text().await.unwrap();
    assert_eq!(whole, "tok tok tok ");
    // An unknown model is refused before the queue.
    let mut req = chat(None, 3, true);
    req.model = Some("nope".into());
    assert_eq!(w.chat(req).unwrap_err().code(), "model_not_found");
    w.shutdown().await;
}
