//! An in-process fake llama-server (feature `testing`): a task on the
//! engine's runtime that binds the port of the `SpawnSpec`'s argv and
//! speaks the part of llama-server b10883's HTTP API the engine uses
//! (`/health`, `/props`, the `/completion` readiness ping,
//! `/v1/chat/completions` streamed and whole; see `routes`), guarded by the
//! spec's `LLAMA_API_KEY` like the real one. Its behaviour is a `Script`
//! the test writes: load time, token pacing, a hang, a death, an ignored
//! SIGTERM, a load that fails with llama.cpp's own line, a death by a
//! signal. The same fake runs as a real process (`process`, the
//! `fake-llama-server` binary, scripted by `<model>.fake.json` beside the
//! model: `script_file`), for what only a process shows (signals, process
//! groups, orphans, a crash classified from real output).
//!
//! # Why in-process
//!
//! Its timers are the engine's runtime's, so a test on paused tokio time
//! (`tokio::time::pause`) runs a 30 s watchdog in milliseconds and can
//! assert the virtual time at which it fired. The engine must then run on
//! the test's runtime (`Warden::start_here`).
//!
//! # The heartbeat rule
//!
//! While a fake lives it keeps a timer at most `HEARTBEAT` away. Paused
//! time auto-advances to the next timer whenever the runtime parks, and it
//! parks at every loopback hop between the engine's client and the fake
//! (the IO driver is only polled there): without a near timer one hop
//! would let the clock jump straight to a watchdog's deadline before the
//! fake had even read its request. With it, virtual time moves in 1 ms
//! steps while bytes cross loopback, so a hop costs at most a step or two
//! and a deadline fires because the fake was silent, not because the
//! kernel was slow.
//!
//! Its pid is `FAKE_PID_BASE` and up, above Linux's `pid_max` limit (2^22):
//! no process has it, and `ChildProcess` never signals it (every stop goes
//! down the fake's control channel).

mod http;
mod life;
#[cfg(unix)]
pub mod process;
mod routes;
pub mod script_file;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::launch::Launcher;
use super::process::{ChildProcess, ExitInfo, SpawnSpec};

/// The first fake pid: above Linux's largest possible `pid_max` (2^22).
pub const FAKE_PID_BASE: u32 = 1 << 30;
/// The longest virtual step while a fake lives (see the heartbeat rule).
pub const HEARTBEAT: Duration = Duration::from_millis(1);

/// The next fake pid (unique in this process).
static NEXT_PID: AtomicU32 = AtomicU32::new(FAKE_PID_BASE);

/// What a fake child does, as a test scripts it. The defaults answer
/// quickly and completely.
#[derive(Debug, Clone)]
pub struct Script {
    /// How long `/health` answers 503 (loading) before 200.
    pub load: Duration,
    /// `/health` answers 503 forever.
    pub never_ready: bool,
    /// Tokens per answer, capped by the request's bound (`n_predict`, else
    /// `max_completion_tokens`, else `max_tokens`, as llama-server reads them).
    pub tokens: u32,
    /// From a chat request to its first token (prompt processing); a
    /// streamed answer's headers come with that token, as llama-server's do.
    pub first_token_delay: Duration,
    /// Between two tokens.
    pub token_delay: Duration,
    /// Sends nothing more (the connection stays open) after this many
    /// tokens: `Some(0)` never answers at all.
    pub hang_after: Option<u32>,
    /// Exits with status 3 after this many tokens, saying
    /// `fake: dying mid-stream`.
    pub die_after: Option<u32>,
    /// SIGTERM is ignored (a wedged child): only the kill after the stop
    /// grace ends it.
    pub ignore_term: bool,
    /// The `n_ctx` `/props` reports (default: the `-c` given, else 4096).
    pub props_ctx: Option<u32>,
    /// `/props` answers 500.
    pub props_fail: bool,
    /// What `/slots/0?action=restore` does.
    pub restore: SlotRestore,
    /// `/slots/N?action=save` answers 500 "failed to save slot" (a full
    /// disk) instead of writing the file.
    pub save_fails: bool,
    /// Prints llama.cpp's line for this failure while loading and exits 1.
    pub exit_on_load: Option<Failure>,
    /// The same, only when started with this `-c`.
    pub exit_on_ctx: Vec<(u32, Failure)>,
    /// Prints llama.cpp's `offloaded N/M layers to GPU` with this `N/M`.
    pub offloaded: Option<String>,
    /// Prints llama.cpp's line that Flash Attention was turned off at load
    /// (`Flash Attention not supported, set to disabled`).
    pub flash_attention_off: bool,
    /// Dies of this signal while loading (a binary built for another CPU
    /// dies so on its first computation).
    pub signal_on_load: Option<i32>,
    /// Dies of `.0` (a signal) before token `.1`.
    pub signal_after: Option<(i32, u32)>,
    /// A scripted death (`die_after`, `signal_after`) happens on this many
    /// answers in all, across the fake's children; `None`: on every one
    /// (a crash the next child does not repeat, for a turn that goes on).
    pub die_times: Option<u32>,
    /// Dies (as `die_after`) while reading a prompt that holds this text,
    /// before its first token: a prompt that kills every child that reads
    /// it.
    pub die_on: Option<String>,
}

/// A load failure, said with the line llama.cpp b10883 prints for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// A truncated file: a tensor past its end.
    Corrupt,
    /// Not a GGUF file at all.
    NotGguf,
    /// The port is taken.
    PortTaken,
    /// The CPU buffer cannot be allocated.
    Oom,
    /// The CUDA buffer cannot be allocated.
    CudaOom,
}

impl Failure {
    /// The lines llama-server prints for it (then it exits 1).
    pub fn lines(self, host: &str, port: u16) -> Vec<String> {
        match self {
            Self::Corrupt => vec!["llama_model_load: error loading model: tensor 'token_embd.weight' data is not within the file bounds, model is corrupted or incomplete".into()],
            Self::NotGguf => vec!["gguf_init_from_reader: invalid magic characters: 'hell', expected 'GGUF'".into()],
            Self::PortTaken => vec![
                format!("srv          start: couldn't bind HTTP server socket, hostname: {host}, port: {port}"),
                "srv           main: exiting due to HTTP server error".into(),
            ],
            Self::Oom => vec!["ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 98765432109".into()],
            Self::CudaOom => vec!["ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 0: cudaMalloc failed: out of memory".into()],
        }
    }
}

/// The fake's slot restore, as scripted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SlotRestore {
    /// Reads the file back, as llama-server does.
    #[default]
    Restores,
    /// Answers 400 "Unable to restore slot", as llama-server does for a
    /// file it cannot use.
    Refuses,
    /// Never answers (a stalled child or disk).
    Hangs,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            load: Duration::from_millis(50),
            never_ready: false,
            tokens: 8,
            first_token_delay: Duration::from_millis(5),
            token_delay: Duration::from_millis(5),
            hang_after: None,
            die_after: None,
            ignore_term: false,
            props_ctx: None,
            props_fail: false,
            restore: SlotRestore::Restores,
            save_fails: false,
            exit_on_load: None,
            exit_on_ctx: Vec::new(),
            offloaded: None,
            flash_attention_off: false,
            signal_on_load: None,
            signal_after: None,
            die_times: None,
            die_on: None,
        }
    }
}

/// One start of a fake child, as recorded.
#[derive(Debug, Clone)]
pub struct Spawned {
    /// Its (fake) pid.
    pub pid: u32,
    /// The model id: the `-m` file's stem.
    pub model: String,
    /// Its argv.
    pub argv: Vec<String>,
    exit: watch::Receiver<Option<ExitInfo>>,
}

impl Spawned {
    /// How it ended, or `None` while it runs.
    pub fn exit(&self) -> Option<ExitInfo> {
        *self.exit.borrow()
    }
}

/// The fake llama-server a test hands the engine: a script per model (or
/// one for all), and a record of every start and chat request.
#[derive(Debug, Default)]
pub struct FakeLlama {
    default: Script,
    models: HashMap<String, Script>,
    spawns: Mutex<Vec<Spawned>>,
    requests: Mutex<Vec<serde_json::Value>>,
    slot_actions: Mutex<Vec<String>>,
    /// A file each chat request body is appended to (one JSON line): the
    /// fake run as a process keeps its record there.
    request_log: Option<std::path::PathBuf>,
    /// Scripted deaths so far, across its children (`Script::die_times`).
    deaths: AtomicU32,
    /// The same count for the fake run as a process (one per child): a
    /// byte per death, in a file beside the model.
    death_log: Option<std::path::PathBuf>,
}

impl FakeLlama {
    /// A fake that runs `script` for every model.
    pub fn new(script: Script) -> Self {
        Self {
            default: script,
            ..Self::default()
        }
    }

    /// The same, with `script` for the model `id` instead.
    pub fn with_model(mut self, id: &str, script: Script) -> Self {
        self.models.insert(id.to_string(), script);
        self
    }

    /// The launcher that starts this fake (for `WardenConfig::launcher`).
    pub fn launcher(self: &Arc<Self>) -> Launcher {
        Launcher::InProcess(self.clone())
    }

    /// Every start so far, oldest first.
    pub fn spawns(&self) -> Vec<Spawned> {
        lock(&self.spawns).clone()
    }

    /// Fakes still running.
    pub fn running(&self) -> usize {
        lock(&self.spawns).iter().filter(|s| s.exit().is_none()).count()
    }

    /// Every chat request body received, oldest first.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        lock(&self.requests).clone()
    }

    /// Every slot action received (`save`, `restore`), oldest first.
    pub fn slot_actions(&self) -> Vec<String> {
        lock(&self.slot_actions).clone()
    }

    /// Records one slot action.
    fn record_slot_action(&self, action: &str) {
        lock(&self.slot_actions).push(action.to_string());
    }

    /// Starts a fake child for `spec` (llama-server's argv and environment).
    /// Like a process, it starts even when its port is taken: it then says
    /// so in its output and exits 1, as llama-server does. Must run inside
    /// a tokio runtime (the fake is a task on it).
    pub(crate) fn spawn(self: &Arc<Self>, spec: &SpawnSpec) -> std::io::Result<ChildProcess> {
        let argv: Vec<String> = spec.args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let port = flag(&argv, "--port")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| std::io::Error::other("the fake needs llama-server's --port"))?;
        let model_path = flag(&argv, "-m").unwrap_or_default().to_string();
        let model = Path::new(&model_path)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let key = spec
            .env
            .iter()
            .find(|(k, _)| k == OsStr::new("LLAMA_API_KEY"))
            .map(|(_, v)| v.to_string_lossy().into_owned())
            .unwrap_or_default();
        let script = self.models.get(&model).unwrap_or(&self.default).clone();
        let ctx = flag(&argv, "-c").and_then(|c| c.parse().ok());
        let slot_dir = flag(&argv, "--slot-save-path").map(std::path::PathBuf::from);
        let pid = NEXT_PID.fetch_add(1, Ordering::Relaxed);
        let child = life::start(
            life::Child {
                script,
                key,
                ctx,
                model_path,
                slot_dir,
                slot_tokens: Default::default(),
                fake: self.clone(),
                output: Default::default(),
                ready: Default::default(),
                process: false,
            },
            port,
            pid,
        );
        lock(&self.spawns).push(Spawned {
            pid,
            model,
            argv,
            exit: child.exit_watch(),
        });
        Ok(child)
    }

    /// Whether a scripted death may happen now (under `die_times`): counted
    /// when it may.
    fn may_die(&self, limit: Option<u32>) -> bool {
        let Some(limit) = limit else { return true };
        if let Some(path) = &self.death_log {
            let n = std::fs::metadata(path).map_or(0, |m| m.len());
            if n >= u64::from(limit) {
                return false;
            }
            use std::io::Write;
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(b"x"));
            return true;
        }
        self.deaths
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1))
            .is_ok()
    }

    /// Records one chat request body (and appends it to the request log).
    fn record_request(&self, body: serde_json::Value) {
        if let Some(path) = &self.request_log {
            use std::io::Write;
            let line = format!("{body}\n");
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()));
        }
        lock(&self.requests).push(body);
    }
}

/// The value after `name` in `argv`.
fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    argv.iter()
        .position(|a| a == name)
        .and_then(|i| argv.get(i + 1))
        .map(String::as_str)
}

/// A test double's lock: a panic while holding it is a failed test
/// already, so a poisoned lock still holds usable records.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
