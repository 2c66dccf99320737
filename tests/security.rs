//! Security, against the real llama-server through the `llm-warden` binary:
//! - the per-spawn key never appears in any log line (RUST_LOG=trace, the
//!   child at `-lv 5`, which prints the key's last four characters at trace
//!   level), in an HTTP answer (status, models, chat, errors, a crash's
//!   `raw`), or on a command line; two spawns get two different keys;
//! - the child's environment is the allow-list plus the key: none of the
//!   warden's secrets (`WARDEN_API_KEY`, a cloud token) reach it;
//! - the child binds 127.0.0.1 only.

mod support;

use std::time::Duration;

use support::*;
use tokio::io::AsyncReadExt;

fn cmdline(pid: u32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()).replace('\0', " ")
}

/// Addresses the child listens on.
fn listen_addrs(port: u16) -> Vec<String> {
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            let (addr, p) = c.get(1)?.split_once(':')?;
            (c.get(3) == Some(&"0A") && u16::from_str_radix(p, 16).ok() == Some(port)).then(|| addr.to_string())
        })
        .collect()
}

#[actix_rt::test]
async fn the_key_never_leaks_and_the_child_env_is_explicit() {
    let (Some(_), Some(_)) = (real_llama_server(), real_model(SMOLLM2)) else {
        return;
    };
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-warden"));
    cmd.args(["serve", "--port", "0"])
        .env("RUST_LOG", "trace")
        .env("WARDEN_CHILD_VERBOSITY", "5")
        .env("WARDEN_API_KEY", "warden-secret-token")
        .env("AWS_SECRET_ACCESS_KEY", "cloud-secret")
        .env("LLAMA_ARG_CTX_SIZE", "16")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut warden = cmd.spawn().unwrap();
    // stdout carries only the `listening on` line; the logs go to stderr,
    // captured whole.
    let stdout = warden.stdout.take().unwrap();
    let mut stderr = warden.stderr.take().unwrap();
    let log_err = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let listen_line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let base = listen_line
        .strip_prefix("llm-warden listening on ")
        .expect("the listen line")
        .trim()
        .to_string();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let auth = |r: reqwest::RequestBuilder| r.bearer_auth("warden-secret-token");
    let mut bodies = String::new();
    let s: serde_json::Value = json_of(auth(http.post(format!("{base}/warden/load")))).await;
    let pid = s["child_pid"].as_u64().unwrap() as u32;
    let port = s["port"].as_u64().unwrap() as u16;
    let env = environ(pid);
    let key = env
        .iter()
        .find(|(k, _)| k == "LLAMA_API_KEY")
        .map(|(_, v)| v.clone())
        .expect("the key is in the child's env");
    assert_eq!(key.len(), 64, "256 bits, hex");
    // The environment is the allow-list plus the key.
    for (k, _) in &env {
        assert!(
            [
                "PATH",
                "HOME",
                "USER",
                "TMPDIR",
                "LANG",
                "LC_ALL",
                "LC_CTYPE",
                "TZ",
                "LD_LIBRARY_PATH",
                "LLAMA_API_KEY",
                "OMP_NUM_THREADS"
            ]
            .contains(&k.as_str())
                || k.starts_with("GGML_")
                || k.starts_with("NVIDIA_"),
            "{k} leaked into the child's environment"
        );
    }
    assert_eq!(listen_addrs(port), ["0100007F"], "the child binds 127.0.0.1 only");
    assert!(!cmdline(pid).contains(&key), "the key is on the child's command line");
    assert!(!cmdline(warden.id().unwrap()).contains(&key));
    // Everything a client can see.
    for path in ["/warden/status", "/v1/models", "/warden/logs?lines=200"] {
        bodies.push_str(
            &auth(http.get(format!("{base}{path}")))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        );
    }
    let chat = |stream: bool, model: &str| serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": stream});
    for (stream, model) in [
        (true, "SmolLM2-135M-Instruct.Q4_1"),
        (false, "SmolLM2-135M-Instruct.Q4_1"),
        (true, "nope"),
    ] {
        let r = auth(
            http.post(format!("{base}/v1/chat/completions"))
                .json(&chat(stream, model)),
        )
        .send()
        .await
        .unwrap();
        bodies.push_str(&r.text().await.unwrap());
    }
    // A crash: its error carries the child's tail as `raw`.
    let mut r = auth(
        http.post(format!("{base}/v1/chat/completions"))
            .json(&serde_json::json!({
                "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 500, "stream": true
            })),
    )
    .send()
    .await
    .unwrap();
    let first = r.chunk().await.unwrap().unwrap();
    bodies.push_str(&String::from_utf8_lossy(&first));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    while let Ok(Some(c)) = r.chunk().await {
        bodies.push_str(&String::from_utf8_lossy(&c));
    }
    assert!(bodies.contains("\"raw\""), "the crash's error carries raw");
    // A second spawn gets another key.
    let s: serde_json::Value = json_of(auth(http.post(format!("{base}/warden/load")))).await;
    let pid2 = s["child_pid"].as_u64().unwrap() as u32;
    let key2 = env_of(pid2, "LLAMA_API_KEY").unwrap();
    assert_ne!(key, key2, "a key per spawn");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(warden.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(20), warden.wait()).await;
    let logs = format!("{listen_line}\n{}", log_err.await.unwrap());
    assert!(
        logs.contains("llm_warden::child"),
        "the child's own output was logged (trace)"
    );
    assert!(logs.lines().count() > 100, "a full trace log");
    for k in [&key, &key2] {
        let last4 = &k[k.len() - 4..];
        assert!(!logs.contains(k.as_str()), "the key is in the log");
        assert!(
            !logs.contains(&format!("****{last4}")),
            "the key's suffix is in the log"
        );
        assert!(!bodies.contains(k.as_str()), "the key is in an HTTP answer");
    }
    assert!(
        !logs.contains("warden-secret-token"),
        "the warden's own token is in the log"
    );
    assert!(!bodies.contains("warden-secret-token"));
}

/// A page from another site cannot drive a loopback warden (a form-like
/// POST needs no preflight), and a page whose name was rebound to
/// 127.0.0.1 is told apart by its Host; the dashboard's own same-site
/// requests and clients without an Origin pass.
#[actix_rt::test]
async fn uninvited_pages_and_rebound_hosts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", serde_json::json!({}));
    let w = TestWarden::fake(dir.path()).start();
    let base = serve_http(&w);
    let port = base.rsplit(':').next().unwrap().to_string();
    let http = reqwest::Client::new();
    let chat = |origin: Option<String>, host: Option<String>| {
        let mut r = http
            .post(format!("{base}/v1/chat/completions"))
            .header("Content-Type", "text/plain")
            .body(r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}"#);
        if let Some(o) = origin {
            r = r.header("Origin", o);
        }
        if let Some(h) = host {
            r = r.header("Host", h);
        }
        r.send()
    };
    let mut ev = w.subscribe();
    let r = chat(Some("https://evil.example".into()), None).await.unwrap();
    assert_eq!(r.status(), 403);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "cross_origin_refused");
    let r = chat(None, Some(format!("evil.example:{port}"))).await.unwrap();
    assert_eq!(r.status(), 403);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "host_refused");
    assert!(ev.try_recv().is_err(), "no turn ran for either");
    let r = chat(Some(format!("http://127.0.0.1:{port}")), None).await.unwrap();
    assert_eq!(r.status(), 200, "the same site (the dashboard) passes");
    let r = chat(None, None).await.unwrap();
    assert_eq!(r.status(), 200, "a client without an Origin passes");
    w.shutdown().await;
}
