//! `llm-warden worker` as a real process over the real `ggml-rpc-server`
//! (build-llama.sh's build): its keyed status, restarts after a kill, no
//! orphan when the worker dies, a taken rpc port reported instead of
//! hammered, the warning of a public bind, and a clean SIGTERM stop.

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llm_warden::config::WardenConfig;
use llm_warden::rpc::status::{DeviceKind, STATUS_PATH, WorkerStatus};
use llm_warden::rpc::worker::build::find_rpc_server;
use support::{MemCgroup, alive, skip_or_fail, wait_gone};
use tokio::io::AsyncBufReadExt;

/// The key tests give through `WARDEN_WORKER_KEY`.
const KEY: &str = "worker-test-key-0123456789";

/// The real rpc-server, or `None` (skipped, or failed under WARDEN_REQUIRE_REAL=1).
fn rpc_server() -> Option<PathBuf> {
    let cfg = WardenConfig::from_env().ok()?;
    let explicit = std::env::var_os("WARDEN_RPC_SERVER").map(PathBuf::from);
    match find_rpc_server(explicit.as_deref(), &cfg, false) {
        Ok(p) => Some(p),
        Err(searched) => skip_or_fail(&format!(
            "ggml-rpc-server is missing (run ./build-llama.sh cpu); looked at {searched}"
        )),
    }
}

/// A port free now (the OS's pick, released at once).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running worker binary; SIGKILLed on drop (its rpc-server follows by
/// the parent-death signal).
struct Worker {
    child: tokio::process::Child,
    /// The status URL it printed.
    url: String,
    rpc_port: u16,
    /// Everything it wrote on stderr so far.
    stderr: Arc<Mutex<String>>,
    cache: tempfile::TempDir,
}

/// Starts `llm-warden worker --port 0 --rpc-port <rpc_port> args...` with its
/// own cache directory and `key` (None: it mints one), once it listens.
async fn start(rpc: &PathBuf, rpc_port: u16, args: &[&str], key: Option<&str>) -> Worker {
    start_in(None, rpc, rpc_port, args, key).await
}

/// As `start`, inside `group` (the worker's stand-in for a machine of its own).
async fn start_in(group: Option<&MemCgroup>, rpc: &PathBuf, rpc_port: u16, args: &[&str], key: Option<&str>) -> Worker {
    let cache = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_llm-warden");
    let mut cmd = match group {
        Some(g) => {
            let mut c = tokio::process::Command::new("sh");
            c.args(["-c", &format!("{} \"$0\" \"$@\"", g.enter()), bin]);
            c
        }
        None => tokio::process::Command::new(bin),
    };
    cmd.args(["worker", "--port", "0", "--rpc-port", &rpc_port.to_string()])
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
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(l) = out.next_line().await.unwrap() {
            if let Some(u) = l.strip_prefix("llm-warden worker listening on ") {
                return u.trim().to_string();
            }
        }
        panic!("the worker exited before listening");
    })
    .await
    .expect("the worker listens within 30 s");
    tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
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
    fn pid(&self) -> u32 {
        self.child.id().expect("the worker runs")
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// GET the status with `auth` as the Authorization header.
    async fn get(&self, auth: Option<&str>) -> (u16, String) {
        let mut r = reqwest::Client::new().get(&self.url).timeout(Duration::from_secs(5));
        if let Some(a) = auth {
            r = r.header("Authorization", a);
        }
        let resp = r.send().await.expect("the status endpoint answers");
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    async fn status(&self, key: &str) -> WorkerStatus {
        let (code, body) = self.get(Some(&format!("Bearer {key}"))).await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("not a WorkerStatus ({e}): {body}"))
    }

    /// Polls the status until `ok` holds (up to `secs`), naming `what` if not.
    async fn wait_for(&self, key: &str, secs: u64, what: &str, ok: impl Fn(&WorkerStatus) -> bool) -> WorkerStatus {
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

fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
}

/// With its key the status says rpc-server is up, which build and protocol
/// it is, and the cgroup-bounded RAM; without it, or with a wrong one, 401
/// and the key appears nowhere (body, logs). A minted key sits in a 0600 file.
#[actix_rt::test]
async fn status_is_keyed_and_describes_the_real_rpc_server() {
    let Some(rpc) = rpc_server() else { return };
    let w = start(&rpc, free_port(), &[], None).await;
    let key_file = w.cache.path().join("worker.key");
    let key = std::fs::read_to_string(&key_file)
        .expect("a minted key file")
        .trim()
        .to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let s = w.wait_for(&key, 10, "rpc-server up", |s| s.rpc.up).await;
    assert_eq!(s.build.llama_cpp.as_deref(), Some("b10883"), "{s:?}");
    assert_eq!(s.build.flavour.as_deref(), Some("cpu"), "{s:?}");
    assert_eq!(s.build.rpc_protocol.as_deref(), Some("6.0.0"), "{s:?}");
    assert_eq!(
        (s.rpc.port, s.rpc.starts, s.rpc.last_exit.as_deref()),
        (w.rpc_port, 1, None)
    );
    assert!(s.rpc.pid.is_some_and(alive), "{s:?}");
    assert_eq!(s.devices.len(), 1, "{s:?}");
    let cpu = &s.devices[0];
    assert_eq!((cpu.name.as_str(), cpu.kind), ("CPU", DeviceKind::Cpu));
    assert!(cpu.total_bytes > 0 && cpu.free_bytes <= cpu.total_bytes, "{cpu:?}");
    assert!(s.pressure.is_some(), "{s:?}");

    let wrong = format!("Bearer {key}x");
    for auth in [None, Some("Bearer nope"), Some(wrong.as_str()), Some(key.as_str())] {
        let (code, body) = w.get(auth).await;
        assert_eq!(code, 401, "{auth:?}: {body}");
        assert!(body.contains("invalid_worker_key"), "{body}");
        assert!(!body.contains(&key), "the 401 body holds the key: {body}");
    }
    assert!(w.stderr().contains("worker ready: status"), "{}", w.stderr());
    assert!(!w.stderr().contains(&key), "the key reached the log");
}

/// Inside a 1 GiB memory cgroup (a machine of its own, as the warden's tests
/// stage workers) the CPU device is that 1 GiB, not the host's RAM that
/// rpc-server itself reports.
#[actix_rt::test]
async fn the_cpu_device_is_bounded_by_the_workers_cgroup() {
    let Some(rpc) = rpc_server() else { return };
    const LIMIT: u64 = 1 << 30;
    let Some(group) = MemCgroup::new("llm-warden-worker", LIMIT) else {
        skip_or_fail::<()>("cannot create a memory cgroup here (not root?)");
        return;
    };
    let mut w = start_in(Some(&group), &rpc, free_port(), &[], Some(KEY)).await;
    let s = w.wait_for(KEY, 10, "rpc-server up", |s| s.rpc.up).await;
    let cpu = &s.devices[0];
    assert_eq!(cpu.total_bytes, LIMIT, "{cpu:?}");
    assert!(cpu.free_bytes <= LIMIT && cpu.free_bytes > 0, "{cpu:?}");
    // The group is removed on drop only once its processes are gone.
    let child = s.rpc.pid.unwrap();
    signal(w.pid(), nix::sys::signal::Signal::SIGTERM);
    let _ = w.child.wait().await;
    assert!(wait_gone(child, 10).await);
}

/// rpc-server killed from outside is restarted: `starts` moves, a new pid is
/// up, the old one is gone, and `last_exit` says how it died.
#[actix_rt::test]
async fn a_killed_rpc_server_is_restarted() {
    let Some(rpc) = rpc_server() else { return };
    let w = start(&rpc, free_port(), &[], Some(KEY)).await;
    let before = w.wait_for(KEY, 10, "rpc-server up", |s| s.rpc.up).await;
    let old = before.rpc.pid.unwrap();
    signal(old, nix::sys::signal::Signal::SIGKILL);
    let after = w
        .wait_for(KEY, 10, "a restarted rpc-server up", |s| {
            s.rpc.up && s.rpc.starts == before.rpc.starts + 1
        })
        .await;
    assert_ne!(after.rpc.pid, Some(old));
    assert!(after.rpc.pid.is_some_and(alive), "{after:?}");
    assert!(!alive(old), "the killed rpc-server {old} lingers");
    let last = after.rpc.last_exit.unwrap_or_default();
    assert!(last.starts_with("child_killed") && last.contains("SIGKILL"), "{last}");
}

/// A worker killed outright (SIGKILL, no cleanup of its own) leaves no
/// rpc-server behind.
#[actix_rt::test]
async fn a_killed_worker_leaves_no_orphan() {
    let Some(rpc) = rpc_server() else { return };
    let mut w = start(&rpc, free_port(), &[], Some(KEY)).await;
    let s = w.wait_for(KEY, 10, "rpc-server up", |s| s.rpc.up).await;
    let child = s.rpc.pid.unwrap();
    signal(w.pid(), nix::sys::signal::Signal::SIGKILL);
    let _ = w.child.wait().await;
    assert!(wait_gone(child, 10).await, "rpc-server {child} outlived its worker");
}

/// A taken rpc port is a coded `last_exit` with `up: false`, the status
/// still answers, and the retries back off instead of hammering.
#[actix_rt::test]
async fn a_taken_rpc_port_is_reported_not_hammered() {
    let Some(rpc) = rpc_server() else { return };
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let w = start(&rpc, port, &[], Some(KEY)).await;
    let t0 = Instant::now();
    let s = w
        .wait_for(KEY, 10, "a port_in_use last_exit", |s| {
            s.rpc.last_exit.as_deref().is_some_and(|e| e.starts_with("port_in_use"))
        })
        .await;
    let last = s.rpc.last_exit.clone().unwrap();
    assert!(last.contains(&format!(":{port}")), "{last}");
    // The squatter accepts connects, yet rpc-server is never taken for up.
    for _ in 0..30 {
        let s = w.status(KEY).await;
        assert!(!s.rpc.up, "up while another process holds the port: {s:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = w.status(KEY).await;
    // Backoff 0.5 s, 1 s, 2 s, ...: at most a handful of starts in this time.
    let secs = t0.elapsed().as_secs_f64();
    assert!(
        s.rpc.starts >= 2 && s.rpc.starts <= 5,
        "{} starts in {secs:.1} s",
        s.rpc.starts
    );
    drop(squatter);
}

/// Bound beyond loopback, the worker warns that rpc-server is unauthenticated.
#[actix_rt::test]
async fn a_public_bind_warns() {
    let Some(rpc) = rpc_server() else { return };
    let w = start(&rpc, free_port(), &["--host", "0.0.0.0"], Some(KEY)).await;
    w.wait_for(KEY, 10, "rpc-server up", |s| s.rpc.up).await;
    let err = w.stderr();
    assert!(
        err.contains("WARN") && err.contains("no authentication or encryption"),
        "no warning on stderr:\n{err}"
    );
}

/// SIGTERM stops the worker with status 0, and its rpc-server with it.
#[actix_rt::test]
async fn sigterm_stops_the_worker_and_its_rpc_server() {
    let Some(rpc) = rpc_server() else { return };
    let mut w = start(&rpc, free_port(), &[], Some(KEY)).await;
    let s = w.wait_for(KEY, 10, "rpc-server up", |s| s.rpc.up).await;
    let child = s.rpc.pid.unwrap();
    signal(w.pid(), nix::sys::signal::Signal::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(15), w.child.wait())
        .await
        .expect("the worker exits within 15 s")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(!alive(child), "rpc-server {child} outlived a SIGTERMed worker");
}
