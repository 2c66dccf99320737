//! The warden's own log lines, captured once per test binary (a global
//! `tracing` subscriber at INFO), for tests that prove what is said.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The captured text so far (installs the subscriber on first use).
pub fn captured_log() -> String {
    String::from_utf8_lossy(&sink().lock().unwrap()).into_owned()
}

/// The captured text's last `lines` lines: what a failing assertion shows
/// of the warden's side (the log is shared by the whole test binary).
pub fn captured_tail(lines: usize) -> String {
    let all = captured_log();
    let kept: Vec<&str> = all.lines().rev().take(lines).collect();
    kept.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// Starts capturing (call before the warden starts).
pub fn capture_log() {
    sink();
}

fn sink() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let to = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || Sink(to.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber per test binary");
        log
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
