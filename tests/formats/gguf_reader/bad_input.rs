//! Table tests of bad input: every failure is an error with a code and a
//! reason, never a panic, never an allocation that follows a hostile length.

use std::fs::OpenOptions;

use llm_warden::gguf::read_model_facts;

use crate::gguf_reader::builder::{Gguf, T, V, put_str};
use crate::gguf_reader::{code, expect_err, peak_alloc, read_bytes, write_file};

/// A missing file, a directory and an empty file are each their own error,
/// naming the path.
#[test]
fn missing_empty_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nope.gguf");
    let e = read_model_facts(&missing).expect_err("missing file");
    assert_eq!(e.code(), "model_missing");
    assert_eq!(e.path(), missing);
    let e = read_model_facts(dir.path()).expect_err("a directory");
    assert_eq!(e.code(), "model_unreadable");
    expect_err(b"", "model_empty", "empty");
}

/// Files of other formats are `not_gguf`, saying the magic expected.
#[test]
fn not_gguf() {
    for bytes in [&b"PK\x03\x04rest"[..], b"<html>", b"GGUX\x03\0\0\0", b"ggml", b"X"] {
        expect_err(bytes, "not_gguf", "expected \"GGUF\"");
    }
}

/// GGUF v1, a newer version and a big-endian file are refused by name; v2 and
/// v3 read.
#[test]
fn versions() {
    for (v, needle) in [(0, "not a GGUF"), (1, "v1"), (4, "newer"), (0x0300_0000, "big-endian")] {
        let mut g = Gguf::llama();
        g.version = v;
        expect_err(&g.build(), "gguf_version_unsupported", needle);
    }
    let mut g = Gguf::llama();
    g.version = 2;
    assert_eq!(code(&read_bytes(&g.build())), "ok");
}

/// Every prefix of a small file: empty, then header truncated, then data
/// truncated, then whole. One file is cut down in place, longest first.
#[test]
fn every_prefix_of_a_synthetic_file() {
    let (infos_end, full) = Gguf::llama().build_parts();
    assert_eq!(code(&read_bytes(&full)), "ok");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_file(dir.path(), "cut.gguf", &full);
    let file = OpenOptions::new().write(true).open(&path).expect("open");
    for len in (0..full.len()).rev() {
        file.set_len(len as u64).expect("set_len");
        let want = match len {
            0 => "model_empty",
            n if n < infos_end => "gguf_truncated",
            _ => "model_truncated",
        };
        let got = read_model_facts(&path);
        assert_eq!(code(&got), want, "prefix of {len} bytes: {got:?}");
    }
}

/// An absurd tensor count is invalid or truncated, never an allocation that
/// follows it.
#[test]
fn absurd_counts() {
    for (count, want) in [
        (u64::MAX, "gguf_invalid"),
        (1 << 40, "gguf_invalid"),
        (1 << 24, "gguf_truncated"),
        (1000, "gguf_truncated"),
    ] {
        let mut g = Gguf::llama();
        g.tensor_count = Some(count);
        let bytes = g.build();
        let (r, peak) = peak_alloc(|| read_bytes(&bytes));
        assert_eq!(code(&r), want, "tensor_count {count}: {r:?}");
        assert!(peak < 1 << 20, "tensor_count {count} allocated {peak}");
        let mut g = Gguf::llama();
        g.kv_count = Some(count);
        let bytes = g.build();
        let (r, peak) = peak_alloc(|| read_bytes(&bytes));
        assert_eq!(code(&r), want, "kv_count {count}: {r:?}");
        assert!(peak < 1 << 20, "kv_count {count} allocated {peak}");
    }
}

/// Absurd string and key lengths are invalid without allocating them; a long
/// string that is only skipped is fine.
#[test]
fn absurd_string_lengths() {
    let huge = |len: u64| {
        let mut raw = len.to_le_bytes().to_vec();
        raw.extend(b"abc");
        V::Raw(8, raw)
    };
    for len in [u64::MAX, 1 << 40, (1 << 20) + 1] {
        let g = Gguf::llama().kv("general.name", huge(len));
        let bytes = g.build();
        let (r, peak) = peak_alloc(|| read_bytes(&bytes));
        assert_eq!(code(&r), "gguf_invalid", "name length {len}: {r:?}");
        assert!(peak < 1 << 20, "name length {len} allocated {peak}");
        let g = Gguf::llama().kv("general.description", huge(len));
        assert_eq!(code(&read_bytes(&g.build())), "gguf_invalid");
    }
    // A plausible length past the end of the file is a cut, not corruption.
    let g = Gguf::llama().kv("general.name", huge(100_000));
    assert_eq!(code(&read_bytes(&g.build())), "gguf_truncated");
    // An absurd key length.
    let mut bytes = b"GGUF\x03\0\0\0".to_vec();
    bytes.extend(0u64.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(u64::MAX.to_le_bytes());
    bytes.extend([0u8; 16]);
    expect_err(&bytes, "gguf_invalid", "key of pair 0");
    // Strings over 1 MiB are fine where they are only skipped: tokenizer.*.
    let template = "x".repeat(3 << 20);
    let g = Gguf::llama().kv("tokenizer.chat_template", V::Str(template));
    let bytes = g.build();
    let (r, peak) = peak_alloc(|| read_bytes(&bytes));
    assert!(r.expect("big template").has_chat_template);
    assert!(peak < 1 << 20, "skipped template allocated {peak}");
}

/// Unknown value types, nested arrays and absurd array counts are invalid,
/// naming the type.
#[test]
fn unknown_and_nested_value_types() {
    for id in [13, 255, u32::MAX] {
        let g = Gguf::llama().kv("general.odd", V::Raw(id, vec![0; 8]));
        expect_err(&g.build(), "gguf_invalid", &format!("unknown value type {id}"));
        let g = Gguf::llama().kv("general.odd", V::Arr(id, vec![]));
        expect_err(&g.build(), "gguf_invalid", &format!("unknown value type {id}"));
    }
    let nested = V::Arr(9, vec![V::Arr(4, vec![V::U32(1)])]);
    expect_err(&Gguf::llama().kv("x.y", nested).build(), "gguf_invalid", "nested");
    let absurd = V::Raw(
        9,
        [4u32.to_le_bytes().to_vec(), u64::MAX.to_le_bytes().to_vec()].concat(),
    );
    expect_err(
        &Gguf::llama().kv("x.y", absurd).build(),
        "gguf_invalid",
        "absurd element count",
    );
    let long = V::Raw(
        9,
        [4u32.to_le_bytes().to_vec(), 1000u64.to_le_bytes().to_vec()].concat(),
    );
    expect_err(
        &Gguf::llama().kv("x.y", long).build(),
        "gguf_truncated",
        "1000 elements",
    );
}

/// A llama file whose tensor `i` is replaced.
fn with_tensor(i: usize, t: T) -> Vec<u8> {
    let mut g = Gguf::llama();
    g.tensors[i] = t;
    g.build()
}

fn t(name: &str, dims: &[u64], ty: u32) -> T {
    T {
        name: name.to_string(),
        dims: dims.to_vec(),
        ty,
        offset: None,
        bytes: 0,
    }
}

/// Tensor infos with too many dimensions, overflowing sizes, partial blocks or
/// unknown types are invalid, saying which.
#[test]
fn bad_tensor_infos() {
    let cases: &[(T, &str, &str)] = &[
        (t("a", &[1, 1, 1, 1, 1], 0), "gguf_invalid", "5 dimensions"),
        (t("a", &[1 << 63], 0), "gguf_invalid", "overflows"),
        (t("a", &[1 << 32, 1 << 32], 0), "gguf_invalid", "overflows"),
        (
            t("a", &[33], 2),
            "gguf_invalid",
            "not a multiple of the Q4_0 block size",
        ),
        (t("a", &[32], 4), "gguf_invalid", "unknown tensor type 4"),
        (t("a", &[32], 43), "gguf_invalid", "unknown tensor type 43"),
        (t("a", &[32], 9999), "gguf_invalid", "unknown tensor type 9999"),
        (t(&"n".repeat(64), &[32], 0), "gguf_invalid", "over the limit of 63"),
    ];
    for (tensor, want, needle) in cases {
        expect_err(&with_tensor(1, tensor.clone()), want, needle);
    }
    let mut far = t("far", &[64], 0);
    far.offset = Some(1 << 40);
    expect_err(&with_tensor(1, far.clone()), "model_truncated", "needs");
    far.offset = Some(u64::MAX - 31);
    expect_err(&with_tensor(1, far.clone()), "gguf_invalid", "overflows");
    far.offset = Some(7);
    expect_err(&with_tensor(1, far), "gguf_invalid", "not aligned");
    // One byte short of the last tensor's data.
    let mut bytes = Gguf::llama().build();
    bytes.pop();
    expect_err(&bytes, "model_truncated", "is truncated");
    // n_dims of u32::MAX must not be trusted for anything.
    let mut g = Gguf::llama();
    g.tensors.clear();
    g.tensor_count = Some(1);
    let mut bytes = g.build();
    put_str(&mut bytes, b"w");
    bytes.extend(u32::MAX.to_le_bytes());
    bytes.extend([0u8; 64]);
    expect_err(&bytes, "gguf_invalid", "4294967295 dimensions");
}

/// `general.alignment` is honoured when it is a power-of-two u32, refused
/// otherwise.
#[test]
fn alignment_key() {
    for (v, ok) in [
        (V::U32(64), true),
        (V::U32(1), true),
        (V::U32(0), false),
        (V::U32(48), false),
        (V::U64(32), false),
        (V::s("32"), false),
    ] {
        let mut g = Gguf::llama().kv("general.alignment", v.clone());
        if let V::U32(a) = v
            && a.is_power_of_two()
        {
            g.alignment = a.into();
        }
        let r = read_bytes(&g.build());
        assert_eq!(code(&r), if ok { "ok" } else { "gguf_invalid" }, "{v:?}: {r:?}");
    }
}

/// A key the reader keeps, given twice, is invalid.
#[test]
fn duplicate_wanted_key() {
    let mut g = Gguf::llama();
    g.kvs.push(("llama.block_count".into(), V::U32(3)));
    expect_err(&g.build(), "gguf_invalid", "duplicate key");
}

/// Many distinct wanted keys (each small) hit the kept-metadata budget
/// instead of growing memory with the file.
#[test]
fn kept_metadata_is_budgeted() {
    let mut g = Gguf::llama();
    for i in 0..200_000 {
        g.kvs.push((format!("a{i}.block_count"), V::U32(1)));
    }
    let bytes = g.build();
    let (r, peak) = peak_alloc(|| read_bytes(&bytes));
    let e = r.expect_err("over budget");
    assert_eq!(e.code(), "gguf_invalid");
    assert!(e.to_string().contains("metadata kept exceeds"), "{e}");
    assert!(peak < 16 << 20, "held {peak} bytes");
}

/// A chat template of a template's size is kept (Ollama's `/api/show`
/// shows it); one over 64 KiB (`gguf::kv::MAX_TEMPLATE_KEPT`) is only
/// stepped over.
#[test]
fn a_chat_template_is_kept_only_at_a_templates_size() {
    let small = "{% for m in messages %}{{ m.content }}{% endfor %}".to_string();
    let g = Gguf::llama().kv("tokenizer.chat_template", V::Str(small.clone()));
    let f = read_bytes(&g.build()).expect("a small template");
    assert_eq!(
        (f.has_chat_template, f.chat_template.as_deref()),
        (true, Some(small.as_str()))
    );
    let big = "x".repeat(((64 << 10) + 1u64) as usize);
    let g = Gguf::llama().kv("tokenizer.chat_template", V::Str(big));
    let f = read_bytes(&g.build()).expect("a big template");
    assert_eq!((f.has_chat_template, f.chat_template), (true, None));
}
