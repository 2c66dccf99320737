//! The RAM total bounded by the warden's own memory cgroup, for real: the
//! `inspect` binary run inside a cgroup (v1 on these machines, v2 where the
//! unified hierarchy holds the memory controller) with a 2 GiB limit reports
//! that limit as its RAM and sizes the window on it. Where the test cannot
//! create a cgroup (not root, or no writable controller) it is skipped with
//! a note, and fails under `WARDEN_REQUIRE_REAL=1` (`./test.sh`).

use std::process::Command;

mod support;
use support::MemCgroup;

/// `inspect` in a 2 GiB cgroup: RAM = the limit, from the cgroup's file.
#[test]
fn inspect_inside_a_limited_cgroup_reports_the_limit() {
    let Some(group) = MemCgroup::new("llm-warden-test", 2 << 30) else {
        // Under WARDEN_REQUIRE_REAL=1 (./test.sh) a missing cgroup fails.
        support::skip_or_fail::<()>("cannot create a memory cgroup here (not root?)");
        return;
    };
    let model = llm_warden::WardenConfig::from_env()
        .unwrap()
        .models_dir()
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !model.is_file() {
        support::skip_or_fail::<()>(&format!("{} missing (run ./build-llama.sh)", model.display()));
        return;
    }
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
