//! The llama-server build runs on the machine that built it, whatever its
//! CPU advertises: the built binary holds no AMX tile instruction (the
//! check itself is shown to find one), and the smoke test build-llama.sh
//! runs after every build names the signal of a binary that crashes.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(name)
}

/// The llama-server build-llama.sh installed holds no AMX instruction
/// (`tilezero`, `tileloadd`, `tdpbssd`, `ldtilecfg`, ...), so it cannot die
/// of SIGILL on an AMX CPU as the -march=native build did.
#[test]
#[ignore = "needs the real llama-server (./build-llama.sh); ./test.sh runs it"]
fn the_built_llama_server_holds_no_amx_instruction() {
    let server = real_llama_server();
    let out = Command::new(script("no-amx.sh")).arg(&server).output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        server.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The AMX check finds tile instructions where there are some: an object
/// compiled with `-mamx-tile` fails it (so the test above can fail).
#[test]
#[ignore = "needs a cc that takes -mamx-tile (GCC 11+); ./test.sh runs it"]
fn the_amx_check_finds_tile_instructions() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("amx.c");
    std::fs::write(
        &src,
        "#include <immintrin.h>\nvoid f(void) { _tile_zero(0); _tile_release(); }\n",
    )
    .unwrap();
    let obj = dir.path().join("amx.o");
    let cc = Command::new("cc")
        .args(["-O2", "-mamx-tile", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output();
    match cc {
        Ok(o) if o.status.success() => {}
        Ok(o) => missing(&format!(
            "a cc that compiles an AMX intrinsic (-mamx-tile: GCC 11+ or Clang 12+): {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => missing(&format!("a C compiler as `cc` ({e})")),
    }
    let out = Command::new(script("no-amx.sh")).arg(&obj).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("tilezero"), "{said}");
}

/// The smoke test fails a binary that dies of a signal and names the signal.
#[test]
fn the_smoke_test_names_the_signal_of_a_crashing_binary() {
    let dir = tempfile::tempdir().unwrap();
    for sig in ["ILL", "SEGV"] {
        let fake = dir.path().join(format!("llama-server-{sig}"));
        std::fs::write(
            &fake,
            format!("#!/bin/sh\necho 'load_model: loading'\nkill -{sig} $$\n"),
        )
        .unwrap();
        let mut perms = std::fs::metadata(&fake).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&fake, perms).unwrap();
        let out = Command::new("python3")
            .arg(script("smoke_llama_server.py"))
            .arg(&fake)
            .arg("model.gguf")
            .arg(dir.path().join("smoke.log"))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "SIG{sig}: {said}");
        assert!(said.contains(&format!("died of SIG{sig}")), "SIG{sig}: {said}");
    }
}

/// The real llama-server passes the smoke test on the real SmolLM2 (so the
/// test above fails only a crashing binary).
#[test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
fn the_smoke_test_passes_the_real_llama_server() {
    let dir = tempfile::tempdir().unwrap();
    let (server, model) = (real_llama_server(), real_model(SMOLLM2));
    let out = Command::new("python3")
        .arg(script("smoke_llama_server.py"))
        .arg(&server)
        .arg(&model)
        .arg(dir.path().join("real.log"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
