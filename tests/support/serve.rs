//! Serving a warden over HTTP in a test: its routes in-process
//! (`serve_http`), or the `llm-warden serve` binary as a child
//! (`spawn_warden_binary`), a JSON one-liner, and a POST of a JSON body
//! answered with its status and JSON (`post`, `post_with` for headers).
use std::time::Duration;

use llm_warden::Warden;

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
    let url = read_announced(child, "llm-warden listening on ", "the warden").await;
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

/// The URL a started `who` prints on stdout after `prefix` (waiting up to
/// 30 s); its stdout keeps draining afterwards, so it never blocks on a
/// full pipe.
pub async fn read_announced(child: &mut tokio::process::Child, prefix: &str, who: &str) -> String {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(u) = l.strip_prefix(prefix) {
                return u.trim().to_string();
            }
        }
        panic!("{who} exited before listening");
    })
    .await
    .unwrap_or_else(|_| panic!("{who} listens within 30 s"));
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    url
}

/// `llm-warden serve --port 0 ARGS` inside the memory cgroup `group` (the
/// warden and its children in it), the brake sampling every second, its
/// log at info on stderr; the process and its base URL once it listens.
pub async fn spawn_warden_in_group(
    group: &super::procs::MemCgroup,
    args: &str,
    envs: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    let script = format!(
        "{} {} serve --port 0 {args}",
        group.enter(),
        env!("CARGO_BIN_EXE_llm-warden")
    );
    let mut warden = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .env("WARDEN_BRAKE_TICK_S", "1")
        .env("RUST_LOG", "llm_warden=info")
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = read_listen_url(&mut warden).await;
    (warden, base)
}

/// POSTs `body` as JSON to `base` + `path`: the status and the JSON answer
/// (`Null` when the answer is not JSON).
pub async fn post(base: &str, path: &str, body: impl serde::Serialize) -> (u16, serde_json::Value) {
    post_with(base, path, body, &[]).await
}

/// `post` with extra request headers.
pub async fn post_with(
    base: &str,
    path: &str,
    body: impl serde::Serialize,
    headers: &[(&str, &str)],
) -> (u16, serde_json::Value) {
    let mut r = reqwest::Client::new().post(format!("{base}{path}")).json(&body);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}
