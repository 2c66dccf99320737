//! CORS (`serve --cors-origin`, `WARDEN_CORS_ORIGINS`):
//! - in a real headless Chromium, a page on an allowed origin lists the
//!   models and gets a chat answer from the real SmolLM2 with the API key
//!   (a preflighted request), reads a 401 and the notices header, while the
//!   same page on another origin fails every fetch (TypeError) and runs no
//!   turn;
//! - through `server::bind`'s real middleware stack: a preflight is answered
//!   without the key, a 401 carries the CORS headers, another origin gets
//!   none, and without configured origins no CORS header is ever sent.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::Method;
use support::*;

const KEY: &str = "cors-test-key";

/// A free loopback port for a page's origin, bound now so that the warden
/// can be told the origin before the page (which names the warden) exists.
fn page_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Serves `html` for every request on `listener` (a second origin for the
/// page); the thread lives as long as the test process.
fn serve_page(listener: TcpListener, html: String) {
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{html}",
                html.len()
            );
            let _ = conn.write_all(reply.as_bytes());
        }
    });
}

/// A page that calls the warden at `base` and writes what it saw, as JSON,
/// into `<pre id="out">`: the models (with the key), a 4-token chat (with
/// the key and a JSON body, so the browser preflights it) and a request
/// without the key (a 401).
fn page(base: &str) -> String {
    format!(
        r#"<!doctype html><html><body><pre id="out">pending</pre><script>
const W = "{base}", K = "{KEY}";
async function probe(out, name, url, init, read) {{
  try {{ const r = await fetch(W + url, init); out[name + "_status"] = r.status; await read(r, out); }}
  catch (e) {{ out[name + "_error"] = String(e); }}
}}
(async () => {{
  const out = {{}};
  const auth = {{ Authorization: "Bearer " + K }};
  await probe(out, "models", "/v1/models", {{ headers: auth }},
    async (r, o) => {{ o.models = (await r.json()).data.map(m => m.id); }});
  await probe(out, "chat", "/v1/chat/completions", {{
      method: "POST",
      headers: {{ ...auth, "Content-Type": "application/json" }},
      body: JSON.stringify({{ messages: [{{ role: "user", content: "Say hello." }}], max_tokens: 4, temperature: 0 }}),
    }},
    async (r, o) => {{ o.chat = (await r.json()).choices[0].message.content; o.notices = r.headers.get("X-Warden-Notices"); }});
  await probe(out, "nokey", "/warden/status", {{}},
    async (r, o) => {{ o.nokey_code = (await r.json()).error.code; }});
  document.getElementById("out").textContent = JSON.stringify(out);
}})();
</script></body></html>"#
    )
}

/// Opens `url` in headless Chromium and returns what the page wrote, parsed.
async fn run_page(chromium: &PathBuf, url: &str) -> serde_json::Value {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(chromium);
    cmd.args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        // Virtual time stands still while a fetch is pending, so the budget
        // bounds the page's own timers, not the model's answer.
        .args(["--virtual-time-budget=60000", "--dump-dom", url])
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .expect("chromium dumps the page within 180 s")
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    let text = dom
        .split_once(r#"<pre id="out">"#)
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .map(|(t, _)| t.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
        .unwrap_or_else(|| panic!("no result in the page; chromium {}: {dom}", out.status));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("the page wrote {text:?}: {e}"))
}

/// A page on the allowed origin reaches the model through the browser's
/// CORS checks (with the key, preflighted), reads a 401 and the notices; the
/// same page on another origin fails every fetch and runs no turn.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh) and Chromium; ./test.sh runs it"]
async fn a_browser_page_on_the_allowed_origin_chats_and_another_is_refused() {
    let (server, _) = (real_llama_server(), real_model(SMOLLM2));
    let chromium = support::webdriver::chromium();
    let (allowed, allowed_port) = page_listener();
    let (denied, denied_port) = page_listener();
    let origin = format!("http://127.0.0.1:{allowed_port}");
    let server = server.display().to_string();
    let (_warden, base) = spawn_warden_binary_with(
        &["--cors-origin", &origin],
        &[("WARDEN_API_KEY", KEY), ("WARDEN_LLAMA_SERVER", &server)],
    )
    .await;
    serve_page(allowed, page(&base));
    serve_page(denied, page(&base));

    let seen = run_page(&chromium, &format!("{origin}/")).await;
    assert_eq!(seen["models_status"], 200, "{seen}");
    assert!(seen["models"].as_array().is_some_and(|m| !m.is_empty()), "{seen}");
    assert_eq!(seen["chat_status"], 200, "{seen}");
    assert!(seen["chat"].as_str().is_some_and(|c| !c.is_empty()), "{seen}");
    // The first turn loaded the model: its notice is readable only because
    // the header is exposed.
    assert!(
        seen["notices"].as_str().is_some_and(|n| n.contains("loading")),
        "{seen}"
    );
    assert_eq!(seen["nokey_status"], 401, "a 401 must carry CORS headers: {seen}");
    assert_eq!(seen["nokey_code"], "invalid_api_key", "{seen}");

    let seen = run_page(&chromium, &format!("http://127.0.0.1:{denied_port}/")).await;
    for name in ["models", "chat", "nokey"] {
        let err = seen[format!("{name}_error")].as_str().unwrap_or("");
        assert!(
            err.starts_with("TypeError"),
            "{name} from another origin must fail: {seen}"
        );
    }
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let status = json_of(http.get(format!("{base}/warden/status")).bearer_auth(KEY)).await;
    assert_eq!(status["turns"], 1, "only the allowed page's turn ran: {status}");
}

/// A warden over the fake child (no model is loaded by these requests)
/// with the key and `origins`, served by `server::bind`'s real stack.
fn fake_rig(origins: &[&str]) -> (llm_warden::Warden, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", serde_json::json!({}));
    let cfg = llm_warden::WardenConfig {
        api_key: Some(KEY.into()),
        cors_origins: origins.iter().map(|o| o.to_string()).collect(),
        ..test_config()
    };
    let w = TestWarden::fake(dir.path()).config(cfg).start();
    let base = serve_http(&w);
    (w, base, dir)
}

/// One request with `origin`, optionally as the preflight of a keyed POST.
async fn send(base: &str, method: Method, path: &str, origin: &str, preflight: bool) -> reqwest::Response {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut r = http.request(method, format!("{base}{path}")).header("Origin", origin);
    if preflight {
        r = r.header("Access-Control-Request-Method", "POST").header(
            "Access-Control-Request-Headers",
            "authorization,content-type,x-warden-conversation",
        );
    }
    r.send().await.unwrap()
}

fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers().get(name).map(|v| v.to_str().unwrap().to_string())
}

const PAGE: &str = "http://localhost:5173";

/// CORS sits outside the key check: the preflight is answered without the
/// key, a 401 carries the CORS headers, another origin gets neither an
/// answer nor a header, and a client sending no Origin is unaffected.
#[actix_rt::test]
async fn preflight_needs_no_key_and_a_401_carries_cors_headers() {
    let (w, base, _dir) = fake_rig(&[PAGE]);
    let r = send(&base, Method::OPTIONS, "/v1/chat/completions", PAGE, true).await;
    assert_eq!(r.status(), 200, "the preflight is answered without the key");
    assert_eq!(header(&r, "access-control-allow-origin").as_deref(), Some(PAGE));
    assert_eq!(header(&r, "access-control-max-age").as_deref(), Some("3600"));
    let allowed = header(&r, "access-control-allow-headers").unwrap_or_default();
    for h in [
        "authorization",
        "content-type",
        "x-warden-conversation",
        "x-warden-turn",
        "x-warden-keep-alive",
        // why: Anthropic's SDK in a page sends its key and version so
        "x-api-key",
        "anthropic-version",
        // why: both official JavaScript SDKs add their telemetry headers
        "x-stainless-retry-count",
    ] {
        assert!(allowed.contains(h), "{h} not allowed: {allowed}");
    }

    let r = send(&base, Method::GET, "/warden/status", PAGE, false).await;
    assert_eq!(r.status(), 401);
    assert_eq!(header(&r, "access-control-allow-origin").as_deref(), Some(PAGE));
    let exposed = header(&r, "access-control-expose-headers").unwrap_or_default();
    let mut exposed: Vec<&str> = exposed.split(',').map(str::trim).collect();
    exposed.sort_unstable();
    assert_eq!(exposed, ["retry-after", "x-warden-notices"]);

    for preflight in [true, false] {
        let method = if preflight { Method::OPTIONS } else { Method::GET };
        let r = send(&base, method, "/v1/models", "http://evil.example", preflight).await;
        assert_eq!(r.status(), 400, "another origin is refused (preflight: {preflight})");
        assert_eq!(header(&r, "access-control-allow-origin"), None);
    }

    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let r = http
        .get(format!("{base}/v1/models"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "a client without Origin (curl, SDKs) is unaffected");
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    w.shutdown().await;
}

/// With no origin configured (the default) no CORS header is ever sent,
/// and `*` answers any origin with `*`.
#[actix_rt::test]
async fn no_origins_send_no_cors_headers_and_star_admits_any() {
    let (w, base, _dir) = fake_rig(&[]);
    for (method, preflight) in [(Method::OPTIONS, true), (Method::GET, false)] {
        let r = send(&base, method, "/v1/models", PAGE, preflight).await;
        let cors: Vec<_> = r
            .headers()
            .keys()
            .filter(|k| k.as_str().starts_with("access-control-"))
            .collect();
        assert!(cors.is_empty(), "no CORS header without origins, got {cors:?}");
    }
    w.shutdown().await;

    let (w, base, _dir) = fake_rig(&["*"]);
    let r = send(
        &base,
        Method::OPTIONS,
        "/v1/chat/completions",
        "http://anything.example",
        true,
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "access-control-allow-origin").as_deref(), Some("*"));
    w.shutdown().await;
}
