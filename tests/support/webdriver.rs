//! A minimal W3C WebDriver client over Debian's chromedriver and headless
//! Chromium: enough to load a page, type, click, run a check in the page,
//! read the browser console and take a screenshot. Real browser, real
//! events; no framework in between.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

/// The element reference key of the W3C protocol.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session and the driver process behind it.
pub struct Browser {
    driver: tokio::process::Child,
    url: String,
    http: reqwest::Client,
}

/// The first Chromium on `PATH` (Debian's `chromium`, others' names); fails
/// the test without one (./test.sh installs Debian's).
pub fn chromium() -> PathBuf {
    on_path(&["chromium", "chromium-browser", "google-chrome"]).unwrap_or_else(|| {
        super::missing(
            "Chromium on PATH: chromium, chromium-browser or google-chrome (Debian: apt-get install chromium; ./test.sh installs it)",
        )
    })
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names
        .iter()
        .flat_map(|n| std::env::split_paths(&path).map(move |d| d.join(n)))
        .find(|p| p.is_file())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session; fails the test
    /// when either is missing (./test.sh installs Debian's).
    pub async fn start() -> Self {
        let chromium = chromium();
        let Some(driver_bin) = on_path(&["chromedriver"]) else {
            super::missing("chromedriver on PATH (Debian: apt-get install chromium-driver; ./test.sh installs it)");
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port for chromedriver")
            .port();
        // Its own process group, which the browser it starts inherits: a
        // test that panics before `quit` still takes both down (`Drop`).
        let driver = tokio::process::Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        for _ in 0..100 {
            if http.get(format!("{base}/status")).send().await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,1150", "--hide-scrollbars"],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let r: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("chromedriver answers")
            .json()
            .await
            .unwrap();
        let id = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {r}"))
            .to_string();
        Self {
            driver,
            url: format!("{base}/session/{id}"),
            http,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut r = self.http.request(method, format!("{}{path}", self.url));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let v: Value = r.send().await.unwrap().json().await.unwrap();
        if let Some(e) = v["value"].get("error") {
            panic!("webdriver {path}: {e}: {}", v["value"]["message"]);
        }
        v["value"].clone()
    }

    /// Navigates to `url`.
    pub async fn go(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// Runs `script` in the page (`return ...;`) and gives its value.
    pub async fn eval(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Waits until `script` returns a truthy value; panics with `what` after
    /// `secs`.
    pub async fn wait_for(&self, what: &str, script: &str, secs: u64) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.eval(script).await;
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v.as_str() != Some("") && v.as_f64() != Some(0.0);
            if truthy {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for {what} (last value {v})");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The element `css` selects.
    pub async fn find(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT].as_str().expect("an element reference").to_string()
    }

    /// Types `text` into the element `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Clicks the element `css` selects.
    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.call(reqwest::Method::POST, &format!("/element/{e}/click"), Some(json!({})))
            .await;
    }

    /// The browser console's entries since the last call (chromedriver's
    /// log endpoint), each `{level, message}`.
    pub async fn console(&self) -> Vec<Value> {
        self.call(reqwest::Method::POST, "/se/log", Some(json!({"type": "browser"})))
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        let v = self.call(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 PNG"))
            .unwrap()
    }

    /// Ends the session and the driver.
    pub async fn quit(mut self) {
        let _ = self.http.delete(&self.url).send().await;
        let _ = self.driver.kill().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self.driver.id() {
            // SAFETY: signals the driver's own process group (set at spawn).
            unsafe {
                libc::killpg(pid as libc::pid_t, libc::SIGKILL);
            }
        }
    }
}
