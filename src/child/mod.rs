//! The child process and everything that talks to it: spawning in its own
//! process group with the parent-death signal (`process`), its captured
//! output (`output`), the per-spawn key (`key`), port picking (`port`), the
//! readiness probe (`ready`) and the HTTP client (`client`). Used by the
//! engine core only (the SSE parser, which the CLI and embedders use too, is
//! `crate::sse`).

pub mod client;
pub mod key;
pub mod output;
pub mod port;
pub mod process;
pub mod ready;
