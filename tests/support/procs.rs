//! Looking at processes from outside: a live process's environment, whether
//! it is alive or a zombie, whether a port listens, and a memory cgroup a
//! test makes for one.
use std::path::PathBuf;
use std::time::Duration;

/// The environment of a live process.
pub fn environ(pid: u32) -> Vec<(String, String)> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let s = String::from_utf8_lossy(kv);
            let (k, v) = s.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// One variable of a live process's environment.
pub fn env_of(pid: u32, name: &str) -> Option<String> {
    environ(pid).into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// Whether a process is alive (not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits until `pid` is gone (or a zombie), up to `secs`.
pub async fn wait_gone(pid: u32, secs: u64) -> bool {
    for _ in 0..(secs * 20) {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    !alive(pid)
}

/// Whether anything listens on 127.0.0.1:`port` (TIME_WAIT connections a
/// dead child leaves do not count: a new server binds over them).
pub fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3
                && cols[3] == "0A"
                && cols[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)
        })
    })
}

/// One side of an established IPv4 TCP connection, as `/proc/net/tcp` shows
/// it: its ports and the bytes its queues hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSide {
    pub local_port: u16,
    pub remote_port: u16,
    /// Written here and not yet taken by the other side (`tx_queue`).
    pub unsent: u64,
    /// Arrived here and not yet read (`rx_queue`).
    pub unread: u64,
}

/// Every established IPv4 TCP connection of this network namespace, each
/// side apart (a loopback connection shows twice).
pub fn tcp_sides() -> Vec<TcpSide> {
    let port = |addr: &str| addr.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() < 5 || cols[3] != "01" {
                return None;
            }
            let (tx, rx) = cols[4].split_once(':')?;
            Some(TcpSide {
                local_port: port(cols[1])?,
                remote_port: port(cols[2])?,
                unsent: u64::from_str_radix(tx, 16).ok()?,
                unread: u64::from_str_radix(rx, 16).ok()?,
            })
        })
        .collect()
}

/// A memory cgroup (v1 or v2) the test made, removed (after its processes
/// are gone) on drop.
pub struct MemCgroup {
    /// The group's directory.
    pub dir: PathBuf,
    /// Whether it is a cgroup v1 group (else v2).
    pub v1: bool,
}

impl MemCgroup {
    /// Creates `<prefix>-<pid>` under the v1 memory controller, else under
    /// the v2 hierarchy, limited to `limit` bytes; fails the (real) test
    /// where neither is writable (not root).
    #[track_caller]
    pub fn new(prefix: &str, limit: u64) -> Self {
        let name = format!("{prefix}-{}", std::process::id());
        for (root, file, v1) in [
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", true),
            ("/sys/fs/cgroup", "memory.max", false),
        ] {
            let dir = PathBuf::from(root).join(&name);
            if std::fs::create_dir(&dir).is_ok() {
                if std::fs::write(dir.join(file), limit.to_string()).is_ok() {
                    return Self { dir, v1 };
                }
                let _ = std::fs::remove_dir(&dir);
            }
        }
        super::real::missing(&format!(
            "a memory cgroup: neither /sys/fs/cgroup/memory nor /sys/fs/cgroup takes {name} (run as root)"
        ))
    }

    /// The OOM kills inside the group so far.
    pub fn oom_kills(&self) -> u64 {
        let f = if self.v1 { "memory.oom_control" } else { "memory.events" };
        llm_warden::sensors::ram::parse_oom_kill(&std::fs::read_to_string(self.dir.join(f)).unwrap_or_default())
            .unwrap_or(0)
    }

    /// `sh -c` prefix that moves the shell into the group.
    pub fn enter(&self) -> String {
        format!("echo $$ > {}/cgroup.procs && exec", self.dir.display())
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
