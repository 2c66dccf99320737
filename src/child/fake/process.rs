//! The fake run as a process (the `fake-llama-server` binary, Unix): the
//! same life and routes as the in-process fake, with llama-server's argv
//! (`-m`, `-c`, `--host`, `--port`; the rest is taken and ignored), its
//! key from `LLAMA_API_KEY`, its script from `<model>.fake.json`
//! (`script_file`), its lines on standard error, and real signals: SIGTERM
//! stops it (unless scripted to ignore it), SIGKILL kills it, and a
//! scripted crash dies of the real signal, so the warden classifies what a
//! real crash would show it.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::life::{self, Child};
use super::script_file::ScriptFile;
use super::{FakeLlama, flag};
use crate::child::process::Stop;

/// Runs the fake for this process's argv; its exit status (a scripted
/// death by a signal never returns).
pub fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let model_path = flag(&argv, "-m").unwrap_or_default().to_string();
    let host = flag(&argv, "--host").unwrap_or("127.0.0.1").to_string();
    let Some(port) = flag(&argv, "--port").unwrap_or("8080").parse::<u16>().ok() else {
        eprintln!("fake: --port takes a port");
        return ExitCode::from(2);
    };
    let file = match ScriptFile::beside(Path::new(&model_path)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fake: {e}");
            return ExitCode::from(2);
        }
    };
    let script = match file.script() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fake: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(log) = &file.argv_log {
        let line = serde_json::json!({
            "argv": argv,
            "cuda_visible_devices": std::env::var("CUDA_VISIBLE_DEVICES").ok(),
        });
        append(log, &line.to_string());
    }
    let fake = Arc::new(FakeLlama {
        request_log: file.log.clone(),
        death_log: Some(format!("{model_path}.fake.deaths").into()),
        ..FakeLlama::new(script.clone())
    });
    let child = Arc::new(Child {
        script,
        key: std::env::var("LLAMA_API_KEY").unwrap_or_default(),
        ctx: flag(&argv, "-c").and_then(|c| c.parse().ok()),
        model_path,
        slot_dir: flag(&argv, "--slot-save-path").map(std::path::PathBuf::from),
        slot_tokens: Default::default(),
        fake,
        output: Default::default(),
        ready: Default::default(),
        process: true,
    });
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fake: no runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let info = runtime.block_on(async move {
        let (stop_tx, stop_rx) = mpsc::unbounded_channel();
        // SIGTERM becomes the life's stop, as the in-process fake gets it.
        if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            tokio::spawn(async move {
                while term.recv().await.is_some() {
                    if stop_tx.send(Stop::Term).is_err() {
                        break;
                    }
                }
            });
        }
        life::live(child, &host, port, stop_rx).await
    });
    drop(runtime);
    if let Some(sig) = info.signal {
        die_of(sig);
    }
    ExitCode::from(info.code.unwrap_or(1).clamp(0, 255) as u8)
}

/// Appends `line` to `path` (a test's record; a failure to write is the
/// test's to notice, by a missing line).
fn append(path: &Path, line: &str) {
    use std::io::Write;
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| writeln!(f, "{line}"));
}

/// Dies of `sig` with its default action and no core file, as a crashed
/// llama-server would.
fn die_of(sig: i32) -> ! {
    // SAFETY: plain libc calls on this process, single-threaded by now
    // (the runtime is gone): no core file, the default action, the signal.
    unsafe {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    // A blocked signal: say so in the status rather than pretend.
    std::process::exit(128 + sig)
}
