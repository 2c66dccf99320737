//! Integration tests of the GGUF header reader (`llm_warden::gguf`).
//!
//! The test binary counts heap allocations per thread (see [`peak_alloc`]) so
//! hostile-header tests can assert that memory never follows a declared
//! length.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;
use std::path::{Path, PathBuf};

use llm_warden::gguf::{GgufError, ModelFacts, read_model_facts};

#[path = "gguf_reader/bad_input.rs"]
mod bad_input;
#[path = "gguf_reader/builder.rs"]
mod builder;
#[path = "gguf_reader/facts.rs"]
mod facts;
#[path = "gguf_reader/fuzz.rs"]
mod fuzz;
#[path = "gguf_reader/real_models.rs"]
mod real_models;
#[path = "gguf_reader/split.rs"]
mod split;
use crate::support;

/// The system allocator, with per-thread live and peak byte counts.
struct CountingAlloc;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn track(delta: i64) {
    // try_with: the counters may be gone while a thread is torn down.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every method forwards to `System` unchanged and only updates
// plain thread-local counters, which never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            track(layout.size() as i64);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            track(layout.size() as i64);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        track(-(layout.size() as i64));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            track(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Runs `f` and returns its result with the most heap bytes this thread held
/// at once beyond what it held before.
pub fn peak_alloc<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get) - base;
    (out, peak.max(0) as u64)
}

/// A real model from the warden's cache ($WARDEN_CACHE_DIR/models, then
/// ~/.cache/llm-warden/models); fails the (ignored, real) test without it.
#[track_caller]
pub fn real_model(name: &str) -> PathBuf {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("WARDEN_CACHE_DIR") {
        dirs.push(PathBuf::from(d).join("models"));
    }
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(h).join(".cache/llm-warden/models"));
    }
    let candidates: Vec<PathBuf> = dirs.into_iter().map(|d| d.join(name)).collect();
    match candidates.iter().find(|p| p.is_file()) {
        Some(p) => p.clone(),
        None => support::missing(&format!(
            "real model {name} is missing (run ./build-llama.sh); looked at {candidates:?}"
        )),
    }
}

/// Writes `bytes` to a fresh temporary file named `name` in `dir`.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("create temp file");
    f.write_all(bytes).expect("write temp file");
    path
}

/// The error code of a read, or "ok".
pub fn code(r: &Result<ModelFacts, GgufError>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

/// Reads `bytes` as a model file (in a temp dir) and returns the result.
pub fn read_bytes(bytes: &[u8]) -> Result<ModelFacts, GgufError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_file(dir.path(), "model.gguf", bytes);
    read_model_facts(&path)
}

/// Asserts that reading `bytes` fails with `want`, and that the message
/// contains `needle`; returns the error.
#[track_caller]
pub fn expect_err(bytes: &[u8], want: &str, needle: &str) -> GgufError {
    match read_bytes(bytes) {
        Ok(f) => panic!("expected {want}, read {f:?}"),
        Err(e) => {
            assert_eq!(e.code(), want, "{e}");
            assert!(e.to_string().contains(needle), "{e:?} lacks {needle:?}");
            e
        }
    }
}
