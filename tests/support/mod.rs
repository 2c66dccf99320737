//! Shared test support: a tiny valid GGUF writer, the fake llama-server
//! (a test double for fault injection), locating the real llama-server and
//! models, starting a warden, and `recv_or_fail`.
#![allow(dead_code)]

pub mod split;
pub mod webdriver;
pub mod workers;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use llm_warden::catalog::Catalog;
use llm_warden::config::WardenConfig;
use llm_warden::engines::{Backend, CpuEngine};
use llm_warden::messages::TurnEvent;
use llm_warden::status::WardenEvent;
use llm_warden::{TurnRequest, Warden};
use tokio::sync::{broadcast, mpsc};

/// One GGUF metadata value the writer supports.
pub enum Kv {
    Str(&'static str, String),
    U32(&'static str, u32),
    U32s(&'static str, Vec<u32>),
}

/// Writes a small valid GGUF (v3) with `kvs` and one f32 tensor of
/// `tensor_elems` elements named `token_embd.weight`.
pub fn write_gguf(path: &Path, kvs: &[Kv], tensor_elems: u64) {
    let mut b: Vec<u8> = Vec::new();
    let s = |b: &mut Vec<u8>, t: &str| {
        b.extend_from_slice(&(t.len() as u64).to_le_bytes());
        b.extend_from_slice(t.as_bytes());
    };
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for kv in kvs {
        match kv {
            Kv::Str(k, v) => {
                s(&mut b, k);
                b.extend_from_slice(&8u32.to_le_bytes());
                s(&mut b, v);
            }
            Kv::U32(k, v) => {
                s(&mut b, k);
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&v.to_le_bytes());
            }
            Kv::U32s(k, v) => {
                s(&mut b, k);
                b.extend_from_slice(&9u32.to_le_bytes());
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&(v.len() as u64).to_le_bytes());
                for x in v {
                    b.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    s(&mut b, "token_embd.weight");
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&tensor_elems.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // F32
    b.extend_from_slice(&0u64.to_le_bytes());
    while !b.len().is_multiple_of(32) {
        b.push(0);
    }
    b.extend(std::iter::repeat_n(0u8, (tensor_elems * 4) as usize));
    std::fs::File::create(path).unwrap().write_all(&b).unwrap();
}

/// A llama-shaped GGUF: 2 layers, 2 KV heads, head dim 16, trained `ctx`.
pub fn write_llama_gguf(path: &Path, ctx: u32) {
    write_gguf(
        path,
        &[
            Kv::Str("general.architecture", "llama".into()),
            Kv::U32("llama.block_count", 2),
            Kv::U32("llama.context_length", ctx),
            Kv::U32("llama.embedding_length", 64),
            Kv::U32("llama.attention.head_count", 4),
            Kv::U32("llama.attention.head_count_kv", 2),
        ],
        64,
    );
}

/// The fake llama-server script.
pub fn fake_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake_llama_server.py")
}

/// Writes a fake model `id.gguf` in `dir` with the fake's `script` beside it.
pub fn fake_model(dir: &Path, id: &str, script: serde_json::Value) -> PathBuf {
    let p = dir.join(format!("{id}.gguf"));
    write_llama_gguf(&p, 8192);
    std::fs::write(dir.join(format!("{id}.gguf.fake.json")), script.to_string()).unwrap();
    p
}

/// A model with a heavy KV (32 layers x 8 KV heads x 128 x 2 x 2 B = 128 KiB
/// per token) and a 16384-token trained window, so that with 8 GiB of
/// (overridden) RAM its 16384- and 8192-token windows are the pressure's
/// cause and a 4096-token one is not (Flash-Attention-shaped heads, for the
/// CUDA engine's tests too).
pub fn heavy_model(dir: &Path, id: &str, script: serde_json::Value) {
    let p = dir.join(format!("{id}.gguf"));
    write_gguf(
        &p,
        &[
            Kv::Str("general.architecture", "llama".into()),
            Kv::U32("llama.block_count", 32),
            Kv::U32("llama.context_length", 16384),
            Kv::U32("llama.embedding_length", 4096),
            Kv::U32("llama.attention.head_count", 32),
            Kv::U32("llama.attention.head_count_kv", 8),
        ],
        64,
    );
    std::fs::write(dir.join(format!("{id}.gguf.fake.json")), script.to_string()).unwrap();
}

/// The environment of a live process.
pub fn environ(pid: u32) -> Vec<(String, String)> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let s = String::from_utf8_lossy(kv);
            let (k, v) = s.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// One variable of a live process's environment.
pub fn env_of(pid: u32, name: &str) -> Option<String> {
    environ(pid).into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// A trial count: `default` in the everyday run, `full` (RELIABILITY.md's
/// count) with `WARDEN_SOAK=1`.
pub fn soak(default: usize, full: usize) -> usize {
    if std::env::var("WARDEN_SOAK").is_ok_and(|v| v == "1") {
        full
    } else {
        default
    }
}

/// A config for tests: no timers unless asked, a short stop grace, and
/// watchdogs generous enough for a loaded 2-core machine (tests of the
/// watchdogs themselves set theirs).
pub fn test_config() -> WardenConfig {
    WardenConfig {
        idle_tick: Duration::ZERO,
        brake_tick: Duration::ZERO,
        load_timeout: Duration::from_secs(120),
        first_token_timeout: Duration::from_secs(120),
        stall_timeout: Duration::from_secs(60),
        request_timeout: Duration::from_secs(120),
        stop_grace: Duration::from_secs(2),
        ..WardenConfig::default()
    }
}

/// A warden over the fake child for the models in `dir`.
pub fn fake_warden(dir: &Path, cfg: WardenConfig) -> Warden {
    let backend = Backend::Cpu(CpuEngine {
        server: fake_server(),
        verbosity: 3,
    });
    Warden::start_with(Arc::new(cfg), Catalog::scan(dir), backend, None)
}

/// Receives within `secs`, or fails naming what was lost.
pub async fn recv_or_fail<T>(rx: &mut mpsc::Receiver<T>, what: &str) -> T {
    match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
        Ok(Some(v)) => v,
        Ok(None) => panic!("channel closed while waiting for {what}"),
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// Waits for the first lifecycle event matching `pred`.
pub async fn event_or_fail(
    rx: &mut broadcast::Receiver<WardenEvent>,
    what: &str,
    pred: impl Fn(&WardenEvent) -> bool,
) -> WardenEvent {
    let fut = async {
        loop {
            match rx.recv().await {
                Ok(ev) if pred(&ev) => return ev,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => panic!("events closed while waiting for {what}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// A streamed chat turn's request.
pub fn chat(model: Option<&str>, max_tokens: u32, stream: bool) -> TurnRequest {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 42,
    });
    TurnRequest {
        model: model.map(str::to_string),
        body: body.as_object().unwrap().clone(),
        stream,
        // As the HTTP layer sends every chat turn: a conversation's turn.
        options: llm_warden::messages::TurnOptions {
            stateful: true,
            announce_idle_reload: false,
        },
        conversation: Some("test-conversation".into()),
        kind: Default::default(),
        ..Default::default()
    }
}

/// Everything a turn sent, until it ended.
#[derive(Debug, Default)]
pub struct Turn {
    pub notices: Vec<llm_warden::messages::Notice>,
    pub chunks: Vec<bytes::Bytes>,
    pub body: Option<(u16, bytes::Bytes)>,
    pub error: Option<llm_warden::error::ApiError>,
    pub done: bool,
}

impl Turn {
    /// The concatenated `delta.content` of the chunks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.chunks {
            let s = String::from_utf8_lossy(c);
            for line in s.lines() {
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(data)
                    && let Some(t) = v.pointer("/choices/0/delta/content").and_then(|t| t.as_str())
                {
                    out.push_str(t);
                }
            }
        }
        out
    }
}

/// Collects a turn's events until it ends.
pub async fn collect(mut rx: mpsc::Receiver<TurnEvent>) -> Turn {
    let mut t = Turn::default();
    loop {
        match recv_or_fail(&mut rx, "the turn's next event").await {
            TurnEvent::Notice(n) => t.notices.push(n),
            TurnEvent::Chunk(c) => t.chunks.push(c),
            TurnEvent::Body { status, body } => {
                t.body = Some((status, body));
                return t;
            }
            TurnEvent::Error(e) => {
                t.error = Some(e);
                return t;
            }
            TurnEvent::Done => {
                t.done = true;
                return t;
            }
        }
    }
}

/// The warden's configuration from this environment, which says where the
/// real builds and models are; `None` (after `skip_or_fail`, naming the bad
/// variable) when the environment is not a valid configuration.
pub fn env_config() -> Option<WardenConfig> {
    match WardenConfig::from_env() {
        Ok(cfg) => Some(cfg),
        Err(e) => skip_or_fail(&format!("the environment is not a valid warden configuration: {e}")),
    }
}

/// The real llama-server build-llama.sh made, or `None` (the test then says
/// so and passes, unless `WARDEN_REQUIRE_REAL=1`, which test.sh sets).
pub fn real_llama_server() -> Option<PathBuf> {
    let cfg = env_config()?;
    match llm_warden::engines::llama::find_llama_server(&cfg, llm_warden::engines::llama::Flavour::Cpu) {
        Ok(p) => Some(p),
        Err(e) => skip_or_fail(&e.to_string()),
    }
}

/// A real model from the build cache.
pub fn real_model(file: &str) -> Option<PathBuf> {
    let cfg = env_config()?;
    let p = cfg.models_dir().join(file);
    if p.is_file() {
        Some(p)
    } else {
        skip_or_fail(&format!("{} is missing (run ./build-llama.sh)", p.display()))
    }
}

/// A test that needs something real (an engine, a model, a client) and
/// lacks it: skipped with a note, or failed under `WARDEN_REQUIRE_REAL=1`
/// (what `./test.sh` sets, so CI never passes by skipping).
pub fn skip_or_fail<T>(why: &str) -> Option<T> {
    if std::env::var("WARDEN_REQUIRE_REAL").is_ok_and(|v| v == "1") {
        panic!("a real test cannot run: {why}");
    }
    eprintln!("SKIPPED (real test): {why}");
    None
}

/// A test that needs an NVIDIA GPU (or what only a GPU run has: the CUDA
/// build, the generated models) and lacks it: skipped with a note, or
/// failed under `WARDEN_REQUIRE_GPU=1` (what `scripts/gpu-proof.sh` sets).
/// Not under `WARDEN_REQUIRE_REAL=1`: this project's CI machines have no GPU,
/// and `./test.sh` must pass there.
pub fn skip_or_fail_gpu<T>(why: &str) -> Option<T> {
    if std::env::var("WARDEN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        panic!("a GPU test cannot run: {why}");
    }
    eprintln!("SKIPPED (GPU test): {why}");
    None
}

/// The SmolLM2 file name.
pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The Gemma file name.
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// Whether a process is alive (not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits until `pid` is gone (or a zombie), up to `secs`.
pub async fn wait_gone(pid: u32, secs: u64) -> bool {
    for _ in 0..(secs * 20) {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    !alive(pid)
}

/// Starts the `llm-warden serve` binary on a free port with `envs`; returns
/// the process and its base URL once it listens.
pub async fn spawn_warden_binary(envs: &[(&str, &str)]) -> (tokio::process::Child, String) {
    spawn_warden_binary_with(&[], envs).await
}

/// As `spawn_warden_binary`, with more `serve` arguments (`--cors-origin ...`).
pub async fn spawn_warden_binary_with(args: &[&str], envs: &[(&str, &str)]) -> (tokio::process::Child, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-warden"));
    cmd.args(["serve", "--port", "0"])
        .args(args)
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("the warden binary starts");
    let base = read_listen_url(&mut child).await;
    (child, base)
}

/// The base URL a started warden prints on stdout (waiting up to 30 s).
/// Its stdout keeps draining afterwards so the warden never blocks on a full
/// pipe; a piped stderr is forwarded to the test's output.
pub async fn read_listen_url(child: &mut tokio::process::Child) -> String {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(u) = l.strip_prefix("llm-warden listening on ") {
                return u.trim().to_string();
            }
        }
        panic!("the warden exited before listening");
    })
    .await
    .expect("the warden listens within 30 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    if let Some(err) = child.stderr.take() {
        tokio::spawn(async move {
            let mut l = tokio::io::BufReader::new(err).lines();
            while let Ok(Some(line)) = l.next_line().await {
                eprintln!("warden: {line}");
            }
        });
    }
    url
}

/// Whether anything listens on 127.0.0.1:`port` (TIME_WAIT connections a
/// dead child leaves do not count: a new server binds over them).
pub fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3
                && cols[3] == "0A"
                && cols[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)
        })
    })
}

/// A warden over the real llama-server serving the real SmolLM2 (as model
/// `smollm2`, the default), with `cfg`; `None` when build-llama.sh has not
/// run (see `real_llama_server`). The directory lives as long as the warden.
pub fn real_smollm_warden(cfg: WardenConfig) -> Option<(Warden, tempfile::TempDir)> {
    let (server, model) = (real_llama_server()?, real_model(SMOLLM2)?);
    let dir = real_smollm_dir(&model);
    Some((real_cpu_warden(server, dir.path(), cfg), dir))
}

/// A catalog directory holding the real SmolLM2 as `smollm2.gguf` (a symlink),
/// for tests that add files of their own beside it.
pub fn real_smollm_dir(smollm: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(smollm, dir.path().join("smollm2.gguf")).unwrap();
    dir
}

/// A warden over the real llama-server (CPU) serving `dir`, `smollm2` the
/// default model.
pub fn real_cpu_warden(server: PathBuf, dir: &Path, cfg: WardenConfig) -> Warden {
    let backend = Backend::Cpu(CpuEngine { server, verbosity: 3 });
    let mut catalog = Catalog::scan(dir);
    catalog.set_default("smollm2");
    Warden::start_with(Arc::new(cfg), catalog, backend, None)
}

/// Serves `w`'s HTTP routes on a free port; returns the base URL.
pub fn serve_http(w: &Warden) -> String {
    let bound = llm_warden::server::bind(w.clone(), "127.0.0.1", Some(0)).unwrap();
    let base = format!("http://127.0.0.1:{}", bound.port);
    actix_rt::spawn(bound.server);
    base
}

/// Sends a request and reads its JSON answer (a test's HTTP one-liner).
pub async fn json_of(r: reqwest::RequestBuilder) -> serde_json::Value {
    r.send().await.unwrap().json().await.unwrap()
}
/// A memory cgroup (v1 or v2) the test made, removed (after its processes
/// are gone) on drop.
pub struct MemCgroup {
    /// The group's directory.
    pub dir: PathBuf,
    /// Whether it is a cgroup v1 group (else v2).
    pub v1: bool,
}

impl MemCgroup {
    /// Creates `<prefix>-<pid>` under the v1 memory controller, else under
    /// the v2 hierarchy, limited to `limit` bytes; `None` where neither is
    /// writable (not root).
    pub fn new(prefix: &str, limit: u64) -> Option<Self> {
        let name = format!("{prefix}-{}", std::process::id());
        for (root, file, v1) in [
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", true),
            ("/sys/fs/cgroup", "memory.max", false),
        ] {
            let dir = PathBuf::from(root).join(&name);
            if std::fs::create_dir(&dir).is_ok() {
                if std::fs::write(dir.join(file), limit.to_string()).is_ok() {
                    return Some(Self { dir, v1 });
                }
                let _ = std::fs::remove_dir(&dir);
            }
        }
        None
    }

    /// The OOM kills inside the group so far.
    pub fn oom_kills(&self) -> u64 {
        let f = if self.v1 { "memory.oom_control" } else { "memory.events" };
        llm_warden::sensors::ram::parse_oom_kill(&std::fs::read_to_string(self.dir.join(f)).unwrap_or_default())
            .unwrap_or(0)
    }

    /// `sh -c` prefix that moves the shell into the group.
    pub fn enter(&self) -> String {
        format!("echo $$ > {}/cgroup.procs && exec", self.dir.display())
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The Python of the client environment build-llama.sh makes (`clients`
/// flavour: OpenAI's client, prometheus-client, gguf-py).
pub fn client_python() -> Option<PathBuf> {
    let cfg = env_config()?;
    let py = cfg.cache_dir.join("py-clients/bin/python");
    if py.is_file() {
        Some(py)
    } else {
        skip_or_fail(&format!("{} missing (run ./build-llama.sh clients)", py.display()))
    }
}

/// Loads the default model now (`Load`), and the status after it.
pub async fn load_default(w: &Warden) -> llm_warden::status::EngineStatus {
    w.engine()
        .send(llm_warden::messages::Load::default())
        .await
        .expect("the engine answers")
        .expect("the default model loads")
}

/// `base` under forced critical pressure with 0.65 GiB of RAM standing in
/// for the machine's: SmolLM2 loads memory-bound at 6,400 tokens and the
/// brake shrinks it to the 4,096 floor at the first turn's end.
pub fn forced_critical(base: WardenConfig) -> WardenConfig {
    WardenConfig {
        ram_override_bytes: Some((0.65 * (1u64 << 30) as f64) as u64),
        force_pressure: Some(llm_warden::config::ForcedPressure::Critical),
        ..base
    }
}
