//! Port picking for the child: the first port of the engine's pool that is
//! not leased to another child of this process and that a listener can bind
//! on 127.0.0.1 right now, skipping ports a failed spawn already proved taken.
//!
//! A lease lasts as long as its child: two engines in one process (tests, an
//! application embedding two wardens) never race for one port. Another
//! process can still take a port between our probe and the child's bind; the
//! child then dies with `couldn't bind HTTP server socket` (or the readiness
//! ping reaches the other server and gets 401), and the engine retries on the
//! next port (`SPAWN_PORT_ATTEMPTS` times).

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::RangeInclusive;
use std::sync::Mutex;

/// Spawns tried on successive ports when the child reports its port taken.
pub const SPAWN_PORT_ATTEMPTS: usize = 5;

/// Ports leased to live children of this process.
static LEASED: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A port held for one child; released on drop.
#[derive(Debug)]
pub struct PortLease {
    port: u16,
}

impl PortLease {
    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        if let Ok(mut g) = LEASED.lock()
            && let Some(set) = g.as_mut()
        {
            set.remove(&self.port);
        }
    }
}

/// Whether a server could bind `port` on loopback now, the way llama-server
/// (cpp-httplib) and uvicorn bind: with `SO_REUSEADDR`, so the TIME_WAIT
/// connections a dead child leaves on its port do not count as taken.
fn bindable(port: u16) -> bool {
    use socket2::{Domain, Socket, Type};
    let Ok(s) = Socket::new(Domain::IPV4, Type::STREAM, None) else {
        return false;
    };
    #[cfg(unix)]
    if s.set_reuse_address(true).is_err() {
        return false;
    }
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    s.bind(&addr.into()).is_ok() && s.listen(1).is_ok()
}

/// Whether another socket holds `port` on loopback now: a load that exited
/// on it failed to bind even when its output was lost (`Hints::port_held`).
pub fn held_elsewhere(port: u16) -> bool {
    !bindable(port)
}

/// Leases the first port of `pool` not in `skip`, not leased, and bindable now.
pub fn pick_port(pool: RangeInclusive<u16>, skip: &[u16]) -> Option<PortLease> {
    // The lock only guards the set; a poisoned lock still holds a valid set.
    let mut g = LEASED.lock().unwrap_or_else(|p| p.into_inner());
    let leased = g.get_or_insert_with(HashSet::new);
    let port = pool
        .into_iter()
        .filter(|p| !skip.contains(p) && !leased.contains(p))
        .find(|&p| bindable(p))?;
    leased.insert(port);
    Some(PortLease { port })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn skips_bound_leased_and_listed_ports() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let pool = port..=port.saturating_add(4);
        let a = pick_port(pool.clone(), &[port + 1]).unwrap();
        assert!(a.port() != port && a.port() != port + 1, "got {}", a.port());
        let b = pick_port(pool.clone(), &[port + 1]).unwrap();
        assert_ne!(a.port(), b.port(), "a leased port is not handed out twice");
        let a_port = a.port();
        drop(a);
        assert_eq!(pick_port(a_port..=a_port, &[]).map(|l| l.port()), Some(a_port));
        assert!(pick_port(port..=port, &[]).is_none());
        assert!(held_elsewhere(port));
        drop(held);
        assert!(!held_elsewhere(port), "a port nobody holds is free");
    }
}
