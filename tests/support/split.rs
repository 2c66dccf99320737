//! The rig of the split tests (tests/real/rpc_split.rs, tests/real/rpc_netns.rs):
//! workers in memory cgroups of their own, a warden binary over them, and
//! the status and answer one-liners.

use std::time::{Duration, Instant};

use super::workers::{KEY, Place, Worker, free_port, rpc_server, start_at};
use super::{MemCgroup, SMOLLM2, json_of, real_llama_server, real_model};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Each worker's machine: a 512 MiB memory cgroup.
pub const WORKER_RAM: u64 = 512 << 20;
/// The prompt every greedy comparison asks.
pub const PROMPT: &str = "List three facts about the planet Mars.";

/// Workers in their own cgroups, dropped after the workers.
pub struct Rig {
    pub workers: Vec<Worker>,
    pub groups: Vec<MemCgroup>,
    pub rpc: std::path::PathBuf,
}

impl Rig {
    /// `n` workers; fails the test, naming what is missing, without the
    /// real build, the model or cgroups.
    pub async fn new(n: usize) -> Self {
        let (rpc, _, _) = (rpc_server(), real_llama_server(), real_model(SMOLLM2));
        let mut rig = Rig {
            workers: Vec::new(),
            groups: Vec::new(),
            rpc,
        };
        for i in 0..n {
            rig.groups
                .push(MemCgroup::new(&format!("llm-warden-rpc{i}"), WORKER_RAM));
            rig.start(i, 0).await;
        }
        rig
    }

    /// Starts worker `i` in its group on status port `port` (0: any).
    pub async fn start(&mut self, i: usize, port: u16) {
        let place = Place {
            group: Some(&self.groups[i]),
            netns: None,
        };
        let w = start_at(place, &self.rpc, port, free_port(), &[], Some(KEY)).await;
        w.wait_for(KEY, 20, "rpc-server up", |s| s.rpc.up).await;
        if i < self.workers.len() {
            self.workers[i] = w;
        } else {
            self.workers.push(w);
        }
    }

    pub fn addrs(&self) -> String {
        self.workers.iter().map(Worker::addr).collect::<Vec<_>>().join(",")
    }
}

/// A warden binary over `workers` (comma list, may be empty) with `envs`.
pub async fn warden(workers: &str, envs: &[(&str, &str)]) -> (tokio::process::Child, String) {
    let mut all = vec![
        ("WARDEN_WORKERS", workers),
        ("WARDEN_WORKER_KEY", KEY),
        ("RUST_LOG", "warn,llm_warden=info"),
    ];
    all.extend_from_slice(envs);
    // Its log goes to the test's output (read_listen_url forwards stderr).
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-warden"))
        .args(["serve", "--port", "0"])
        .envs(all)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the warden binary starts");
    let base = super::read_listen_url(&mut child).await;
    (child, base)
}

/// A greedy, non-streamed answer's text.
pub async fn greedy(base: &str, max_tokens: u32) -> String {
    let v = json_of(
        http()
            .post(format!("{base}/v1/chat/completions"))
            .json(&serde_json::json!({
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": max_tokens,
                "temperature": 0,
            })),
    )
    .await;
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer: {v}"))
        .to_string()
}

pub fn http() -> reqwest::Client {
    llm_warden::child::client::shared_http_client()
}

pub async fn status(base: &str) -> serde_json::Value {
    json_of(http().get(format!("{base}/warden/status"))).await
}

/// The live child's shares: `(device, layers, output)`.
pub fn shares(s: &serde_json::Value) -> Vec<(String, u64, bool)> {
    s["workers"]["split"]["split"]["shares"]
        .as_array()
        .unwrap_or_else(|| panic!("no split in {s}"))
        .iter()
        .map(|x| {
            (
                x["name"].as_str().unwrap().to_string(),
                x["layers"].as_u64().unwrap(),
                x["output"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Waits for the warden's status to satisfy `ok` (up to `secs`).
pub async fn status_until(
    base: &str,
    secs: u64,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = status(base).await;
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what} within {secs} s; status: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Streams a long greedy answer, calls `interrupt` (a worker's kill, a cut
/// link) after its tenth event, and returns the stream's error (its
/// `error` object) and the seconds from the interruption to it (a figure to
/// print). A stream silent for 30 s fails the test: a hang.
pub async fn interrupt_mid_stream(base: &str, interrupt: impl FnOnce()) -> (serde_json::Value, f64) {
    use futures::StreamExt;
    let resp = http()
        .post(format!("{base}/v1/chat/completions"))
        .json(&serde_json::json!({
            "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
            "max_tokens": 3000,
            "temperature": 0,
            "stream": true,
        }))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let (mut text, mut events) = (String::new(), 0);
    let (mut interrupt, mut at) = (Some(interrupt), None::<Instant>);
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), body.next())
        .await
        .expect("the stream moves or ends")
    {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(end) = text.find("\n\n") {
            let ev: String = text.drain(..end + 2).collect();
            let Some(data) = ev.trim().strip_prefix("data: ") else {
                continue;
            };
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(data)
                && v.get("error").is_some()
            {
                let t = at
                    .expect("an error only after the interruption")
                    .elapsed()
                    .as_secs_f64();
                return (v["error"].clone(), t);
            }
            events += 1;
            if events == 10
                && let Some(f) = interrupt.take()
            {
                f();
                at = Some(Instant::now());
            }
        }
    }
    panic!("the stream ended without an error after the interruption");
}
