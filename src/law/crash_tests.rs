//! Table tests of crash classification (`law::crash`): the lines the pinned
//! build prints, a silent SIGKILL, fatal signals and their names.

use super::*;

fn lines(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// (output tail, how the child ended, hints, the code)
type Row<'a> = (&'a [&'a str], ExitKind, Hints, EngineCode);

const NONE: Hints = Hints {
    stopped_by_us: false,
    oom_kill_seen: false,
    port_held: false,
};
const OURS: Hints = Hints {
    stopped_by_us: true,
    oom_kill_seen: false,
    port_held: false,
};
const OOM: Hints = Hints {
    stopped_by_us: false,
    oom_kill_seen: true,
    port_held: false,
};
const HELD: Hints = Hints {
    stopped_by_us: false,
    oom_kill_seen: false,
    port_held: true,
};

fn check(rows: &[Row]) {
    for (i, (tail, exit, hints, want)) in rows.iter().enumerate() {
        let got = classify(&lines(tail), *exit, *hints);
        assert_eq!(got, *want, "row {i}: {tail:?}");
    }
}

/// The failure lines the pinned build prints each name their code; the last one wins.
#[test]
fn classifies_the_lines_the_pinned_build_prints() {
    let rows: &[Row] = &[
        // why: FACTS.md, a truncated SmolLM2 at the default verbosity
        (
            &[
                "llama_model_load: error loading model: tensor 'token_embd.weight' data is not within the file bounds, model is corrupted or incomplete",
            ],
            ExitKind::Code(1),
            NONE,
            EngineCode::ModelCorrupt,
        ),
        // why: FACTS.md, a text file passed as -m
        (
            &["gguf_init_from_reader: invalid magic characters: 'hell', expected 'GGUF'"],
            ExitKind::Code(1),
            NONE,
            EngineCode::NotGguf,
        ),
        // why: FACTS.md, the port taken by another process
        (
            &[
                "srv start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 27200",
                "srv main: exiting due to HTTP server error",
            ],
            ExitKind::Code(1),
            NONE,
            EngineCode::PortInUse,
        ),
        // why: ggml-backend.cpp's host allocation failure
        (
            &["ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 98765432"],
            ExitKind::Code(1),
            NONE,
            EngineCode::OutOfMemory,
        ),
        // why: the CUDA allocation line also says "failed"; the device wins
        (
            &[
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: cudaMalloc failed: out of memory",
            ],
            ExitKind::Code(1),
            NONE,
            EngineCode::CudaOutOfMemory,
        ),
        // why: the last failure wins over an earlier one (fit's probe, then the load)
        (
            &[
                "failed to allocate compute pp buffers",
                "invalid magic characters: 'xxxx', expected 'GGUF'",
            ],
            ExitKind::Code(1),
            NONE,
            EngineCode::NotGguf,
        ),
    ];
    check(rows);
}

/// A silent SIGKILL is the OOM killer only on the cgroup's evidence, and never ours.
#[test]
fn tells_a_silent_sigkill_apart_by_who_sent_it() {
    let rows: &[Row] = &[
        // why: a silent SIGKILL with the cgroup's OOM counter moved is the OOM killer
        (
            &["srv update_slots: all slots are idle"],
            ExitKind::Signal(9),
            OOM,
            EngineCode::OutOfMemory,
        ),
        // why: a silent SIGKILL without that evidence is only "killed"
        (
            &["srv update_slots: all slots are idle"],
            ExitKind::Signal(9),
            NONE,
            EngineCode::ChildKilled,
        ),
        // why: our own SIGKILL (terminate after the grace) is no OOM
        (
            &["srv update_slots: all slots are idle"],
            ExitKind::Signal(9),
            OURS,
            EngineCode::ChildCrashed,
        ),
    ];
    check(rows);
}

/// A fatal signal is a plain crash, except SIGILL, which wins over any line.
#[test]
fn a_fatal_signal_is_a_crash_and_sigill_wins_over_the_output() {
    let rows: &[Row] = &[
        // why: a segfault with nothing printed is a plain crash (named in the message)
        (&[], ExitKind::Signal(libc::SIGSEGV), NONE, EngineCode::ChildCrashed),
        // why: SIGBUS and SIGABRT are crashes too; their names tell them apart
        (&[], ExitKind::Signal(libc::SIGBUS), NONE, EngineCode::ChildCrashed),
        (
            &["GGML_ASSERT(n_tokens > 0) failed"],
            ExitKind::Signal(libc::SIGABRT),
            NONE,
            EngineCode::ChildCrashed,
        ),
        // why: FACTS.md, the AMX build on an AMX machine: SIGILL on the first computation
        (
            &["srv load_model: loading model"],
            ExitKind::Signal(SIGILL),
            NONE,
            EngineCode::IllegalInstruction,
        ),
        // why: SIGILL wins over an earlier allocation line (fit's probe printed it)
        (
            &["failed to allocate compute pp buffers"],
            ExitKind::Signal(SIGILL),
            NONE,
            EngineCode::IllegalInstruction,
        ),
    ];
    check(rows);
}

/// A load that failed on a port another socket holds is a port conflict
/// even when llama.cpp's logger lost the line that says so.
#[test]
fn a_failed_load_on_a_held_port_is_a_port_conflict_without_its_line() {
    let rows: &[Row] = &[
        // why: seen in CI: exit 1 with only the first start-up line captured
        (
            &["common_params_print_info: verbosity = 3 (adjust with the `-lv N` CLI arg)"],
            ExitKind::Code(1),
            HELD,
            EngineCode::PortInUse,
        ),
        // why: the same with nothing captured at all
        (&[], ExitKind::Code(1), HELD, EngineCode::PortInUse),
        // why: a line that explains the exit wins over the probe
        (
            &["gguf_init_from_reader: invalid magic characters: 'hell', expected 'GGUF'"],
            ExitKind::Code(1),
            HELD,
            EngineCode::NotGguf,
        ),
        // why: a signal is no failed bind
        (&[], ExitKind::Signal(libc::SIGSEGV), HELD, EngineCode::ChildCrashed),
        // why: a clean exit is no failed bind
        (&[], ExitKind::Code(0), HELD, EngineCode::ChildCrashed),
        // why: the port free again: a plain crash, not a conflict to retry
        (&[], ExitKind::Code(1), NONE, EngineCode::ChildCrashed),
    ];
    check(rows);
}

#[test]
fn names_the_fatal_signals_apart() {
    let rows: &[(i32, Option<&str>)] = &[
        // why: the four a model server dies of must read differently
        (libc::SIGILL, Some("SIGILL")),
        (libc::SIGSEGV, Some("SIGSEGV")),
        (libc::SIGBUS, Some("SIGBUS")),
        (libc::SIGABRT, Some("SIGABRT")),
        // why: the OOM killer's signal
        (libc::SIGKILL, Some("SIGKILL")),
        // why: a number no table row holds is reported as a number
        (63, None),
    ];
    for (i, (sig, want)) in rows.iter().enumerate() {
        assert_eq!(signal_name(*sig).map(|s| s.name), *want, "row {i}: signal {sig}");
    }
    // why: the SIGILL code tells the user how to get a binary that runs
    let remedy = EngineCode::IllegalInstruction.remedy().unwrap();
    assert!(remedy.contains("./build-llama.sh --rebuild"), "{remedy}");
}

#[test]
fn oom_killed_since_rows() {
    let rows = [
        // why: the counter moved: the kernel killed something in the group
        (Some(3), Some(4), true),
        // why: unchanged: not the OOM killer
        (Some(3), Some(3), false),
        // why: an unreadable counter is no evidence
        (None, Some(4), false),
        (Some(3), None, false),
        (None, None, false),
    ];
    for (i, (before, now, want)) in rows.into_iter().enumerate() {
        assert_eq!(oom_killed_since(before, now), want, "row {i}");
    }
}
