//! Diagnostic: the cheapest possible extra hop. A transparent TCP relay
//! (`tokio::io::copy_bidirectional`, one thread with its own current-thread
//! runtime, `TCP_NODELAY` both ways) in front of the direct llama-server.
//! The warm pairs phase run against it (direct vs relay) shows what any
//! process-external hop costs in decode rate and TTFT on this machine, so
//! the warden's own figures can be split into "a hop at all" and "the
//! warden's relay design" (HTTP parsing, the engine actor, the per-turn
//! brake samples, two threads per token).

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

/// Starts a relay to `upstream` on a free loopback port; returns the port.
/// The relay's thread lives until the harness exits.
pub fn spawn(upstream: SocketAddr) -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    std::thread::Builder::new().name("relay".into()).spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime builds");
        rt.block_on(async move {
            let Ok(l) = TcpListener::from_std(listener) else { return };
            while let Ok((mut client, _)) = l.accept().await {
                tokio::spawn(async move {
                    let Ok(mut up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = up.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                });
            }
        });
    })?;
    Ok(port)
}
