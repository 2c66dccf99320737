//! Closing the connection of a client that stopped reading its answer.
//!
//! The engine already lets such a turn go after `WARDEN_CLIENT_STALL_TIMEOUT_S`
//! (`actors::engine::outbox`), but the connection itself would stay open:
//! actix writes a response body only as fast as the socket drains, and it has
//! no write timeout, so a client that never reads again would hold the socket,
//! its buffers and a connection slot until it went away. Here every response
//! body the warden streams is watched: once actix has not asked for the next
//! piece for the stall bound while one was ready, *and* the engine is done
//! with the turn (it finished, or its own stall rule let the turn go and said
//! so), the socket is shut down, which fails actix's pending write and ends
//! the connection. Waiting for the engine keeps one decision, the engine's,
//! about whether a turn stalled.
//!
//! The socket is reached through a duplicate of its descriptor taken while the
//! request is being handled (so the number is certainly the connection's);
//! shutting a duplicate down shuts the socket down for every holder, and
//! dropping it closes only the duplicate. The duplicate is dropped the moment
//! the body ends (a socket with a descriptor still open is not released, so
//! holding it longer would delay the FIN of a connection actix closes).
//! Portable: the descriptor is a Unix file descriptor or a Windows socket
//! handle, duplicated and shut down through `socket2` (`fcntl` with
//! `F_DUPFD_CLOEXEC` on Unix, `WSADuplicateSocketW` on Windows).

use std::any::Any;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::dev::Extensions;
use bytes::Bytes;
use futures::Stream;
use tokio::time::Instant;

use crate::warden::TurnWatch;

/// The send buffer asked for on every client socket (the kernel doubles it
/// for its own bookkeeping). What a client that stops reading can hold back
/// is this plus actix's write buffer plus the turn's event channel; without
/// it Linux grows a loopback socket's buffer to megabytes, so a stalled
/// client pinned that much kernel memory per connection and was noticed only
/// after hundreds of kilobytes. 64 KiB still streams tokens and whole answers
/// at full speed (a token event is ~200 bytes).
pub const CLIENT_SEND_BUFFER_BYTES: usize = 64 * 1024;

/// The platform's raw socket: a file descriptor on Unix, a socket handle on
/// Windows.
#[cfg(unix)]
type RawSock = std::os::fd::RawFd;
#[cfg(windows)]
type RawSock = std::os::windows::io::RawSocket;

/// The connection's socket, stored by `on_connect`.
#[derive(Debug, Clone, Copy)]
struct ConnSock(RawSock);

/// `sock`'s raw socket.
fn raw_of(sock: &actix_web::rt::net::TcpStream) -> RawSock {
    #[cfg(unix)]
    return std::os::fd::AsRawFd::as_raw_fd(sock);
    #[cfg(windows)]
    return std::os::windows::io::AsRawSocket::as_raw_socket(sock);
}

/// actix-web's connection hook: bounds the socket's send buffer and keeps its
/// descriptor for `watch`.
pub fn on_connect(conn: &dyn Any, ext: &mut Extensions) {
    if let Some(sock) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
        let _ = socket2::SockRef::from(sock).set_send_buffer_size(CLIENT_SEND_BUFFER_BYTES);
        ext.insert(ConnSock(raw_of(sock)));
    }
}

/// A duplicate of one connection's socket.
struct Closer(socket2::Socket);

impl Closer {
    /// Duplicates the socket of the connection `req` arrived on.
    fn of(req: &HttpRequest) -> Option<Self> {
        let raw = req.conn_data::<ConnSock>()?.0;
        // SAFETY: `raw` is the socket of the connection this request is being
        // handled on, open for at least as long as the handler runs (this
        // call is inside the handler); it is only borrowed to duplicate it,
        // and the duplicate is ours.
        #[cfg(unix)]
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
        #[cfg(windows)]
        let borrowed = unsafe { std::os::windows::io::BorrowedSocket::borrow_raw(raw) };
        socket2::SockRef::from(&borrowed).try_clone().ok().map(Self)
    }

    /// Shuts the socket down both ways: actix's next write fails and the
    /// connection ends; the client sees the stream cut (an error, when it
    /// was already closed, is harmless).
    fn shut_down(&self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

/// What the watchdog knows of a body's progress.
#[derive(Debug)]
struct Progress {
    start: Instant,
    /// Milliseconds from `start` to the last piece actix took.
    last_taken_ms: AtomicU64,
    /// The body is waiting on its source (the engine), not on the client.
    waiting: AtomicBool,
    /// The body ended or was dropped.
    done: AtomicBool,
    /// Wakes the watchdog when `done` is set.
    ended: tokio::sync::Notify,
}

impl Progress {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn end(&self) {
        self.done.store(true, Ordering::Release);
        self.ended.notify_one();
    }
}

/// A response body whose client must keep taking it.
pub struct Watched<S> {
    inner: S,
    progress: Arc<Progress>,
}

/// Wraps `body` so that its connection is closed once the client has taken
/// nothing for `bound` while a piece was ready for it and `turn` is done
/// (`None`: the body's source is already complete).
pub fn watch<S>(req: &HttpRequest, body: S, bound: Duration, turn: Option<TurnWatch>) -> Watched<S>
where
    S: Stream<Item = Result<Bytes, actix_web::Error>>,
{
    let progress = Arc::new(Progress {
        start: Instant::now(),
        last_taken_ms: AtomicU64::new(0),
        waiting: AtomicBool::new(false),
        done: AtomicBool::new(false),
        ended: tokio::sync::Notify::new(),
    });
    if let Some(closer) = Closer::of(req) {
        actix_web::rt::spawn(watchdog(closer, progress.clone(), bound, turn));
    }
    Watched { inner: body, progress }
}

/// Checks a body's progress a few times per bound until it ends.
async fn watchdog(closer: Closer, p: Arc<Progress>, bound: Duration, turn: Option<TurnWatch>) {
    let tick = (bound / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let bound_ms = bound.as_millis() as u64;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = p.ended.notified() => return,
        }
        if p.done.load(Ordering::Acquire) {
            return;
        }
        let idle_ms = p.now_ms().saturating_sub(p.last_taken_ms.load(Ordering::Acquire));
        let engine_done = turn.as_ref().is_none_or(TurnWatch::engine_done);
        if !p.waiting.load(Ordering::Acquire) && idle_ms >= bound_ms && engine_done {
            tracing::info!(
                idle_ms,
                "a client took nothing of its answer for {bound:?} (WARDEN_CLIENT_STALL_TIMEOUT_S); closing its connection"
            );
            closer.shut_down();
            return;
        }
    }
}

impl<S> Stream for Watched<S>
where
    S: Stream<Item = Result<Bytes, actix_web::Error>> + Unpin,
{
    type Item = Result<Bytes, actix_web::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let p = self.progress.clone();
        match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Pending => {
                p.waiting.store(true, Ordering::Release);
                Poll::Pending
            }
            Poll::Ready(Some(item)) => {
                p.last_taken_ms.store(p.now_ms(), Ordering::Release);
                p.waiting.store(false, Ordering::Release);
                Poll::Ready(Some(item))
            }
            Poll::Ready(None) => {
                p.end();
                Poll::Ready(None)
            }
        }
    }
}

impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        self.progress.end();
    }
}

/// A whole body as a stream of pieces, so a client that stops reading a
/// large answer is noticed like one that stops reading a stream.
pub fn pieces(body: Bytes) -> impl Stream<Item = Result<Bytes, actix_web::Error>> + Unpin {
    const PIECE: usize = 16 * 1024;
    let n = body.len().div_ceil(PIECE).max(1);
    futures::stream::iter((0..n).map(move |i| Ok(body.slice(i * PIECE..((i + 1) * PIECE).min(body.len())))))
}
