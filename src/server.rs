//! The `llm-warden` HTTP server: the warden's routes on actix-web, bound to
//! 127.0.0.1 unless told otherwise, on the first free port of 27182-27199
//! unless one is given. Used by the binary and by tests.
//!
//! Connections: at most `WARDEN_MAX_CONNECTIONS` (4096) open at once, split
//! over the workers; more wait in the listen backlog. A connection that sends
//! no request head within `CLIENT_REQUEST_TIMEOUT` is closed (an idle-socket
//! flood empties itself), a request body is bounded in time
//! (`WARDEN_BODY_TIMEOUT_S`), and an answer its client stops reading is cut
//! (`http::stall`). The process's soft limit on open files is raised to its
//! hard limit at bind, so the connection limit, not EMFILE, is what a flood
//! meets (many desktops start processes with a soft limit of 1024).
//!
//! Middleware, outermost first: CORS (`http::cors`, only with configured
//! origins), then the key check (`http::auth`), then the routes.

use std::net::TcpListener;

use actix_web::dev::Server;
use actix_web::middleware::from_fn;
use actix_web::{App, HttpServer, web};

use crate::http;
use crate::warden::Warden;

/// The warden's own port pool (below both child pools).
pub const WARDEN_PORTS: std::ops::RangeInclusive<u16> = 27182..=27199;
/// How long a new connection may take to send its request head; actix's own
/// default, kept explicit because the idle-socket defence rests on it.
const CLIENT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// File descriptors kept out of the connection budget: the child's pipes
/// and sockets, the logs, the sensors' /proc reads.
const FD_RESERVE: u64 = 256;

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
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let fds = raise_open_file_limit();
    let mut max = warden.config().max_connections;
    if let Some(fds) = fds
        && (max as u64) + FD_RESERVE > fds
    {
        let fit = fds.saturating_sub(FD_RESERVE).max(workers as u64) as usize;
        tracing::warn!(
            "the open-file limit ({fds}) holds only {fit} connections; serving at most {fit} instead of {max} (raise `ulimit -n`)"
        );
        max = fit;
    }
    let origins = warden.config().cors_origins.clone();
    if http::cors::allows_any(&origins) {
        tracing::warn!(
            "CORS origin `*`: any web page open in a browser that can reach this server can drive it (list the origins you trust instead)"
        );
    } else if !origins.is_empty() {
        tracing::info!(origins = %origins.join(", "), "CORS: browser pages from these origins may call the server");
    }
    let data = web::Data::new(warden);
    let guard = web::Data::new(http::origin::Guard {
        loopback: http::origin::is_loopback_bind(host),
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(guard.clone())
            .wrap(from_fn(http::auth::require_key))
            // Before the key: an uninvited page or a rebinding Host is
            // refused whatever it presents (`http::origin`).
            .wrap(from_fn(http::origin::guard))
            // In actix the last `wrap` is outermost: CORS answers a
            // preflight before the key check (browsers never send the key
            // on one) and adds its headers to a 401 too.
            .wrap(http::cors::layer(&origins))
            .configure(http::configure)
            .default_service(web::to(http::errors::not_found))
    })
    .on_connect(http::stall::on_connect)
    // Without it (actix keeps the OS default, Nagle on), a token event
    // written right after the previous one waited for the client's ACK:
    // measured +4.5 to +8.3 ms of time to first token against llama-server
    // direct (bench `pairs`), +0.4 ms with it.
    .tcp_nodelay(true)
    .workers(workers)
    .max_connections(max.div_ceil(workers))
    .client_request_timeout(CLIENT_REQUEST_TIMEOUT)
    .shutdown_timeout(SHUTDOWN_GRACE_S)
    // The caller handles SIGINT/SIGTERM: actix-server's own handling stops
    // the whole actix System, which would drop the engine before it can stop
    // the child gracefully.
    .disable_signals()
    .listen(listener)?
    .run();
    Ok(Bound { server, port })
}

/// Raises the soft open-file limit to the hard one; the limit now in force.
#[cfg(unix)]
fn raise_open_file_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    Some(lim.rlim_cur)
}

#[cfg(not(unix))]
fn raise_open_file_limit() -> Option<u64> {
    None
}
