//! What the client subcommands (`status`, `ps`, `load`, `unload`, `models`)
//! share: which server (`--url`, `WARDEN_URL`, else the first llm-warden on
//! 27182-27199 via `chat::find_server`), the key (`WARDEN_API_KEY`), and
//! turning every failure into a sentence that says what to do.

use std::time::Duration;

use anyhow::bail;
use clap::Args;
use serde_json::Value;

/// The client subcommands' own HTTP client to a warden: never through a
/// proxy (the warden is on this machine, and a proxy variable must not
/// send its key elsewhere), no Nagle delay on a streamed answer. The CLI
/// is a client of the warden's HTTP API like any other, so it does not
/// borrow the engine's client to its children.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .build()
        // Building fails only when the TLS backend cannot initialise; this
        // client has no TLS at all.
        .expect("a plain-HTTP reqwest client always builds")
}

/// The options every client subcommand takes.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The server's base URL (default: the first llm-warden answering on
    /// 127.0.0.1:27182-27199).
    #[arg(long, env = "WARDEN_URL")]
    pub url: Option<String>,
    /// Print the server's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A quick read (status, models) gets this long; a load waits for the
/// model (the server bounds it with `WARDEN_LOAD_TIMEOUT_S`).
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// One llm-warden server, reached over HTTP.
pub struct Server {
    base: String,
    key: Option<String>,
}

impl Server {
    /// The server `args` name, or the first one found on the port pool.
    pub async fn find(args: &ServerArgs) -> anyhow::Result<Self> {
        let base = match &args.url {
            Some(u) => normalise_url(u),
            None => match super::chat::find_server(None).await {
                Some(b) => b,
                None => bail!(
                    "no llm-warden server is running on 127.0.0.1:27182-27199 (start one with `llm-warden serve`, or point --url / WARDEN_URL at one)"
                ),
            },
        };
        let key = std::env::var("WARDEN_API_KEY").ok().filter(|k| !k.is_empty());
        Ok(Self { base, key })
    }

    /// The server at `base`, asked with `key`.
    pub fn at(base: String, key: Option<String>) -> Self {
        Self { base, key }
    }

    /// Its base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The key it is asked with.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// `GET path`'s JSON.
    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let req = http_client().get(self.url(path)).timeout(READ_TIMEOUT);
        self.send(req, "GET", path).await
    }

    /// `POST path` with `body`'s JSON; waits as long as the server takes.
    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let req = http_client().post(self.url(path)).json(body);
        self.send(req, "POST", path).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, mut req: reqwest::RequestBuilder, method: &str, path: &str) -> anyhow::Result<Value> {
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() => bail!(
                "no llm-warden server is running on {} (start one with `llm-warden serve`)",
                self.base
            ),
            Err(e) if e.is_timeout() => bail!("{} did not answer {method} {path} in time", self.base),
            Err(e) => bail!("{method} {}: {e}", self.url(path)),
        };
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        if (200..300).contains(&status)
            && let Ok(v) = serde_json::from_str(&text)
        {
            return Ok(v);
        }
        bail!(
            "{}",
            describe_failure(
                &self.base,
                &format!("{method} {path}"),
                status,
                &text,
                self.key.is_some()
            )
        )
    }
}

/// `--url` as typed: `localhost:27182` gets `http://`, a trailing slash
/// goes (the paths are appended).
pub fn normalise_url(u: &str) -> String {
    let u = u.trim().trim_end_matches('/');
    if u.contains("://") {
        u.to_string()
    } else {
        format!("http://{u}")
    }
}

/// What a person should read for an answer that is not the JSON wanted:
/// a 401 says which variable to set, an llm-warden error its message and
/// code, anything else that the URL may not be an llm-warden.
pub fn describe_failure(base: &str, what: &str, status: u16, body: &str, key_sent: bool) -> String {
    let err = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").cloned());
    let field = |k: &str| {
        err.as_ref()
            .and_then(|e| e.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if status == 401 {
        return if key_sent {
            format!("{base} refused the API key (401): set WARDEN_API_KEY to the key the server was started with")
        } else {
            format!("{base} requires an API key (401): set WARDEN_API_KEY to the server's key")
        };
    }
    match (field("message"), field("code")) {
        (Some(message), code) => format!(
            "{what} failed (HTTP {status}, {}): {message}",
            code.as_deref().unwrap_or("no code")
        ),
        (None, _) if (200..300).contains(&status) => {
            format!("{base} answered {what} with something other than JSON: is it an llm-warden server?")
        }
        (None, _) => format!("{base} answered {what} with HTTP {status}: is it an llm-warden server?"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each failure reads as what to do about it.
    #[test]
    fn failures_say_what_to_do() {
        let b = "http://127.0.0.1:27182";
        let err = r#"{"error":{"message":"no model 'x' (ids: a, b)","type":"invalid_request_error","code":"model_not_found"}}"#;
        let rows: &[(u16, &str, bool, &str)] = &[
            // why: no key sent: name the variable
            (401, "", false, "requires an API key (401): set WARDEN_API_KEY"),
            // why: a key sent and refused: it is the wrong one
            (
                401,
                "",
                true,
                "refused the API key (401): set WARDEN_API_KEY to the key",
            ),
            // why: an llm-warden error: its message and code, as the server wrote them
            (
                404,
                err,
                false,
                "POST /warden/load failed (HTTP 404, model_not_found): no model 'x' (ids: a, b)",
            ),
            // why: not the warden's error shape: the URL is probably wrong
            (
                404,
                "<html>nope</html>",
                false,
                "answered POST /warden/load with HTTP 404: is it an llm-warden",
            ),
            (200, "<html>hi</html>", false, "something other than JSON"),
        ];
        for (i, (status, body, key, want)) in rows.iter().enumerate() {
            let got = describe_failure(b, "POST /warden/load", *status, body, *key);
            assert!(got.contains(want), "row {i}: {got:?} lacks {want:?}");
        }
    }

    /// A URL typed without scheme or with a trailing slash still works.
    #[test]
    fn urls_are_normalised() {
        for (i, (given, want)) in [
            ("localhost:27182", "http://localhost:27182"),
            ("http://127.0.0.1:27183/", "http://127.0.0.1:27183"),
            (" https://h.example ", "https://h.example"),
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(normalise_url(given), *want, "row {i}");
        }
    }
}
