//! The seam where the engine starts its child. `Launcher::Process` runs the
//! program of the `SpawnSpec` as an OS process (`process::spawn`): every
//! real run. With the `testing` feature, `Launcher::InProcess` serves a
//! scripted fake llama-server from a task on the engine's own runtime
//! instead (`child::fake`), so a test that starts the engine on its own
//! runtime can run the watchdogs on paused tokio time.
//!
//! Carried by `WardenConfig::launcher`; called by the engine's spawn step
//! (`actors::engine::spawn`) only. The rest of the engine cannot tell the
//! two apart: both give a `ChildProcess` with an exit watch, an output log
//! and one `terminate`.

use super::process::{self, ChildProcess, SpawnSpec};

/// How the engine starts its child.
#[derive(Debug, Clone, Default)]
pub enum Launcher {
    /// An OS process (the only launcher outside tests).
    #[default]
    Process,
    /// An in-process fake llama-server (tests only).
    #[cfg(feature = "testing")]
    InProcess(std::sync::Arc<super::fake::FakeLlama>),
}

impl Launcher {
    /// Starts the child `spec` describes.
    pub fn spawn(&self, spec: &SpawnSpec) -> std::io::Result<ChildProcess> {
        match self {
            Self::Process => process::spawn(spec),
            #[cfg(feature = "testing")]
            Self::InProcess(fake) => fake.spawn(spec),
        }
    }
}
