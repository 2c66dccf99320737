//! Property fuzzing of the reader (mutated real and synthetic headers) and
//! replay of the regression inputs kept under `tests/data/gguf/`.
//!
//! A case fails if the reader panics, costs more than its budget (the CPU
//! time of a yardstick read in the same run, see [`Budget`]), or holds more
//! than [`MAX_HEAP`] at once; the input is then saved under
//! `target/gguf-fuzz/` so it can be committed to `tests/data/gguf/` as
//! `<what>.<expected code>.gguf`.

use std::os::unix::fs::FileExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::Duration;

use llm_warden::gguf::read_model_facts;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::gguf_reader::builder::{Gguf, V};
use crate::gguf_reader::real_models::{SMOLLM2, sparse_copy};
use crate::gguf_reader::{code, peak_alloc, real_model, write_file};

/// Most a mutated real header may cost, in unmutated reads of it: the
/// reader's work follows the bytes present, never a declared count or length.
const MAX_COST_RATIO: u32 = 10;
/// A synthetic case may cost at most a read of an unmutated header this many
/// times its tokenizer.
const YARDSTICK_TOKENS_RATIO: usize = 100;
/// Most heap a single read may hold: the 4 MiB kept-metadata budget plus
/// map growth and slack; a real header needs a few KiB.
const MAX_HEAP: u64 = 16 << 20;
/// Bytes of the start of the real header that are mutated.
const HEAD_SPAN: usize = 64 * 1024;
/// Bytes of the end of the real header (tensor infos) that are mutated.
const TAIL_SPAN: usize = 16 * 1024;

/// One change to a file: a byte, or a little-endian u64 chosen to hit
/// counts and lengths at their edges.
#[derive(Debug, Clone)]
enum Mutation {
    Byte(u64, u8),
    Word(u64, u64),
}

fn mutations(span: u64) -> impl Strategy<Value = Vec<Mutation>> {
    let word = prop_oneof![
        Just(0u64),
        Just(1),
        Just(4),
        Just(13),
        Just(64),
        Just(1 << 20),
        Just((1 << 20) + 1),
        Just(1 << 24),
        Just(1 << 30),
        Just(1 << 32),
        Just(i64::MAX as u64),
        Just(u64::MAX),
        any::<u64>(),
    ];
    let one = prop_oneof![
        (0..span, any::<u8>()).prop_map(|(o, b)| Mutation::Byte(o, b)),
        (0..span, word).prop_map(|(o, w)| Mutation::Word(o, w)),
    ];
    prop::collection::vec(one, 1..8)
}

/// Applies `muts` to `bytes` (writes past the end are clipped).
fn apply(bytes: &mut [u8], muts: &[Mutation]) {
    for m in muts {
        let (at, src) = match m {
            Mutation::Byte(o, b) => (*o as usize, vec![*b]),
            Mutation::Word(o, w) => (*o as usize, w.to_le_bytes().to_vec()),
        };
        for (i, b) in src.into_iter().enumerate() {
            if let Some(slot) = bytes.get_mut(at + i) {
                *slot = b;
            }
        }
    }
}

/// The CPU time this thread has used: what a read costs, whatever else the
/// machine runs meanwhile (a wall clock would count that too).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// What one case's read may cost: a ratio within the run, measured on this
/// thread's CPU clock against a yardstick read of an unmutated header.
#[derive(Debug, Clone, Copy)]
struct Budget(Duration);

impl Budget {
    /// `ratio` times the cost of reading `yardstick` (best of five).
    fn of(yardstick: &Path, ratio: u32) -> Self {
        let best = (0..5)
            .map(|_| {
                let t = thread_cpu();
                read_model_facts(yardstick).expect("the yardstick reads");
                thread_cpu() - t
            })
            .min()
            .unwrap();
        Budget(best * ratio)
    }
}

/// Reads `path` and checks the case bounds; on failure saves `input`.
fn check(path: &Path, budget: Budget, input: &dyn Fn() -> Vec<u8>) -> Result<(), TestCaseError> {
    let start = thread_cpu();
    let (outcome, peak) = peak_alloc(|| catch_unwind(AssertUnwindSafe(|| read_model_facts(path))));
    let cost = thread_cpu() - start;
    let problem = match &outcome {
        Err(_) => Some("panicked".to_string()),
        Ok(_) if cost > budget.0 => Some(format!("cost {cost:?} of CPU, over its budget of {:?}", budget.0)),
        Ok(_) if peak > MAX_HEAP => Some(format!("held {peak} bytes")),
        Ok(r) if r.as_ref().is_err_and(|e| e.to_string().is_empty()) => Some("no reason".into()),
        Ok(_) => None,
    };
    match problem {
        None => Ok(()),
        Some(p) => {
            let saved = save_failure(&input());
            Err(TestCaseError::fail(format!("{p}; input saved to {saved:?}")))
        }
    }
}

fn save_failure(bytes: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/gguf-fuzz");
    let _ = std::fs::create_dir_all(&dir);
    let name = format!("failure-{}-{}.gguf", std::process::id(), bytes.len());
    write_file(&dir, &name, bytes)
}

/// Mutates a sparse copy of the real SmolLM2 header in place (restoring it
/// after each case), so every case sees a full-size file: the first 64 KiB
/// (counts, general keys, the vocabulary) and the last 16 KiB before the
/// data (tensor infos, the data-section bound). No case panics, costs more
/// than ten unmutated reads, or holds more than `MAX_HEAP`.
#[test]
#[ignore = "needs the real SmolLM2 (./build-llama.sh); ./test.sh runs it"]
fn fuzz_real_header() {
    let model = real_model(SMOLLM2);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("fuzz.gguf");
    let (header, _) = sparse_copy(&model, &path);
    let tail_at = header.len() - TAIL_SPAN;
    let original = [&header[..HEAD_SPAN], &header[tail_at..]].concat();
    let budget = Budget::of(&path, MAX_COST_RATIO);
    let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open copy");
    let put = |region: &[u8]| {
        file.write_all_at(&region[..HEAD_SPAN], 0).expect("write head");
        file.write_all_at(&region[HEAD_SPAN..], tail_at as u64)
            .expect("write tail");
    };
    let config = Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    // Each case mutates one region, so tensor-info mutations are not always
    // masked by an earlier failure in the vocabulary.
    let shift = |muts: Vec<Mutation>| -> Vec<Mutation> {
        let at = HEAD_SPAN as u64;
        muts.into_iter()
            .map(|m| match m {
                Mutation::Byte(o, b) => Mutation::Byte(o + at, b),
                Mutation::Word(o, w) => Mutation::Word(o + at, w),
            })
            .collect()
    };
    let strategy = prop_oneof![mutations(HEAD_SPAN as u64), mutations(TAIL_SPAN as u64).prop_map(shift),];
    let result = runner.run(&strategy, |muts| {
        let mut region = original.clone();
        apply(&mut region, &muts);
        put(&region);
        let outcome = check(&path, budget, &|| {
            let mut whole = header.clone();
            whole[..HEAD_SPAN].copy_from_slice(&region[..HEAD_SPAN]);
            whole[tail_at..].copy_from_slice(&region[HEAD_SPAN..]);
            whole
        });
        put(&original);
        outcome
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A synthetic model with `tokens` in its tokenizer.
fn synthetic(tokens: usize) -> Vec<u8> {
    let tokens = (0..tokens).map(|i| V::Str(format!("tok{i}"))).collect();
    Gguf::llama()
        .kv("tokenizer.ggml.tokens", V::Arr(8, tokens))
        .kv("llama.attention.head_count", V::Arr(4, vec![V::U32(4), V::U32(4)]))
        .build()
}

/// A synthetic model with a bigger tokenizer, mutated anywhere and cut at
/// any length, costs no more than an unmutated one with a hundred times its
/// tokenizer; runs without the real models.
#[test]
fn fuzz_synthetic_header() {
    let base = synthetic(200);
    let dir = tempfile::tempdir().expect("temp dir");
    let yardstick = write_file(dir.path(), "yardstick.gguf", &synthetic(200 * YARDSTICK_TOKENS_RATIO));
    let budget = Budget::of(&yardstick, 1);
    let path = dir.path().join("fuzz.gguf");
    let len = base.len() as u64;
    let strategy = (mutations(len), 0..=len + 16);
    let mut runner = TestRunner::new(Config {
        cases: 1024,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |(muts, cut)| {
        let mut bytes = base.clone();
        apply(&mut bytes, &muts);
        bytes.truncate(cut as usize);
        std::fs::write(&path, &bytes).expect("write case");
        check(&path, budget, &|| bytes.clone())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Every kept regression input reads to the code its name states
/// (`<what>.<code>.gguf`, `ok` for success), without panicking.
#[test]
fn regression_inputs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/data/gguf exists") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let Some(want) = name.strip_suffix(".gguf").and_then(|s| s.rsplit('.').next()) else {
            continue;
        };
        let (r, peak) = peak_alloc(|| read_model_facts(&path));
        assert_eq!(code(&r), want, "{name}: {r:?}");
        assert!(peak < MAX_HEAP, "{name} held {peak} bytes");
        seen += 1;
    }
    assert!(seen > 0, "no regression inputs in {dir:?}");
}
