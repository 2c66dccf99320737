//! How metadata keys become `ModelFacts`: defaults, per-layer expansion,
//! lenient `general.file_type`, the pooling type, required keys.

use llm_warden::gguf::{ModelFacts, Pooling};

use crate::gguf_reader::builder::{Gguf, V};
use crate::gguf_reader::{code, expect_err, read_bytes};

fn facts(g: Gguf) -> ModelFacts {
    read_bytes(&g.build()).expect("valid synthetic model")
}

/// A small llama's facts, with the key and value lengths derived when the keys
/// are absent.
#[test]
fn tiny_llama_facts() {
    let f = facts(Gguf::llama());
    assert_eq!(f.architecture, "llama");
    assert_eq!(f.name.as_deref(), Some("tiny"));
    assert_eq!((f.file_type, f.file_type_name()), (Some(1), Some("F16")));
    assert_eq!(f.block_count, 2);
    assert_eq!(f.trained_window, Some(256));
    assert_eq!(f.head_count, vec![4, 4]);
    assert_eq!(f.kv_heads, vec![2, 2]);
    assert_eq!(f.head_count_max(), 4);
    // No key_length / value_length keys: embedding_length / head_count.
    assert_eq!((f.key_length, f.value_length), (16, 16));
    assert!(f.has_chat_template);
    assert_eq!(f.token_embd_bytes, 64 * 3 * 4);
    assert_eq!((f.tensor_count, f.expert_bytes), (3, 0));
    assert_eq!(f.parts.len(), 1);
    assert_eq!(f.weights_bytes, Gguf::llama().build().len() as u64);
    assert_eq!(f.sliding_layers, None);
    // The facts are reported as JSON by the warden: they must serialize.
    fn assert_serialize<T: serde::Serialize>(_: &T) {}
    assert_serialize(&f);
}

/// Per-layer head counts, sliding-window patterns and recurrent (zero-head)
/// layers read per layer.
#[test]
fn per_layer_arrays_and_recurrent_layers() {
    let g = Gguf::llama()
        .kv("llama.attention.head_count", V::Arr(4, vec![V::U32(8), V::U32(0)]))
        .kv("llama.attention.head_count_kv", V::Arr(5, vec![V::I32(2), V::I32(0)]))
        .kv(
            "llama.attention.sliding_window_pattern",
            V::Arr(7, vec![V::Bool(true), V::Bool(false)]),
        )
        .kv("llama.attention.sliding_window", V::U32(128))
        .kv("llama.attention.key_length", V::U32(128))
        .kv("llama.attention.kv_lora_rank", V::U32(512))
        .kv("llama.attention.max_alibi_bias", V::F32(8.0));
    let f = facts(g);
    assert_eq!(f.head_count, vec![8, 0]);
    assert_eq!(f.kv_heads, vec![2, 0]);
    assert_eq!(f.head_count_max(), 8);
    assert_eq!((f.key_length, f.value_length), (128, 8));
    assert_eq!(f.sliding_layers, Some(vec![true, false]));
    assert_eq!(f.sliding_window, Some(128));
    assert_eq!(f.kv_lora_rank, Some(512));
    assert_eq!(f.max_alibi_bias, Some(8.0));
    // head_count_kv absent: defaults to head_count, per layer.
    let g = Gguf::llama()
        .kv("llama.attention.head_count", V::Arr(4, vec![V::U32(8), V::U32(6)]))
        .without("llama.attention.head_count_kv");
    assert_eq!(facts(g).kv_heads, vec![8, 6]);
    // No heads at all (a pure recurrent model): zero head sizes.
    let g = Gguf::llama()
        .without("llama.attention.head_count")
        .without("llama.attention.head_count_kv");
    let f = facts(g);
    assert_eq!(
        (f.head_count.clone(), f.key_length, f.head_count_max()),
        (vec![0, 0], 0, 0)
    );
    // A scalar pattern is a period, not a per-layer list.
    let f = facts(Gguf::llama().kv("llama.attention.sliding_window_pattern", V::U32(6)));
    assert_eq!((f.sliding_layers, f.sliding_window_period), (None, Some(6)));
}

/// `general.file_type` in any integer type reads; anything else is no file
/// type, not an error.
#[test]
fn file_type_is_lenient() {
    for (v, want) in [
        (V::U8(15), Some(15)),
        (V::I64(3), Some(3)),
        (V::U64(1 << 40), None),
        (V::I32(-1), None),
        (V::s("Q4_K_M"), None),
        (V::F32(3.0), None),
        (V::Arr(4, vec![V::U32(3)]), None),
    ] {
        let f = facts(Gguf::llama().kv("general.file_type", v.clone()));
        assert_eq!(f.file_type, want, "{v:?}");
    }
    let f = facts(Gguf::llama().without("general.file_type"));
    assert_eq!((f.file_type, f.file_type_name()), (None, None));
    let f = facts(Gguf::llama().kv("general.file_type", V::U32(999)));
    assert_eq!((f.file_type, f.file_type_name()), (Some(999), None));
}

/// `{arch}.pooling_type` reads as llama.cpp numbers it, and a model is an
/// embedding model when its pooling gives one vector per input; a value that
/// is not an unsigned integer is an error naming the key.
#[test]
fn pooling_type_marks_embedding_models() {
    let rows: Vec<(Option<V>, Option<Pooling>, bool)> = vec![
        (None, None, false),                          // why: chat models declare none
        (Some(V::U32(1)), Some(Pooling::Mean), true), // why: all-MiniLM-L6-v2's
        (Some(V::U32(2)), Some(Pooling::Cls), true),
        (Some(V::U8(4)), Some(Pooling::Rank), true), // why: any unsigned type; a reranker
        (Some(V::U32(0)), Some(Pooling::None), false), // why: per-token vectors only
        (Some(V::U32(9)), Some(Pooling::Other(9)), false), // why: unknown to llama.cpp
    ];
    for (i, (v, want, embedding)) in rows.into_iter().enumerate() {
        let g = match v {
            Some(v) => Gguf::llama().kv("llama.pooling_type", v),
            None => Gguf::llama(),
        };
        let f = facts(g);
        assert_eq!((f.pooling, f.is_embedding()), (want, embedding), "row {i}");
    }
    for bad in [V::s("mean"), V::I32(-1), V::F32(1.0)] {
        let g = Gguf::llama().kv("llama.pooling_type", bad);
        expect_err(&g.build(), "gguf_invalid", "llama.pooling_type");
    }
    // Another architecture's pooling is not this model's.
    assert_eq!(facts(Gguf::llama().kv("bert.pooling_type", V::U32(1))).pooling, None);
}

/// A missing or mistyped required key is an error naming the key and the type
/// found.
#[test]
fn required_keys_and_bad_types() {
    let cases: Vec<(Gguf, &str)> = vec![
        (
            Gguf::llama().without("general.architecture"),
            "missing key general.architecture",
        ),
        (
            Gguf::llama().kv("general.architecture", V::U32(1)),
            "general.architecture has type u32",
        ),
        (
            Gguf::llama().kv("general.architecture", V::s("")),
            "general.architecture",
        ),
        (
            Gguf::llama().without("llama.block_count"),
            "missing key llama.block_count",
        ),
        (Gguf::llama().kv("llama.block_count", V::U32(0)), "block_count is 0"),
        (Gguf::llama().kv("llama.block_count", V::U32(513)), "llama.block_count"),
        (
            Gguf::llama().kv("llama.block_count", V::s("2")),
            "llama.block_count has type string",
        ),
        (
            Gguf::llama().without("llama.embedding_length"),
            "missing key llama.embedding_length",
        ),
        (
            Gguf::llama().kv("llama.context_length", V::I32(-1)),
            "llama.context_length",
        ),
        (
            Gguf::llama().kv("llama.attention.head_count", V::Arr(4, vec![V::U32(4)])),
            "not block_count 2",
        ),
        (
            Gguf::llama().kv("llama.attention.head_count_kv", V::Arr(8, vec![V::s("a"), V::s("b")])),
            "not block_count 2",
        ),
        (
            Gguf::llama().kv("llama.attention.head_count", V::Arr(6, vec![V::F32(1.0); 2])),
            "u32 elements",
        ),
        (
            Gguf::llama().kv("llama.attention.key_length", V::U64(1 << 33)),
            "key_length",
        ),
        (
            Gguf::llama().kv("llama.attention.max_alibi_bias", V::s("8")),
            "max_alibi_bias",
        ),
    ];
    for (g, needle) in cases {
        expect_err(&g.build(), "gguf_invalid", needle);
    }
    // Keys of another architecture are ignored, wherever they sit.
    let g = Gguf::llama().kv("qwen2.block_count", V::s("not a number"));
    assert_eq!(code(&read_bytes(&g.build())), "ok");
}

/// Fill-in-the-middle is found as llama.cpp finds it: each of the three
/// tokens by its id key (new or old name) or else by its text in the
/// vocabulary, whose strings are scanned without being kept.
#[test]
fn fill_in_middle_by_ids_or_by_texts() {
    let vocab = |texts: &[&str]| {
        let mut t: Vec<V> = ["<s>", "a", "b"].iter().map(|s| V::s(s)).collect();
        t.extend(texts.iter().map(|s| V::s(s)));
        V::Arr(8, t)
    };
    let rows: Vec<(Gguf, bool)> = vec![
        // why: no FIM token at all
        (Gguf::llama().kv("tokenizer.ggml.tokens", vocab(&[])), false),
        // why: the three ids in the header
        (
            Gguf::llama()
                .kv("tokenizer.ggml.fim_pre_token_id", V::U32(1))
                .kv("tokenizer.ggml.fim_suf_token_id", V::U32(2))
                .kv("tokenizer.ggml.fim_mid_token_id", V::U32(0)),
            true,
        ),
        // why: the deprecated names count too
        (
            Gguf::llama()
                .kv("tokenizer.ggml.prefix_token_id", V::U32(1))
                .kv("tokenizer.ggml.suffix_token_id", V::U32(2))
                .kv("tokenizer.ggml.middle_token_id", V::U32(0)),
            true,
        ),
        // why: two of three is not enough for llama-server's infill
        (
            Gguf::llama()
                .kv("tokenizer.ggml.fim_pre_token_id", V::U32(1))
                .kv("tokenizer.ggml.fim_suf_token_id", V::U32(2)),
            false,
        ),
        // why: StarCoder-style texts in the vocabulary, no ids
        (
            Gguf::llama().kv(
                "tokenizer.ggml.tokens",
                vocab(&["<fim_prefix>", "<fim_middle>", "<fim_suffix>"]),
            ),
            true,
        ),
        // why: CodeLlama's texts; and one id plus two texts mixes as llama.cpp does
        (
            Gguf::llama().kv("tokenizer.ggml.tokens", vocab(&["▁<PRE>", "▁<SUF>", "▁<MID>"])),
            true,
        ),
        (
            Gguf::llama()
                .kv("tokenizer.ggml.fim_pre_token_id", V::U32(1))
                .kv("tokenizer.ggml.tokens", vocab(&["<|fim_suffix|>", "<|fim_middle|>"])),
            true,
        ),
        // why: a text that only resembles one is not it
        (
            Gguf::llama().kv("tokenizer.ggml.tokens", vocab(&["<fim_prefix> ", "<SUF>", "<MID>"])),
            false,
        ),
    ];
    for (i, (g, want)) in rows.into_iter().enumerate() {
        assert_eq!(facts(g).fill_in_middle, want, "row {i}");
    }
}

/// A FIM text that straddles the reader's 64 KiB buffer is still seen: the
/// vocabulary is shifted a few bytes at a time across the boundary.
#[test]
fn fill_in_middle_texts_across_the_buffer_boundary() {
    // Each one-letter filler is 9 bytes; after the ~300 bytes of header
    // before the vocabulary, ~7,250 of them reach 64 KiB: 60 shifts of 9
    // bytes sweep the three texts (60 bytes) across the boundary.
    for extra in 0..60 {
        let mut t: Vec<V> = (0..7_200 + extra).map(|_| V::s("a")).collect();
        t.extend(["<fim_prefix>", "<fim_suffix>", "<fim_middle>"].iter().map(|s| V::s(s)));
        let g = Gguf::llama().kv("tokenizer.ggml.tokens", V::Arr(8, t));
        assert!(facts(g).fill_in_middle, "shift {extra}");
    }
}
