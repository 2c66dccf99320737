//! Decisions on RPC workers' readings: whether a worker's build may join a
//! load, when a worker counts as lost, which devices a reading offers the
//! split law, and how a worker's pressure enters the brake.
//!
//! - Build: the worker's rpc-server must be the warden's llama.cpp build
//!   (the `BUILD_INFO` tag build-llama.sh writes), and its RPC protocol the
//!   one the warden's build speaks (`BUILD_INFO`'s `rpc_protocol` line
//!   against the version rpc-server announces; a build older than that
//!   line is judged by its tag alone). llama.cpp's RPC handshake refuses a
//!   protocol mismatch only with an abort inside llama-server; comparing
//!   first turns it into a clear error before any spawn. A worker whose
//!   build cannot be told (no `BUILD_INFO`) is refused too: "probably the
//!   same" is how an abort mid-load happens.
//! - Lost: two failed readings in a row (a refused connection or a timeout
//!   at the 200 ms poll: lost within a second), or a reading taken after
//!   the child's plan whose rpc-server is down or is another process than
//!   the one the child connected to (its pid or start count changed: the
//!   supervisor restarted it, or the whole worker was restarted; the
//!   child's connection died with the old process). A reading from before
//!   the plan says nothing of the child's connection.
//! - Pressure: the worst level over the local machine and every worker in
//!   use; when a worker's is the worst, the brake's "is it ours" test
//!   weighs that worker's KV share against that worker's memory.
//!
//! Pure: readings come in as arguments.

use super::brake::{Level, WindowFacts};
use super::split::{self, Device};
use super::worker_status::{DeviceKind, WorkerBuild, WorkerStatus};

/// Failed readings in a row that make a worker lost.
pub const LOST_AFTER_MISSES: u32 = 2;

/// Why a worker's build may not join a load, or `Ok`.
pub fn check_build(worker: &str, ours: &WorkerBuild, theirs: &WorkerBuild) -> Result<(), String> {
    let tag = |b: &WorkerBuild| b.llama_cpp.clone().unwrap_or_else(|| "an unknown build".into());
    match (&ours.llama_cpp, &theirs.llama_cpp) {
        (Some(a), Some(b)) if a == b => {}
        _ => {
            return Err(format!(
                "worker {worker} runs llama.cpp {} but this warden runs {}: build the same version there (./build-llama.sh) or leave the worker out",
                tag(theirs),
                tag(ours)
            ));
        }
    }
    match (&ours.rpc_protocol, &theirs.rpc_protocol) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "worker {worker} speaks RPC protocol {b} but this warden's llama-server speaks {a}"
        )),
        _ => Ok(()),
    }
}

/// The rpc-server process a child connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Joined {
    /// Its pid.
    pub pid: Option<u32>,
    /// The worker's start count of it.
    pub starts: u64,
}

/// Whether a worker is lost: `misses` failed readings in a row, the last
/// good `reading`, the rpc-server the child `joined`, and whether the
/// reading was taken after the child's plan.
pub fn is_lost(misses: u32, reading: Option<&WorkerStatus>, joined: Option<Joined>, after_plan: bool) -> bool {
    if watch_lost(misses) {
        return true;
    }
    let (Some(r), true) = (reading, after_plan) else {
        return false;
    };
    !r.rpc.up || joined.is_some_and(|j| j.pid != r.rpc.pid || j.starts != r.rpc.starts)
}

/// Whether the watch's misses alone call a worker lost, whatever it read
/// before: a load leaves such a worker out even when it answers the load's
/// own (slower) reading.
pub fn watch_lost(misses: u32) -> bool {
    misses >= LOST_AFTER_MISSES
}

/// The devices a worker's reading offers, named `ADDR/DEVICE`, each with
/// its rule's limit (host RAM: 0.75 × its total; a GPU: the CUDA ceiling).
pub fn devices_of(addr: &str, status: &WorkerStatus) -> Vec<Device> {
    status
        .devices
        .iter()
        .map(|d| Device {
            name: format!("{addr}/{}", d.name),
            limit_bytes: match d.kind {
                DeviceKind::Cpu => split::ram_limit(d.total_bytes),
                DeviceKind::Cuda => split::vram_limit(d.total_bytes, d.free_bytes),
                // No rule for its memory: no layers (it keeps its place in
                // llama-server's numbering with a zero split).
                DeviceKind::Other => 0,
            },
        })
        .collect()
}

/// One worker's part in a brake sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerPressure {
    /// Its level (`None`: unreadable there).
    pub level: Option<Level>,
    /// Its machine's memory.
    pub total_bytes: u64,
    /// KV bytes per window token on its devices.
    pub kv_per_token: u64,
}

/// The level and window facts the brake samples with: the local ones,
/// unless a worker's level is worse (the first worst worker then).
pub fn combine(local: Level, facts: WindowFacts, workers: &[WorkerPressure]) -> (Level, WindowFacts) {
    let worst = workers.iter().filter_map(|w| w.level.map(|l| (l, w))).fold(
        None::<(Level, &WorkerPressure)>,
        |best, (l, w)| match best {
            Some((b, _)) if b >= l => best,
            _ => Some((l, w)),
        },
    );
    match worst {
        Some((l, w)) if l > local => (
            l,
            WindowFacts {
                kv_per_token: w.kv_per_token,
                ram_bytes: w.total_bytes,
                ..facts
            },
        ),
        _ => (local, facts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::law::worker_status::{RpcState, WorkerDevice};

    fn build(tag: Option<&str>, proto: Option<&str>) -> WorkerBuild {
        WorkerBuild {
            llama_cpp: tag.map(str::to_string),
            rpc_protocol: proto.map(str::to_string),
            flavour: Some("cpu".into()),
        }
    }

    #[test]
    fn build_rows() {
        let rows = [
            // why: the same build and protocol join
            (
                build(Some("b10883"), Some("6.0.0")),
                build(Some("b10883"), Some("6.0.0")),
                true,
            ),
            // why: another llama.cpp version is refused before any spawn
            (
                build(Some("b10883"), Some("6.0.0")),
                build(Some("b9999"), Some("6.0.0")),
                false,
            ),
            // why: a build that cannot be told is refused (an abort mid-load otherwise)
            (build(Some("b10883"), None), build(None, Some("6.0.0")), false),
            // why: the same tag but another protocol (a patched build)
            (
                build(Some("b10883"), Some("6.0.0")),
                build(Some("b10883"), Some("5.1.0")),
                false,
            ),
            // why: a protocol not announced yet is not a mismatch
            (build(Some("b10883"), Some("6.0.0")), build(Some("b10883"), None), true),
        ];
        for (i, (ours, theirs, ok)) in rows.iter().enumerate() {
            let r = check_build("w:1", ours, theirs);
            assert_eq!(r.is_ok(), *ok, "row {i}: {r:?}");
            if let Err(e) = r {
                assert!(e.contains("w:1"), "row {i}: names the worker");
            }
        }
    }

    fn status(up: bool, starts: u64) -> WorkerStatus {
        status_pid(up, starts, 1)
    }

    fn status_pid(up: bool, starts: u64, pid: u32) -> WorkerStatus {
        WorkerStatus {
            build: build(Some("b10883"), Some("6.0.0")),
            rpc: RpcState {
                up,
                port: 50052,
                pid: Some(pid),
                starts,
                last_exit: None,
            },
            devices: vec![WorkerDevice {
                name: "CPU".into(),
                kind: DeviceKind::Cpu,
                total_bytes: 1 << 30,
                free_bytes: 1 << 29,
            }],
            pressure: Some(Level::Calm),
        }
    }

    #[test]
    fn lost_rows() {
        let up = status(true, 1);
        let joined = Some(Joined {
            pid: Some(1),
            starts: 1,
        });
        let rows = [
            // why: one missed reading is not a loss (a slow moment)
            (1, Some(&up), joined, true, false),
            // why: two in a row are
            (2, Some(&up), joined, true, true),
            // why: rpc-server down
            (0, Some(&status(false, 1)), joined, true, true),
            // why: the supervisor restarted it since the child connected
            (0, Some(&status_pid(true, 2, 7)), joined, true, true),
            // why: the whole worker restarted: its count starts again at 1,
            // its rpc-server is another process
            (0, Some(&status_pid(true, 1, 9)), joined, true, true),
            // why: a reading from before the plan says nothing of the child
            (0, Some(&status_pid(false, 1, 9)), joined, false, false),
            // why: no child connected yet: a restart is no loss
            (0, Some(&status(true, 2)), None, true, false),
            // why: never read yet, no misses
            (0, None, None, true, false),
        ];
        for (i, (misses, reading, joined, after, want)) in rows.iter().enumerate() {
            assert_eq!(is_lost(*misses, *reading, *joined, *after), *want, "row {i}");
        }
    }

    #[test]
    fn watch_lost_rows() {
        let rows = [
            // why: a clean watch
            (0, false),
            // why: one missed poll is a slow moment
            (1, false),
            // why: two in a row are a loss
            (2, true),
            (7, true),
        ];
        for (i, (misses, want)) in rows.into_iter().enumerate() {
            assert_eq!(watch_lost(misses), want, "row {i}");
        }
    }

    #[test]
    fn devices_carry_their_rule() {
        let d = devices_of("10.0.0.2:50053", &status(true, 1));
        assert_eq!(d[0].name, "10.0.0.2:50053/CPU");
        assert_eq!(d[0].limit_bytes, 768 << 20);
    }

    #[test]
    fn combine_rows() {
        let facts = WindowFacts {
            allocated: 8192,
            kv_per_token: 23040,
            ram_bytes: 24 << 30,
            uncapped: 8192,
            pinned: false,
        };
        let w = |l: Option<Level>| WorkerPressure {
            level: l,
            total_bytes: 512 << 20,
            kv_per_token: 7680,
        };
        let rows = [
            // why: calm workers: the local reading
            (Level::Warning, vec![w(Some(Level::Calm))], Level::Warning, 24u64 << 30),
            // why: a critical worker wins, with its own memory for "ours"
            (Level::Calm, vec![w(Some(Level::Critical))], Level::Critical, 512 << 20),
            // why: a tie keeps the local facts
            (Level::Warning, vec![w(Some(Level::Warning))], Level::Warning, 24 << 30),
            // why: an unreadable worker adds nothing
            (Level::Calm, vec![w(None)], Level::Calm, 24 << 30),
        ];
        for (i, (local, workers, level, ram)) in rows.iter().enumerate() {
            let (l, f) = combine(*local, facts, workers);
            assert_eq!((l, f.ram_bytes), (*level, *ram), "row {i}");
        }
    }
}
