//! Which `ggml-rpc-server` the worker runs (its llama.cpp build is read by
//! `rpc::build`).
//!
//! Found like llama-server (`engines::llama::find_flavour_binary`): an
//! explicit `WARDEN_RPC_SERVER`, else the flavour's build under the artifact
//! roots and the cache, CPU first unless NVML sees a GPU (then CUDA first: a
//! worker on a GPU machine is there for its GPU). Its identity comes from the
//! `BUILD_INFO` build-llama.sh writes beside `bin/`.

use std::path::{Path, PathBuf};

use crate::config::WardenConfig;
use crate::engines::llama::{self, Flavour};

/// The executable name on this platform.
pub fn exe_name() -> &'static str {
    if cfg!(windows) {
        "ggml-rpc-server.exe"
    } else {
        "ggml-rpc-server"
    }
}

/// The binary, or every place looked at (for the error a person reads).
pub fn find_rpc_server(explicit: Option<&Path>, cfg: &WardenConfig, gpu_seen: bool) -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    if let Some(p) = explicit {
        if llama::is_executable(p) {
            return Ok(p.to_path_buf());
        }
        tried.push(format!("WARDEN_RPC_SERVER={}", p.display()));
    }
    let order = if gpu_seen {
        [Flavour::Cuda, Flavour::Cpu]
    } else {
        [Flavour::Cpu, Flavour::Cuda]
    };
    for f in order {
        match llama::find_flavour_binary(cfg, f, exe_name()) {
            Ok(p) => return Ok(p),
            Err(mut t) => tried.append(&mut t),
        }
    }
    Err(tried.join(", "))
}
