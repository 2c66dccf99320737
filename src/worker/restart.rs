//! The supervisor's two decisions, pure: how long to wait before the next
//! start (`Backoff`), and how a run's end reads in the status (`last_exit`).
//! Time is an argument: the supervisor measures, this decides.

use std::time::Duration;

use crate::child::process::ExitInfo;
use crate::law::crash::{self, Hints};

/// The first restart's delay.
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// The delay doubles up to this, and stays there while rpc-server keeps
/// failing (a taken port must not be hammered).
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// A run this long was healthy: the next failure starts over at the minimum.
pub const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// Short runs in a row after which the worker says, once, that rpc-server
/// keeps failing (and waits the maximum from then on).
pub const FAILING_AFTER: u32 = 5;

/// Consecutive short runs and what they imply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    /// Runs shorter than `HEALTHY_RUN` in a row, this one included.
    pub short_runs: u32,
}

/// What to do after a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Wait this long, then start again.
    pub delay: Duration,
    /// This run was the `FAILING_AFTER`th short one in a row: say so, once.
    pub now_failing: bool,
}

impl Backoff {
    /// Records a run of `ran_for` and decides the wait before the next one.
    pub fn after_run(&mut self, ran_for: Duration) -> Retry {
        if ran_for >= HEALTHY_RUN {
            self.short_runs = 0;
        }
        self.short_runs = self.short_runs.saturating_add(1);
        let n = self.short_runs;
        let delay = if n >= FAILING_AFTER {
            BACKOFF_MAX
        } else {
            BACKOFF_MIN.saturating_mul(1 << (n - 1).min(16)).min(BACKOFF_MAX)
        };
        Retry {
            delay,
            now_failing: n == FAILING_AFTER,
        }
    }
}

/// rpc-server's own failures, which the engine's table (llama-server's
/// wording) does not know: (substring, code).
const RPC_PATTERNS: &[(&str, &str)] = &[
    // ggml-rpc.cpp when bind/listen fails; it then *returns 0*, so the exit
    // status alone reads as a clean stop.
    ("Failed to create server socket", "port_in_use"),
    // rpc-server.cpp for a `--device` it does not have.
    ("unknown device", "unknown_device"),
];

/// The code of a run's end: rpc-server's own lines first, then the engine's
/// classification (signals, out of memory, an outside SIGKILL).
pub fn exit_code(tail: &[String], exit: ExitInfo, hints: Hints) -> &'static str {
    for line in tail.iter().rev() {
        if let Some((_, code)) = RPC_PATTERNS.iter().find(|(needle, _)| line.contains(needle)) {
            return code;
        }
    }
    crash::classify(tail, exit.kind(), hints).as_str()
}

/// `last_exit`: the code first (a reader may split at the first space), then
/// what happened, in words (`child_killed (killed by SIGKILL)`,
/// `port_in_use (could not bind 127.0.0.1:50052 ...; exit status 0)`).
pub fn describe_exit(code: &str, exit: ExitInfo, endpoint: &str) -> String {
    match code {
        "port_in_use" => format!(
            "{code} (could not bind {endpoint}: the port is taken, or the host is not an address of this machine; {exit})"
        ),
        "unknown_device" => format!("{code} (rpc-server has no such --device; {exit})"),
        _ => format!("{code} ({exit})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_rows() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // (runs in order, delays expected, `now_failing` expected per run)
        let rows: &[(&[Duration], &[Duration], &[bool])] = &[
            // why: doubling from 0.5 s, then the maximum from the 5th short run on
            (
                &[ms(10), ms(10), ms(10), ms(10), ms(10), ms(10)],
                &[ms(500), s(1), s(2), s(4), s(10), s(10)],
                &[false, false, false, false, true, false],
            ),
            // why: a healthy run (60 s up) starts over at the minimum
            (
                &[ms(10), ms(10), s(60)],
                &[ms(500), s(1), ms(500)],
                &[false, false, false],
            ),
            // why: a run just short of healthy still counts as short
            (&[s(59), s(59)], &[ms(500), s(1)], &[false, false]),
            // why: failing again after a healthy run says so again, once
            (
                &[
                    ms(1),
                    ms(1),
                    ms(1),
                    ms(1),
                    ms(1),
                    s(120),
                    ms(1),
                    ms(1),
                    ms(1),
                    ms(1),
                    ms(1),
                ],
                &[
                    ms(500),
                    s(1),
                    s(2),
                    s(4),
                    s(10),
                    ms(500),
                    s(1),
                    s(2),
                    s(4),
                    s(10),
                    s(10),
                ],
                &[
                    false, false, false, false, true, false, false, false, false, true, false,
                ],
            ),
        ];
        for (i, (runs, delays, failing)) in rows.iter().enumerate() {
            let mut b = Backoff::default();
            let got: Vec<Retry> = runs.iter().map(|r| b.after_run(*r)).collect();
            let want: Vec<Retry> = delays
                .iter()
                .zip(failing.iter())
                .map(|(&delay, &now_failing)| Retry { delay, now_failing })
                .collect();
            assert_eq!(got, want, "row {i}");
        }
    }

    #[test]
    fn a_long_failure_streak_never_overflows() {
        let mut b = Backoff::default();
        for _ in 0..100 {
            assert!(b.after_run(Duration::ZERO).delay <= BACKOFF_MAX);
        }
    }

    #[test]
    fn exit_rows() {
        let code = |c| ExitInfo {
            code: Some(c),
            signal: None,
        };
        let sig = |s| ExitInfo {
            code: None,
            signal: Some(s),
        };
        let none = Hints::default();
        let rows: &[(&[&str], ExitInfo, Hints, &str)] = &[
            // why: a taken port (measured): stderr's line, and exit status 0
            (
                &["  transport      : TCP", "Failed to create server socket"],
                code(0),
                none,
                "port_in_use",
            ),
            // why: `--device FOO` (measured): exit status 1
            (
                &["error: unknown device: FOO", "available devices:"],
                code(1),
                none,
                "unknown_device",
            ),
            // why: `kill -9` from outside, no OOM kill on record
            (
                &["Accepted client connection"],
                sig(libc::SIGKILL),
                none,
                "child_killed",
            ),
            // why: the same with the cgroup's OOM counter moved
            (
                &[],
                sig(libc::SIGKILL),
                Hints {
                    oom_kill_seen: true,
                    ..none
                },
                "out_of_memory",
            ),
            // why: a segfault is a crash
            (&[], sig(libc::SIGSEGV), none, "child_crashed"),
            // why: the engine's patterns still apply (a failed host allocation)
            (
                &["ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer"],
                sig(libc::SIGABRT),
                none,
                "out_of_memory",
            ),
        ];
        for (i, (tail, exit, hints, want)) in rows.iter().enumerate() {
            let tail: Vec<String> = tail.iter().map(|s| s.to_string()).collect();
            assert_eq!(exit_code(&tail, *exit, *hints), *want, "row {i}: {tail:?} {exit:?}");
        }
    }

    #[test]
    fn last_exit_starts_with_its_code_and_says_what_happened() {
        let killed = ExitInfo {
            code: None,
            signal: Some(libc::SIGKILL),
        };
        let clean = ExitInfo {
            code: Some(0),
            signal: None,
        };
        let rows = [
            ("child_killed", killed, "child_killed (killed by SIGKILL)"),
            ("child_crashed", clean, "child_crashed (exit status 0)"),
        ];
        for (i, (code, exit, want)) in rows.iter().enumerate() {
            assert_eq!(describe_exit(code, *exit, "127.0.0.1:1"), *want, "row {i}");
        }
        let busy = describe_exit("port_in_use", clean, "127.0.0.1:50052");
        assert!(
            busy.starts_with("port_in_use (could not bind 127.0.0.1:50052"),
            "{busy}"
        );
    }
}
