//! The RAM total bounded by the warden's own memory cgroup, for real: the
//! `inspect` binary run inside a cgroup (v1 on these machines, v2 where the
//! unified hierarchy holds the memory controller) with a 2 GiB limit reports
//! that limit as its RAM and sizes the window on it. It needs root (a
//! writable memory controller): ignored by a plain `cargo test`, run by
//! `./test.sh`, and failed where it cannot create the cgroup.

use std::process::Command;

use crate::support;
use support::MemCgroup;

/// `inspect` in a 2 GiB cgroup: RAM = the limit, from the cgroup's file.
#[test]
#[ignore = "needs root for a memory cgroup, and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
fn inspect_inside_a_limited_cgroup_reports_the_limit() {
    let group = MemCgroup::new("llm-warden-test", 2 << 30);
    let model = support::real_model(support::SMOLLM2);
    // The shell moves itself into the group, then becomes the warden.
    let script = format!(
        "{} {} inspect --json {}",
        group.enter(),
        env!("CARGO_BIN_EXE_llm-warden"),
        model.display()
    );
    let out = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ram_bytes"], 2u64 << 30);
    let want = if group.v1 { "cgroup_v1" } else { "cgroup_v2" };
    assert_eq!(v["ram_source"], want);
    // 0.75 x 2 GiB - weights - 256 MiB still holds SmolLM2's 8192 tokens.
    assert_eq!(v["context_tokens"], 8192);
}
