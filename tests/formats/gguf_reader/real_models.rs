//! Pinned facts of the real models in the warden cache, read cost (the
//! bytes pulled from the OS: the header only), and truncation of a real
//! header. Ignored by a plain `cargo test`; `./test.sh` runs them, and a
//! missing model fails them. The read time is a figure, not a property:
//! `bench` (its `gguf` phase) measures it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

use llm_warden::gguf::{ModelFacts, read_header, read_model_facts};

use crate::gguf_reader::{code, real_model};

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// KV-cache bytes per token at f16: sum over layers of (K + V) * kv heads * 2.
fn kv_bytes_per_token(f: &ModelFacts) -> u64 {
    f.kv_heads
        .iter()
        .map(|&h| u64::from(f.key_length + f.value_length) * u64::from(h) * 2)
        .sum()
}

/// The real SmolLM2's facts, pinned.
#[test]
#[ignore = "needs the real SmolLM2 (./build-llama.sh); ./test.sh runs it"]
fn smollm2_facts() {
    let path = real_model(SMOLLM2);
    let f = read_model_facts(&path).expect("SmolLM2 reads");
    assert_eq!(f.architecture, "llama");
    assert_eq!(f.block_count, 30);
    assert_eq!(f.kv_heads, vec![3; 30]);
    assert_eq!(f.head_count, vec![9; 30]);
    assert_eq!((f.key_length, f.value_length), (64, 64));
    assert_eq!(f.trained_window, Some(8192));
    assert_eq!((f.file_type, f.file_type_name()), (Some(3), Some("Q4_1")));
    assert_eq!(kv_bytes_per_token(&f), 23_040);
    assert_eq!(f.embedding_length, 576);
    assert!(f.has_chat_template);
    assert_eq!((f.pooling, f.is_embedding()), (None, false));
    assert_eq!((f.sliding_window, f.sliding_layers.clone()), (None, None));
    assert_eq!(f.tensor_count, 272);
    assert_eq!(f.token_embd_bytes, 30_081_024); // Q8_0, 576 x 49152
    assert_eq!(f.weights_bytes, 98_362_432);
    assert_eq!(f.parts, vec![path]);
}

/// The real Gemma 3's facts, pinned.
#[test]
#[ignore = "needs the real Gemma 3 (./build-llama.sh); ./test.sh runs it"]
fn gemma3_facts() {
    let path = real_model(GEMMA3);
    let f = read_model_facts(&path).expect("Gemma 3 reads");
    assert_eq!(f.architecture, "gemma3");
    assert_eq!(f.block_count, 18);
    assert_eq!(f.kv_heads, vec![1; 18]);
    assert_eq!((f.key_length, f.value_length), (256, 256));
    assert_eq!(f.sliding_window, Some(512));
    assert_eq!((f.sliding_layers.clone(), f.sliding_window_period), (None, None));
    assert_eq!(f.trained_window, Some(32768));
    assert_eq!(f.file_type_name(), Some("Q4_K_M"));
    assert_eq!(f.tensor_count, 236);
    assert_eq!(f.token_embd_bytes, 178_257_920); // Q8_0, 640 x 262144
    assert_eq!(f.weights_bytes, 253_113_024);
}

/// The header read never reaches the tensor data: bytes pulled from the OS
/// stay within the header plus one buffer (64 KiB), a few MiB at most.
#[test]
#[ignore = "needs the real SmolLM2 and Gemma 3 (./build-llama.sh); ./test.sh runs it"]
fn header_read_touches_only_the_header() {
    for (name, max_mib) in [(SMOLLM2, 3), (GEMMA3, 8)] {
        let path = real_model(name);
        let h = read_header(&path).expect("header reads");
        assert!(h.bytes_read <= h.data_start + 64 * 1024, "{name}: {h:?}");
        assert!(h.bytes_read < max_mib << 20, "{name} read {} bytes", h.bytes_read);
        assert_eq!(h.data_end, h.file_size, "{name}: tensors end at the end of the file");
        eprintln!("{name}: read {} of {} header bytes", h.bytes_read, h.data_start);
    }
}

/// Copies the header of `src` into `dst` and extends it (sparsely) to the
/// original size: the same model to the reader, without the weights.
pub fn sparse_copy(src: &Path, dst: &Path) -> (Vec<u8>, u64) {
    let h = read_header(src).expect("source header");
    let mut header = Vec::new();
    File::open(src)
        .and_then(|f| f.take(h.data_start).read_to_end(&mut header))
        .expect("read header bytes");
    let mut f = File::create(dst).expect("create copy");
    f.write_all(&header).expect("write header");
    f.set_len(h.file_size).expect("extend copy");
    (header, h.file_size)
}

/// A sparse copy of the real header reads as the original; one byte cut off the
/// end is `model_truncated`.
#[test]
#[ignore = "needs the real SmolLM2 (./build-llama.sh); ./test.sh runs it"]
fn sparse_copy_reads_the_same_and_a_cut_is_caught() {
    let path = real_model(SMOLLM2);
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("copy.gguf");
    let (_, size) = sparse_copy(&path, &copy);
    let mut want = read_model_facts(&path).expect("original");
    want.parts = vec![copy.clone()];
    assert_eq!(read_model_facts(&copy).expect("copy"), want);
    let file = OpenOptions::new().write(true).open(&copy).expect("open copy");
    file.set_len(size - 1).expect("cut one byte");
    let e = read_model_facts(&copy).expect_err("cut copy");
    assert_eq!(e.code(), "model_truncated", "{e}");
}

/// A few hundred cut points of the real SmolLM2 header (every byte of the
/// first 64, then spread over the rest, stopping an alignment short of the
/// data section so every cut lands inside the header).
#[test]
#[ignore = "needs the real SmolLM2 (./build-llama.sh); ./test.sh runs it"]
fn real_header_cut_anywhere_is_truncated() {
    let path = real_model(SMOLLM2);
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("cut.gguf");
    let (header, _) = sparse_copy(&path, &copy);
    let last = header.len() as u64 - 32;
    let mut cuts: Vec<u64> = (1..64).chain((0..300).map(|i| 64 + i * (last - 64) / 300)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let file = OpenOptions::new().write(true).open(&copy).expect("open copy");
    for &cut in cuts.iter().rev() {
        file.set_len(cut).expect("cut");
        let r = read_model_facts(&copy);
        assert_eq!(code(&r), "gguf_truncated", "cut at {cut}: {r:?}");
    }
}
