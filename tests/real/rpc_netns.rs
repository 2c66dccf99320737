//! A worker on an address of its own: a network namespace joined to this
//! one by a veth pair stands for another machine on the LAN. The worker
//! binds that address (and warns, rpc-server having no authentication),
//! the warden splits over it and a loopback worker, and then the link is
//! cut mid-stream: no reset reaches anyone, only timeouts, and the turn
//! still ends with `worker_lost` naming it.

use crate::support;

use std::time::Duration;

use support::split::{Rig, WORKER_RAM, greedy, interrupt_mid_stream, shares, status, warden};
use support::workers::{KEY, Place, start_at};
use support::{MemCgroup, missing};

/// A network namespace joined to this one by a veth pair: the worker's
/// machine at 10.231.N.2, this side 10.231.N.1 (/30). Removed on drop.
struct NetNs {
    name: String,
    host_if: String,
    peer: String,
}

impl NetNs {
    /// Sets it up; fails the test, naming the step, where it cannot (not
    /// root, or no `ip`).
    fn new() -> Self {
        let n = std::process::id() % 250 + 1;
        let ns = NetNs {
            name: format!("lw-rpc-{n}"),
            host_if: format!("lwh{n}"),
            peer: format!("10.231.{n}.2"),
        };
        let peer_if = format!("lwp{n}");
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), ns.name.clone()],
            vec![
                "link".into(),
                "add".into(),
                ns.host_if.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                peer_if.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                peer_if.clone(),
                "netns".into(),
                ns.name.clone(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("10.231.{n}.1/30"),
                "dev".into(),
                ns.host_if.clone(),
            ],
            vec!["link".into(), "set".into(), ns.host_if.clone(), "up".into()],
            vec![
                "-n".into(),
                ns.name.clone(),
                "addr".into(),
                "add".into(),
                format!("{}/30", ns.peer),
                "dev".into(),
                peer_if.clone(),
            ],
            vec![
                "-n".into(),
                ns.name.clone(),
                "link".into(),
                "set".into(),
                peer_if,
                "up".into(),
            ],
            vec![
                "-n".into(),
                ns.name.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
        ];
        for s in steps {
            let ok = std::process::Command::new("ip")
                .args(&s)
                .status()
                .is_ok_and(|st| st.success());
            if !ok {
                missing(&format!(
                    "a network namespace: `ip {}` failed (run as root, with iproute2)",
                    s.join(" ")
                ));
            }
        }
        ns
    }

    /// Cuts the link: packets vanish, nothing resets (a pulled cable).
    fn cut(&self) {
        let st = std::process::Command::new("ip")
            .args(["link", "set", &self.host_if, "down"])
            .status()
            .unwrap();
        assert!(st.success());
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A worker on its own address (a namespace behind a veth pair), bound to
/// that address with the warning it owes; the link is then cut mid-stream:
/// no reset reaches anyone, the watch's readings time out, and the turn
/// still ends with `worker_lost` naming it.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 and ggml-rpc-server (./build-llama.sh) and root (memory cgroups, a network namespace); ./test.sh runs it"]
async fn a_worker_cut_off_by_the_network_is_lost_without_any_reset() {
    let rig = Rig::new(1).await;
    let ns = NetNs::new();
    let group = MemCgroup::new("llm-warden-rpcns", WORKER_RAM);
    let place = Place {
        group: Some(&group),
        netns: Some(&ns.name),
    };
    let far = start_at(place, &rig.rpc, 50053, 50052, &["--host", &ns.peer], Some(KEY)).await;
    assert_eq!(far.addr(), format!("{}:50053", ns.peer));
    // The warning is written to stderr before the address is announced on
    // stdout, but the two pipes are read apart: wait for it, bounded.
    support::wait::poll_until(
        "the worker's warning about its open address",
        Duration::from_secs(10),
        || far.stderr().contains("no authentication or encryption"),
        || far.stderr(),
    )
    .await;
    let addrs = format!("{},{}", rig.addrs(), far.addr());
    // why: the loss's own error is under test, not the turn going on
    let (_w, base) = warden(&addrs, &[("WARDEN_RESUME_TURNS", "0")]).await;
    far.wait_for(KEY, 20, "rpc-server up", |s| s.rpc.up).await;
    assert!(!greedy(&base, 4).await.is_empty());
    assert_eq!(shares(&status(&base).await).len(), 3);
    // No reset comes, so only the watch can tell: the stream ends with
    // `worker_lost` (`interrupt_mid_stream` fails if it stays silent for
    // 30 s, far below TCP's own retransmission timeout of minutes).
    let (err, secs) = interrupt_mid_stream(&base, || ns.cut()).await;
    eprintln!("worker_lost {secs:.3} s after the cut");
    assert_eq!(err["code"], "worker_lost", "{err}");
    assert!(err["message"].as_str().unwrap().contains(&far.addr()), "{err}");
    // The next request goes on without it.
    assert!(!greedy(&base, 4).await.is_empty());
    assert_eq!(shares(&status(&base).await).len(), 2);
    drop(far);
}
