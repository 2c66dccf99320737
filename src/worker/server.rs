//! The worker's HTTP endpoint: `GET /worker/status` → `WorkerStatus` as
//! JSON, behind the worker's key (`Authorization: Bearer <key>`, compared in
//! constant time; anything else is a 401 in the OpenAI error shape the
//! warden's own routes use). The warden reads it before each load and polls
//! it (~200 ms) to notice a lost worker, so a request only reads the
//! supervisor's `watch` and samples memory, never waits on rpc-server.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::Server;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use tokio::sync::watch;

use super::devices::Sampler;
use super::supervisor::RpcView;
use crate::secret::ApiKey;
use crate::error::ApiError;
use crate::http::errors::{error_response, not_found};
use crate::rpc::build::BuildInfo;
use crate::rpc::status::{STATUS_PATH, WorkerBuild, WorkerStatus};

/// Two workers: one request at a time is the normal load (one warden); the
/// second keeps a slow client from holding up the warden's watch.
const HTTP_WORKERS: usize = 2;
/// How long a stopping server lets a status request finish, seconds.
const SHUTDOWN_GRACE_S: u64 = 1;

/// What a status request reads.
pub struct StatusSource {
    pub build: BuildInfo,
    pub rpc: watch::Receiver<RpcView>,
    pub sampler: Arc<Sampler>,
    pub key: ApiKey,
}

impl StatusSource {
    /// The status now.
    pub fn snapshot(&self) -> WorkerStatus {
        let view = self.rpc.borrow().clone();
        let (devices, pressure) = self.sampler.sample(&view.devices);
        WorkerStatus {
            build: WorkerBuild {
                llama_cpp: self.build.llama_cpp.clone(),
                rpc_protocol: view.protocol,
                flavour: self.build.flavour.clone(),
            },
            rpc: view.state,
            devices,
            pressure,
        }
    }
}

/// A bound, not yet running, status server.
pub struct Bound {
    /// Run it with `.await`, stop it with its handle.
    pub server: Server,
    /// The port it listens on (the one asked for, or the OS's pick for 0).
    pub port: u16,
}

/// Binds the status endpoint on `host:port`.
pub fn bind(host: &str, port: u16, source: StatusSource) -> std::io::Result<Bound> {
    let listener = TcpListener::bind((host, port))?;
    let port = listener.local_addr()?.port();
    let data = web::Data::new(source);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route(STATUS_PATH, web::get().to(status))
            .default_service(web::to(not_found))
    })
    .workers(HTTP_WORKERS)
    .shutdown_timeout(SHUTDOWN_GRACE_S)
    // The worker handles SIGINT/SIGTERM itself: rpc-server must be stopped
    // before the System goes.
    .disable_signals()
    .listen(listener)?
    .run();
    Ok(Bound { server, port })
}

async fn status(req: HttpRequest, source: web::Data<StatusSource>) -> HttpResponse {
    if !authorized(&req, &source.key) {
        return error_response(&unauthorized());
    }
    HttpResponse::Ok().json(source.snapshot())
}

/// Whether the request carries `Authorization: Bearer <key>`.
fn authorized(req: &HttpRequest, key: &ApiKey) -> bool {
    let given = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or_default();
    key.matches(given)
}

/// The 401: names where the key lives, never the key.
fn unauthorized() -> ApiError {
    ApiError {
        status: 401,
        message: "missing or wrong worker key (Authorization: Bearer <the worker's WARDEN_WORKER_KEY, or the key in its worker.key file>)".into(),
        kind: "invalid_request_error",
        code: "invalid_worker_key".into(),
        param: None,
        raw: None,
    }
}
