//! Crash classification: the dead (or failing) child's output tail to an
//! `EngineCode`. Pure: the caller hands in the lines it captured.
//!
//! The patterns are the strings the pinned llama.cpp (b10883) and ggml print,
//! read from its source (`llama-model-loader.cpp`, `gguf.cpp`,
//! `server-http.cpp`, `ggml-backend.cpp`, `ggml-cuda.cu`), plus mlx-vlm's and
//! Python's own wording for the MLX child. The last matching line wins: a
//! child that fails twice (fit's probe, then the real load) is judged by the
//! failure that killed it.

use serde::Serialize;

/// Why a child failed, as carried to the API's error `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineCode {
    /// The model file is truncated or its tensors are corrupt.
    ModelCorrupt,
    /// The file is not a GGUF file at all.
    NotGguf,
    /// The child could not bind its HTTP port.
    PortInUse,
    /// An allocation failed in host memory (or the kernel killed the child).
    OutOfMemory,
    /// An allocation failed on the GPU (cudaMalloc, CUDA_OUT_OF_MEMORY).
    CudaOutOfMemory,
    /// The child never became ready within the load timeout.
    LoadTimeout,
    /// The child stopped producing tokens (first-token or stall watchdog).
    ChildHung,
    /// Killed by SIGKILL from outside the warden, with no OOM kill on record
    /// (another process, or an OOM killer whose counter we cannot read).
    ChildKilled,
    /// Killed by SIGILL: the llama-server binary uses CPU instructions this
    /// machine cannot run (built for another CPU, or a kernel path such as
    /// ggml's AMX tiles that this CPU or kernel does not allow).
    IllegalInstruction,
    /// The child exited without a recognisable reason.
    ChildCrashed,
}

impl EngineCode {
    /// The stable string used on the wire and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ModelCorrupt => "model_corrupt",
            Self::NotGguf => "not_gguf",
            Self::PortInUse => "port_in_use",
            Self::OutOfMemory => "out_of_memory",
            Self::CudaOutOfMemory => "cuda_out_of_memory",
            Self::LoadTimeout => "load_timeout",
            Self::ChildHung => "child_hung",
            Self::ChildKilled => "child_killed",
            Self::IllegalInstruction => "illegal_instruction",
            Self::ChildCrashed => "child_crashed",
        }
    }

    /// What a person can do about it, when the code alone says.
    pub fn remedy(self) -> Option<&'static str> {
        match self {
            Self::IllegalInstruction => Some(
                "the llama-server binary uses CPU instructions this machine cannot run; rebuild it on this machine with ./build-llama.sh --rebuild (or point WARDEN_LLAMA_SERVER at a build for this CPU)",
            ),
            Self::ModelCorrupt => Some("the model file is truncated or damaged; download it again"),
            Self::NotGguf => Some("the file is not a GGUF model; check the path"),
            _ => None,
        }
    }

    /// Whether a load that failed this way may succeed on the next port.
    pub fn is_port_conflict(self) -> bool {
        self == Self::PortInUse
    }
}

impl std::fmt::Display for EngineCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// (substring, code) pairs; a line matching several takes the first row.
const PATTERNS: &[(&str, EngineCode)] = &[
    // cudaMalloc / the CUDA runtime's own wording comes first: the same line
    // also says "failed to allocate", which alone means host memory.
    ("cudaMalloc failed", EngineCode::CudaOutOfMemory),
    ("CUDA_OUT_OF_MEMORY", EngineCode::CudaOutOfMemory),
    ("CUDA error: out of memory", EngineCode::CudaOutOfMemory),
    ("cudaHostAlloc", EngineCode::CudaOutOfMemory),
    ("not within the file bounds", EngineCode::ModelCorrupt),
    ("model is corrupted or incomplete", EngineCode::ModelCorrupt),
    ("failed to read tensor", EngineCode::ModelCorrupt),
    ("invalid magic characters", EngineCode::NotGguf),
    ("failed to read magic", EngineCode::NotGguf),
    ("couldn't bind HTTP server socket", EngineCode::PortInUse),
    ("Address already in use", EngineCode::PortInUse),
    // uvicorn (mlx_vlm.server): "[Errno 98] error while attempting to bind on address ... address already in use"
    ("address already in use", EngineCode::PortInUse),
    ("failed to allocate", EngineCode::OutOfMemory),
    ("unable to allocate", EngineCode::OutOfMemory),
    ("insufficient memory", EngineCode::OutOfMemory),
    ("std::bad_alloc", EngineCode::OutOfMemory),
    ("MemoryError", EngineCode::OutOfMemory),
];

/// How the child ended, as far as classification cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// Still running (a hang or a timeout is being classified).
    Running,
    /// Exited with this status code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

/// SIGKILL's number on every platform the warden runs llama-server on.
const SIGKILL: i32 = 9;
/// SIGILL's number, the same on Linux and macOS.
pub const SIGILL: i32 = 4;

/// A fatal signal, named for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalName {
    /// `SIGSEGV`, ...
    pub name: &'static str,
    /// What it usually means for a model server (empty for the signals
    /// sent from outside, whose sender is the question).
    pub meaning: &'static str,
}

impl std::fmt::Display for SignalName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.meaning.is_empty() {
            f.write_str(self.name)
        } else {
            write!(f, "{} ({})", self.name, self.meaning)
        }
    }
}

/// `SIGSEGV (segmentation fault: ...)`, or `signal N` for an unnamed one.
pub fn describe_signal(sig: i32) -> String {
    signal_name(sig).map_or_else(|| format!("signal {sig}"), |s| s.to_string())
}

/// Names the signals a model server dies of. Numbers are the host's own
/// (SIGBUS is 7 on Linux, 10 on macOS), so the table is built from libc's
/// constants; an unknown number is `None` and is reported by number.
pub fn signal_name(sig: i32) -> Option<SignalName> {
    #[cfg(unix)]
    {
        let table: &[(i32, &str, &str)] = &[
            (
                libc::SIGILL,
                "SIGILL",
                "illegal instruction: the binary was built for another CPU",
            ),
            (
                libc::SIGSEGV,
                "SIGSEGV",
                "segmentation fault: a crash inside the model server",
            ),
            (
                libc::SIGBUS,
                "SIGBUS",
                "bus error: often a model file truncated or replaced while it was mapped",
            ),
            (
                libc::SIGABRT,
                "SIGABRT",
                "aborted: an assertion inside the model server failed",
            ),
            (libc::SIGFPE, "SIGFPE", "arithmetic fault inside the model server"),
            (
                libc::SIGTRAP,
                "SIGTRAP",
                "trace trap: a compiler trap or a debugger breakpoint",
            ),
            // Signals sent from outside carry no meaning of their own: who
            // sent them is the question (the OOM killer, a person, the warden).
            (libc::SIGKILL, "SIGKILL", ""),
            (libc::SIGTERM, "SIGTERM", ""),
            (libc::SIGINT, "SIGINT", ""),
            (libc::SIGHUP, "SIGHUP", ""),
            (libc::SIGQUIT, "SIGQUIT", ""),
            (libc::SIGPIPE, "SIGPIPE", ""),
            (libc::SIGXCPU, "SIGXCPU", "CPU time limit exceeded"),
            (libc::SIGXFSZ, "SIGXFSZ", "file size limit exceeded"),
        ];
        table
            .iter()
            .find(|(n, ..)| *n == sig)
            .map(|&(_, name, meaning)| SignalName { name, meaning })
    }
    #[cfg(not(unix))]
    {
        let _ = sig;
        None
    }
}

/// What the caller knows beside the output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// The warden itself signalled the child (a stop, or the watchdog).
    pub stopped_by_us: bool,
    /// The kernel's OOM-kill counter of our memory cgroup moved while the
    /// child ran (cgroup v2 `memory.events`, v1 `memory.oom_control`).
    pub oom_kill_seen: bool,
    /// The port the child was told to listen on was held by another socket
    /// once it had exited (the warden probes it by binding it, as the child
    /// would). Only a load sets it: a child that exits with a status during
    /// its load and says nothing else that explains it failed to bind.
    /// llama.cpp logs through a detached thread that the process does not
    /// wait for at exit, and a child that fails to bind exits about 10 ms
    /// after its start: the `couldn't bind` line is sometimes lost, and a
    /// port conflict must still be retried on the next port.
    pub port_held: bool,
}

/// Classifies a failed child from its output tail and how it ended.
///
/// The output decides when a line matches (the last match wins). A load
/// that exited with a failing status on a port another socket holds is a
/// port conflict even when its output was lost (`Hints::port_held`). A silent
/// SIGKILL nobody in the warden sent is the OOM killer when the cgroup's
/// counter says so, else `child_killed`: guessing "out of memory" from the
/// signal alone would send a user after memory when another process (or a
/// person) killed the child.
pub fn classify(tail: &[String], exit: ExitKind, hints: Hints) -> EngineCode {
    // SIGILL is decisive whatever was printed before it: no output line
    // explains an instruction the CPU refused (fit's probe may have printed
    // an allocation failure first).
    if exit == ExitKind::Signal(SIGILL) && !hints.stopped_by_us {
        return EngineCode::IllegalInstruction;
    }
    for line in tail.iter().rev() {
        if let Some(code) = classify_line(line) {
            return code;
        }
    }
    match exit {
        _ if hints.oom_kill_seen && !hints.stopped_by_us => EngineCode::OutOfMemory,
        ExitKind::Code(c) if c != 0 && hints.port_held && !hints.stopped_by_us => EngineCode::PortInUse,
        ExitKind::Signal(SIGKILL) if !hints.stopped_by_us => EngineCode::ChildKilled,
        _ => EngineCode::ChildCrashed,
    }
}

/// The code one output line proves, if any.
pub fn classify_line(line: &str) -> Option<EngineCode> {
    PATTERNS
        .iter()
        .find(|(needle, _)| line.contains(needle))
        .map(|&(_, code)| code)
}

/// Whether the kernel's OOM killer struck between two readings of its
/// counter (the cgroup's or the machine's); unknown counts as no.
pub fn oom_killed_since(before: Option<u64>, now: Option<u64>) -> bool {
    matches!((before, now), (Some(a), Some(b)) if b > a)
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit status code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
}

impl ExitInfo {
    /// The classification view of this exit.
    pub fn kind(&self) -> ExitKind {
        match (self.code, self.signal) {
            (_, Some(sig)) => ExitKind::Signal(sig),
            (Some(code), None) => ExitKind::Code(code),
            (None, None) => ExitKind::Code(-1),
        }
    }
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (_, Some(sig)) => match signal_name(sig) {
                Some(s) => write!(f, "killed by {}", s.name),
                None => write!(f, "killed by signal {sig}"),
            },
            (Some(code), None) => write!(f, "exit status {code}"),
            (None, None) => f.write_str("ended"),
        }
    }
}

#[cfg(test)]
#[path = "crash_tests.rs"]
mod tests;
