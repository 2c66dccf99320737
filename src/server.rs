//! The `llm-warden` HTTP server: the warden's routes on actix-web, bound to
//! 127.0.0.1 unless told otherwise, on the first free port of 27182-27199
//! unless one is given. Used by the binary and by tests.

use std::net::TcpListener;

use actix_web::dev::Server;
use actix_web::middleware::from_fn;
use actix_web::{App, HttpServer, web};

use crate::http;
use crate::warden::Warden;

/// The warden's own port pool (below both child pools).
pub const WARDEN_PORTS: std::ops::RangeInclusive<u16> = 27182..=27199;
/// How long a stopping server lets in-flight requests finish (streams are
/// ended by the engine's shutdown right after).
const SHUTDOWN_GRACE_S: u64 = 2;

/// A bound, not yet running, server.
pub struct Bound {
    /// The server future (run it with `.await`, stop it with its handle).
    pub server: Server,
    /// The port it listens on.
    pub port: u16,
}

/// Binds the server for `warden` on `host` (`port`, or the first free one of
/// the pool; `Some(0)` lets the OS choose).
pub fn bind(warden: Warden, host: &str, port: Option<u16>) -> std::io::Result<Bound> {
    let listener = match port {
        Some(p) => TcpListener::bind((host, p))?,
        None => WARDEN_PORTS
            .clone()
            .find_map(|p| TcpListener::bind((host, p)).ok())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::AddrInUse, "no free port in 27182-27199"))?,
    };
    let port = listener.local_addr()?.port();
    let data = web::Data::new(warden);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .wrap(from_fn(http::auth::require_key))
            .configure(http::configure)
            .default_service(web::to(http::errors::not_found))
    })
    .shutdown_timeout(SHUTDOWN_GRACE_S)
    // The caller handles SIGINT/SIGTERM: actix-server's own handling stops
    // the whole actix System, which would drop the engine before it can stop
    // the child gracefully.
    .disable_signals()
    .listen(listener)?
    .run();
    Ok(Bound { server, port })
}
