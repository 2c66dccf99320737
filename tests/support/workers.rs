//! Starting `llm-warden worker` as a real process in tests (tests/real/worker.rs,
//! tests/real/rpc_split.rs): the real rpc-server, free ports, the keyed status,
//! an optional memory cgroup standing for a machine of its own.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llm_warden::rpc::status::{STATUS_PATH, WorkerStatus};
use llm_warden::worker::build::find_rpc_server;
use tokio::io::AsyncBufReadExt;

use super::{MemCgroup, env_config, missing};

/// The key tests give through `WARDEN_WORKER_KEY`.
pub const KEY: &str = "worker-test-key-0123456789";

/// The real rpc-server build-llama.sh made.
#[track_caller]
pub fn rpc_server() -> PathBuf {
    let explicit = std::env::var_os("WARDEN_RPC_SERVER").map(PathBuf::from);
    find_rpc_server(explicit.as_deref(), &env_config(), false).unwrap_or_else(|searched| {
        missing(&format!(
            "ggml-rpc-server is missing (run ./build-llama.sh cpu); looked at {searched}"
        ))
    })
}

/// A port free now (the OS's pick, released at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running worker binary; SIGKILLed on drop (its rpc-server follows by
/// the parent-death signal).
pub struct Worker {
    pub child: tokio::process::Child,
    /// The status URL it printed.
    pub url: String,
    pub rpc_port: u16,
    /// Everything it wrote on stderr so far.
    pub stderr: Arc<Mutex<String>>,
    pub cache: tempfile::TempDir,
}

/// Starts `llm-warden worker --port 0 --rpc-port <rpc_port> args...` with its
/// own cache directory and `key` (None: it mints one), once it listens.
pub async fn start(rpc: &PathBuf, rpc_port: u16, args: &[&str], key: Option<&str>) -> Worker {
    start_in(None, rpc, rpc_port, args, key).await
}

/// As `start`, inside `group` (the worker's stand-in for a machine of its own).
pub async fn start_in(
    group: Option<&MemCgroup>,
    rpc: &PathBuf,
    rpc_port: u16,
    args: &[&str],
    key: Option<&str>,
) -> Worker {
    let place = Place { group, netns: None };
    start_at(place, rpc, 0, rpc_port, args, key).await
}

/// Where a worker runs: a memory cgroup (its machine's memory) and a network
/// namespace (its machine's address).
#[derive(Clone, Copy, Default)]
pub struct Place<'a> {
    /// The memory cgroup.
    pub group: Option<&'a MemCgroup>,
    /// The network namespace (`ip netns exec`).
    pub netns: Option<&'a str>,
}

/// As `start_in`, at `place`, on status port `port` (0: the OS picks; a
/// fixed one lets a test restart a worker where the warden knows it).
pub async fn start_at(
    place: Place<'_>,
    rpc: &PathBuf,
    port: u16,
    rpc_port: u16,
    args: &[&str],
    key: Option<&str>,
) -> Worker {
    let cache = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_llm-warden");
    let mut argv: Vec<&str> = match place.netns {
        Some(ns) => vec!["ip", "netns", "exec", ns, bin],
        None => vec![bin],
    };
    let mut cmd = match place.group {
        // The shell moves itself into the group, then execs the worker.
        Some(g) => {
            let mut c = tokio::process::Command::new("sh");
            c.args(["-c", &format!("{} \"$0\" \"$@\"", g.enter())]);
            c.args(&argv);
            c
        }
        None => {
            let mut c = tokio::process::Command::new(argv.remove(0));
            c.args(&argv);
            c
        }
    };
    cmd.args([
        "worker",
        "--port",
        &port.to_string(),
        "--rpc-port",
        &rpc_port.to_string(),
    ])
    .args(args)
    .env("WARDEN_CACHE_DIR", cache.path())
    .env("WARDEN_RPC_SERVER", rpc)
    .env("RUST_LOG", "warn,llm_warden=info")
    .env_remove("WARDEN_WORKER_KEY")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    if let Some(k) = key {
        cmd.env("WARDEN_WORKER_KEY", k);
    }
    let mut child = cmd.spawn().expect("the worker binary starts");
    let stderr = Arc::new(Mutex::new(String::new()));
    let sink = stderr.clone();
    let mut err_lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(l)) = err_lines.next_line().await {
            eprintln!("worker: {l}");
            let mut s = sink.lock().unwrap();
            s.push_str(&l);
            s.push('\n');
        }
    });
    let url = super::read_announced(&mut child, "llm-warden worker listening on ", "the worker").await;
    assert!(url.ends_with(STATUS_PATH), "{url}");
    Worker {
        child,
        url,
        rpc_port,
        stderr,
        cache,
    }
}

impl Worker {
    /// Its status address, `HOST:PORT`, as a warden is given it.
    pub fn addr(&self) -> String {
        let rest = self.url.strip_prefix("http://").unwrap_or(&self.url);
        rest.trim_end_matches(STATUS_PATH).to_string()
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("the worker runs")
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// GET the status with `auth` as the Authorization header.
    pub async fn get(&self, auth: Option<&str>) -> (u16, String) {
        let mut r = reqwest::Client::new().get(&self.url).timeout(Duration::from_secs(5));
        if let Some(a) = auth {
            r = r.header("Authorization", a);
        }
        let resp = r.send().await.expect("the status endpoint answers");
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    pub async fn status(&self, key: &str) -> WorkerStatus {
        let (code, body) = self.get(Some(&format!("Bearer {key}"))).await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("not a WorkerStatus ({e}): {body}"))
    }

    /// Polls the status until `ok` holds (up to `secs`), naming `what` if not.
    pub async fn wait_for(&self, key: &str, secs: u64, what: &str, ok: impl Fn(&WorkerStatus) -> bool) -> WorkerStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.status(key).await;
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what} within {secs} s; last status: {s:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
}
