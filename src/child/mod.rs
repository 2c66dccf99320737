//! The child process and everything that talks to it: spawning in its own
//! process group with the parent-death signal (`process`), its captured
//! output (`output`), the per-spawn key (`key`), port picking (`port`), the
//! readiness probe (`ready`), the HTTP client (`client`) and the SSE parser
//! (`sse`). Used by the engine core only.

pub mod client;
pub mod key;
pub mod output;
pub mod port;
pub mod process;
pub mod ready;
pub mod sse;
