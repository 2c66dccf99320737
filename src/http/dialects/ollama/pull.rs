//! `POST /api/pull` for hub models: `hf.co/ORG/NAME[:QUANT]` (Ollama's own
//! spelling of a Hugging Face model) or `ORG/NAME[:QUANT]`. The warden
//! fetches the GGUF into the hub's cache as `llm-warden pull` does
//! (`catalog::pull`), then reads its catalog again, so the model is served
//! once the pull says `success`.
//!
//! Streamed by default, as Ollama streams it: NDJSON lines `pulling
//! manifest`, then for each file `pulling FILE` with `digest`, `total` and
//! `completed` (at most every `EVERY`, and when it ends), then `success`;
//! a failure after the first line is an `{"error": ...}` line.
//! `"stream": false` answers once. A model the warden already serves (its
//! id, an alias, `name:latest`) answers `success` at once, as Ollama does
//! for a model it has; a name of Ollama's own registry (`llama3.2`) is
//! refused with what to do instead.

use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpResponse, web};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::error_response;
use crate::catalog::pull::{Failed, Progress, PullError, Puller, Wanted, parse};
use crate::error::ApiError;
use crate::warden::Warden;

/// The most often a progress line is sent for one file.
const EVERY: Duration = Duration::from_millis(250);

/// What the download tells the stream.
#[derive(Debug)]
enum Step {
    /// A file starts: its name and size.
    File(String, u64),
    /// Bytes of it arrived.
    Bytes(u64),
}

/// The download's progress, sent to the stream.
#[derive(Clone)]
struct Tell(mpsc::UnboundedSender<Step>);

impl Progress for Tell {
    async fn init(&mut self, size: usize, filename: &str) {
        let _ = self.0.send(Step::File(filename.to_string(), size as u64));
    }

    async fn update(&mut self, size: usize) {
        let _ = self.0.send(Step::Bytes(size as u64));
    }

    async fn finish(&mut self) {}
}

/// `POST /api/pull`.
pub async fn pull(warden: web::Data<Warden>, body: web::Bytes) -> HttpResponse {
    // A model the warden already serves is there, as Ollama answers a
    // pull of a model it has: clients pull before they use a model.
    if let Ok((name, stream)) = named(&body)
        && super::resolve(&warden, Some(&name)).is_ok()
    {
        return if stream {
            let lines = [json!({"status": "pulling manifest"}), json!({"status": "success"})];
            let body: Vec<u8> = lines.iter().flat_map(|l| line(l).to_vec()).collect();
            HttpResponse::Ok().content_type("application/x-ndjson").body(body)
        } else {
            HttpResponse::Ok().json(json!({"status": "success"}))
        };
    }
    let (want, stream) = match read(&body) {
        Ok(v) => v,
        Err(e) => return error_response(&e),
    };
    let puller = match Puller::from_env(false) {
        Ok((p, _)) => Arc::new(p),
        Err(e) => {
            return error_response(&refusal(PullError {
                kind: Failed::Hub,
                message: e,
            }));
        }
    };
    let ram = crate::sensors::ram::ram_total(warden.config().ram_override_bytes).bytes;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let warden = warden.into_inner();
    let job = {
        let (warden, want) = (warden.clone(), want.clone());
        actix_web::rt::spawn(async move {
            let pulled = puller.pull_with(&want, ram, Some(Tell(tx))).await?;
            // Served now, not at the next watch.
            let _ = warden.reload().await;
            Ok::<_, PullError>(pulled)
        })
    };
    if !stream {
        // Whatever the client does, the pull runs to its end.
        while rx.recv().await.is_some() {}
        return match job.await {
            Ok(Ok(_)) => HttpResponse::Ok().json(json!({"status": "success"})),
            Ok(Err(e)) => error_response(&refusal(e)),
            Err(_) => error_response(&refusal(PullError {
                kind: Failed::Hub,
                message: "the pull stopped".into(),
            })),
        };
    }
    let lines = async_stream(move |out| async move {
        out.send(line(&json!({"status": "pulling manifest"}))).await;
        let mut file: Option<(String, u64, u64)> = None;
        let mut said = tokio::time::Instant::now();
        while let Some(step) = rx.recv().await {
            match step {
                Step::File(name, total) => {
                    if let Some(f) = file.take() {
                        out.send(progress_line(&f)).await;
                    }
                    file = Some((name, total, 0));
                    out.send(progress_line(file.as_ref().expect("just set"))).await;
                }
                Step::Bytes(n) => {
                    if let Some(f) = file.as_mut() {
                        f.2 += n;
                        if said.elapsed() >= EVERY {
                            said = tokio::time::Instant::now();
                            out.send(progress_line(f)).await;
                        }
                    }
                }
            }
        }
        if let Some(f) = &file {
            out.send(progress_line(f)).await;
        }
        let end = match job.await {
            Ok(Ok(_)) => json!({"status": "success"}),
            Ok(Err(e)) => json!({"error": e.message}),
            Err(_) => json!({"error": "the pull stopped"}),
        };
        out.send(line(&end)).await;
    });
    HttpResponse::Ok().content_type("application/x-ndjson").streaming(lines)
}

/// The body's model name and whether to stream.
fn named(body: &[u8]) -> Result<(String, bool), ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid("invalid_json", format!("the request body is not valid JSON: {e}"), None))?;
    let name = ["model", "name"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::invalid("invalid_value", "'model' must name the model to pull", Some("model")))?;
    Ok((
        name.to_string(),
        v.get("stream").and_then(Value::as_bool).unwrap_or(true),
    ))
}

/// The body's hub model and whether to stream.
fn read(body: &[u8]) -> Result<(Wanted, bool), ApiError> {
    let (name, stream) = named(body)?;
    let name = name.as_str();
    let want = parse(name).map_err(|_| {
        ApiError::invalid(
            "invalid_value",
            format!(
                "llm-warden pulls GGUF models from the Hugging Face hub, not from Ollama's registry: name one as hf.co/ORG/NAME[:QUANT] (e.g. hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M), or put a .gguf file in its models directory; '{name}' is not such a name"
            ),
            Some("model"),
        )
    })?;
    Ok((want, stream))
}

/// A failed pull, unstreamed, as an error response.
fn refusal(e: PullError) -> ApiError {
    let status = match e.kind {
        Failed::NotThere => 404,
        Failed::NeedsToken => 401,
        Failed::DoesNotFit | Failed::NoModel => 400,
        Failed::Hub => 502,
    };
    ApiError {
        status,
        message: e.message,
        kind: "invalid_request_error",
        code: "pull_failed".into(),
        param: Some("model".into()),
        raw: None,
    }
}

fn progress_line((name, total, done): &(String, u64, u64)) -> Bytes {
    line(&json!({"status": format!("pulling {name}"), "digest": name, "total": total, "completed": done}))
}

fn line(v: &Value) -> Bytes {
    let mut b = serde_json::to_vec(v).expect("a JSON value serializes");
    b.push(b'\n');
    Bytes::from(b)
}

/// Lines sent through `out` from `make`'s future, as a response body.
fn async_stream<F, Fut>(make: F) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>>
where
    F: FnOnce(Out) -> Fut,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    actix_web::rt::spawn(make(Out(tx)));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (Ok(b), rx)) })
}

/// Where the stream's lines go.
struct Out(mpsc::Sender<Bytes>);

impl Out {
    /// Sends one line (a client gone away drops it: the pull goes on).
    async fn send(&self, b: Bytes) {
        let _ = self.0.send(b).await;
    }
}
