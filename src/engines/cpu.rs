//! The CPU engine: llama-server with `-ngl 0`, its window sized by the warden
//! (`law::window::cpu`) against the RAM total, passed as `-c`; over RPC
//! workers, the layers and the window of `law::split` (`engines::cpu::rpc`).

pub mod brake;
mod live;
pub mod rpc;
pub mod workers;

use std::ffi::OsString;
use std::path::PathBuf;

use super::SpawnPlan;

/// The CPU engine's own state.
#[derive(Debug, Clone)]
pub struct CpuEngine {
    /// The llama-server binary.
    pub server: PathBuf,
    /// llama-server's `-lv` (3 is its default and is not passed).
    pub verbosity: u8,
    /// The RPC workers (`WARDEN_WORKERS`): the link to them, once the
    /// warden started their watch.
    pub workers: Option<workers::WorkersLink>,
}

impl CpuEngine {
    /// The engine's argv for a plan (the fixed flags come after, from `llama`).
    pub fn argv(&self, plan: &SpawnPlan) -> Vec<OsString> {
        let mut a = super::llama::model_args(plan);
        let verbosity = match &plan.rpc() {
            Some(rpc) => {
                a.extend(rpc::argv(rpc));
                self.verbosity.max(rpc::RPC_CHILD_VERBOSITY)
            }
            None => {
                a.push("-ngl".into());
                a.push("0".into());
                self.verbosity
            }
        };
        if verbosity != 3 {
            a.push("-lv".into());
            a.push(verbosity.to_string().into());
        }
        a
    }
}

/// What the CPU engine keeps about its live child.
#[derive(Debug, Default)]
pub struct CpuChild {
    /// Over RPC workers: what llama-server says each device was given.
    pub given: Vec<rpc::Given>,
}
