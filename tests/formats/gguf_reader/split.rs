//! Split families (`name-0000K-of-0000N.gguf`) built from synthetic parts.

use std::path::{Path, PathBuf};

use llm_warden::gguf::read_model_facts;

use crate::gguf_reader::builder::{Gguf, V};
use crate::gguf_reader::{code, write_file};

/// Part `k` (1-based) of a 3-part family: part 1 carries the model keys and
/// one tensor, part 2 the embedding, part 3 an expert tensor.
fn part(k: u32) -> Gguf {
    let split = |g: Gguf| g.kv("split.no", V::U8((k - 1) as u8)).kv("split.count", V::U32(3));
    match k {
        1 => {
            let mut g = split(Gguf::llama()).kv("split.tensors.count", V::I32(3));
            g.tensors.truncate(0);
            g.tensor("output_norm.weight", &[64], 0)
        }
        2 => split(Gguf::new()).tensor("token_embd.weight", &[64, 5], 0),
        _ => split(Gguf::new()).tensor("blk.0.ffn_up_exps.weight", &[32, 4, 2], 8),
    }
}

/// Writes the three parts (with `edit` applied to each builder) into `dir`
/// and returns the paths.
fn family(dir: &Path, edit: impl Fn(u32, Gguf) -> Gguf) -> Vec<PathBuf> {
    (1..=3)
        .map(|k| {
            let bytes = edit(k, part(k)).build();
            write_file(dir, &format!("m-{k:05}-of-00003.gguf"), &bytes)
        })
        .collect()
}

/// A split model's first part reads the whole family: every part, the tensors
/// and the weights summed.
#[test]
fn whole_family() {
    let dir = tempfile::tempdir().expect("temp dir");
    let paths = family(dir.path(), |_, g| g);
    let f = read_model_facts(&paths[0]).expect("family reads");
    assert_eq!(f.parts, paths);
    assert_eq!(f.architecture, "llama");
    assert_eq!(f.tensor_count, 3);
    let sizes: u64 = paths.iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).sum();
    assert_eq!(f.weights_bytes, sizes);
    assert_eq!(f.token_embd_bytes, 64 * 5 * 4);
    assert_eq!(f.expert_bytes, 8 * 34);
}

/// A missing part of a split model is `split_part_missing`.
#[test]
fn missing_part() {
    for gone in [2, 3] {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = family(dir.path(), |_, g| g);
        std::fs::remove_file(&paths[gone - 1]).expect("remove part");
        let e = read_model_facts(&paths[0]).expect_err("part missing");
        assert_eq!(e.code(), "split_part_missing", "{e}");
        assert!(e.to_string().contains(&format!("part {gone} of 3")), "{e}");
        assert_eq!(e.path(), paths[0]);
    }
}

/// A part that is not GGUF, is cut, or names another family is refused, naming
/// that part.
#[test]
fn bad_parts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let paths = family(dir.path(), |_, g| g);
    // Starting from part 2 is refused, naming part 1.
    let e = read_model_facts(&paths[1]).expect_err("not the first part");
    assert_eq!(e.code(), "gguf_invalid");
    assert!(e.to_string().contains("m-00001-of-00003.gguf"), "{e}");
    // A part that is not GGUF, or whose data is cut, fails with its path.
    std::fs::write(&paths[2], b"<html>").expect("overwrite");
    let e = read_model_facts(&paths[0]).expect_err("part 3 not gguf");
    assert_eq!((e.code(), e.path()), ("not_gguf", paths[2].as_path()));
    let mut bytes = part(3).build();
    bytes.truncate(bytes.len() - 1);
    std::fs::write(&paths[2], bytes).expect("overwrite");
    let e = read_model_facts(&paths[0]).expect_err("part 3 cut");
    assert_eq!((e.code(), e.path()), ("model_truncated", paths[2].as_path()));
}

/// An edit of part `k`'s builder.
type Edit = Box<dyn Fn(u32, Gguf) -> Gguf>;

/// Split keys that disagree across parts, or with the file's name, are invalid;
/// a lone part is a whole model.
#[test]
fn inconsistent_keys() {
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|k, g| if k == 1 { g.kv("split.count", V::U32(4)) } else { g }),
            "split.count says 4",
        ),
        (
            Box::new(|k, g| if k == 3 { g.kv("split.no", V::U8(1)) } else { g }),
            "split.no",
        ),
        (
            Box::new(|k, g| {
                if k == 1 {
                    g.kv("split.tensors.count", V::I32(9))
                } else {
                    g
                }
            }),
            "split.tensors.count",
        ),
    ];
    for (edit, needle) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = family(dir.path(), edit);
        let e = read_model_facts(&paths[0]).expect_err(needle);
        assert_eq!(e.code(), "gguf_invalid", "{e}");
        assert!(e.to_string().contains(needle), "{e}");
    }
    // split.count > 1 on a file not named as a split.
    let dir = tempfile::tempdir().expect("temp dir");
    let p = write_file(dir.path(), "m.gguf", &part(1).build());
    assert_eq!(code(&read_model_facts(&p)), "gguf_invalid");
    // A one-part "family" is a plain file.
    let one = Gguf::llama().kv("split.count", V::U32(1));
    let p = write_file(dir.path(), "m-00001-of-00001.gguf", &one.build());
    assert_eq!(read_model_facts(&p).expect("one part").parts, vec![p]);
}
