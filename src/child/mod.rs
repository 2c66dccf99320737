//! The child process and everything that talks to it: the seam that starts
//! it (`launch`), spawning in its own process group with the parent-death
//! signal (`process`, its output drained by `capture`), its captured output
//! (`output`), port picking (`port`), the
//! readiness probe (`ready`) and the HTTP client (`client`); with the
//! `testing` feature, an in-process fake llama-server (`fake`). Used by the
//! engine core only (the SSE parser, which the CLI and embedders use too, is
//! `crate::sse`; the per-spawn key is `crate::secret::ApiKey`).

mod capture;
pub mod client;
#[cfg(feature = "testing")]
pub mod fake;
#[cfg(windows)]
mod job_windows;
pub mod launch;
pub mod output;
pub mod port;
pub mod process;
pub mod ready;
