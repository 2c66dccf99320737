//! The CPU engine: llama-server with `-ngl 0`, its window sized by the warden
//! (`law::window::cpu`) against the RAM total, passed as `-c`.

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
}

impl CpuEngine {
    /// The engine's argv for a plan (the fixed flags come after, from `llama`).
    pub fn argv(&self, plan: &SpawnPlan) -> Vec<OsString> {
        let mut a = super::llama::model_args(plan);
        a.push("-ngl".into());
        a.push("0".into());
        if self.verbosity != 3 {
            a.push("-lv".into());
            a.push(self.verbosity.to_string().into());
        }
        a
    }
}
