//! The child's captured output: a bounded ring of its last lines (the tail a
//! crash report quotes as `raw`) and the few lines the engine reads later
//! (buffer sizes, Flash Attention, placement), kept apart so the ring's
//! eviction never loses them.
//!
//! Written by the two drain tasks of `child::process`, read by the engine. A
//! std `Mutex` guards it: every critical section is a push or a copy, never an
//! await, and it holds text, never the child.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

/// Lines kept for the crash tail: enough for llama.cpp's last error block.
pub const OUTPUT_RING_LINES: usize = 200;
/// Longest line kept, in bytes: a child printing a huge line must not grow
/// the warden's memory.
pub const OUTPUT_LINE_MAX_BYTES: usize = 2048;
/// Lines quoted in an error's `raw`: the useful end of the tail.
pub const RAW_TAIL_LINES: usize = 20;

/// Substrings that mark a line the engine reads after load.
const KEPT_MARKERS: &[&str] = &[
    "KV buffer size",
    // A split over RPC workers: what each device's weights got.
    "model buffer size",
    "compute buffer size",
    "Flash Attention",
    "flash_attn",
    "offloaded",
    "CPU_REPACK",
    "n_ctx",
    // A generation cancelled for a client that left (diagnostics, tests).
    "cancel task",
];
/// How many marked lines are kept (fit's probe prints a first set).
const KEPT_MAX: usize = 256;

/// Substrings that say the child is ready to answer (llama-server prints
/// `model loaded` then `listening on` once the model is in; mlx-vlm's uvicorn
/// prints `Uvicorn running on`). Seeing one wakes the readiness probe at once
/// instead of waiting for its next poll.
const READY_MARKERS: &[&str] = &["model loaded", "listening on", "Uvicorn running on"];

/// The shared capture of one child's stdout and stderr.
#[derive(Debug, Default)]
pub struct OutputLog {
    /// The last lines, oldest first.
    ring: Mutex<VecDeque<String>>,
    /// Lines matching `KEPT_MARKERS`, in order, bounded by `KEPT_MAX`.
    kept: Mutex<Vec<String>>,
    /// Fired when a line matching `READY_MARKERS` arrives.
    pub ready_line: Notify,
}

impl OutputLog {
    /// Records one line (already stripped of its terminator).
    pub fn push(&self, line: &str) {
        let line = truncate_to_boundary(line, OUTPUT_LINE_MAX_BYTES);
        if KEPT_MARKERS.iter().any(|m| line.contains(m)) {
            let mut kept = self.kept.lock().expect("output lock never poisoned: no panics inside");
            if kept.len() < KEPT_MAX {
                kept.push(line.to_string());
            }
        }
        {
            let mut ring = self.ring.lock().expect("output lock never poisoned: no panics inside");
            if ring.len() == OUTPUT_RING_LINES {
                ring.pop_front();
            }
            ring.push_back(line.to_string());
        }
        if READY_MARKERS.iter().any(|m| line.contains(m)) {
            self.ready_line.notify_one();
        }
    }

    /// The last `n` lines, oldest first.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let ring = self.ring.lock().expect("output lock never poisoned: no panics inside");
        ring.iter().skip(ring.len().saturating_sub(n)).cloned().collect()
    }

    /// The tail quoted in error reports, one string.
    pub fn raw_tail(&self) -> String {
        self.tail(RAW_TAIL_LINES).join("\n")
    }

    /// Every kept (marked) line, in order.
    pub fn kept(&self) -> Vec<String> {
        self.kept
            .lock()
            .expect("output lock never poisoned: no panics inside")
            .clone()
    }
}

/// `s` cut to at most `max` bytes on a char boundary.
fn truncate_to_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded_and_marked_lines_survive_eviction() {
        let log = OutputLog::default();
        log.push("llama_kv_cache: CPU KV buffer size = 180.00 MiB");
        for i in 0..(OUTPUT_RING_LINES + 50) {
            log.push(&format!("line {i}"));
        }
        assert_eq!(log.tail(usize::MAX).len(), OUTPUT_RING_LINES);
        assert_eq!(log.kept().len(), 1);
        assert!(log.raw_tail().ends_with(&format!("line {}", OUTPUT_RING_LINES + 49)));
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let log = OutputLog::default();
        log.push(&"é".repeat(OUTPUT_LINE_MAX_BYTES));
        assert!(log.tail(1)[0].len() <= OUTPUT_LINE_MAX_BYTES);
    }
}
