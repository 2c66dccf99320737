//! llm-warden: a Rust actor runtime that runs a local LLM inference server
//! (llama.cpp's `llama-server` on CPU or CUDA, `mlx_vlm.server` on Apple
//! Silicon) as a child process and keeps it safe: it picks the engine, sizes
//! the context window from the GGUF header and the machine's memory, streams
//! OpenAI-compatible chat through it, brakes memory under pressure, reaps an
//! idle model and turns every crash into a structured error.
//!
//! # Layout
//!
//! ```text
//!  HTTP (http::*, actix-web)       IdleTimer --ReapTick / BrakeTick--+
//!    | Warden::submit -> Generate                                     |
//!    v                                                                v
//!  EngineActor (actors::engine) -- owns the child (child::*) ---------+
//!    |  mailbox = the spec's generation lock; AtomicResponse handlers
//!    |-- law::*      pure decisions (window, brake, reap, crash codes, ...)
//!    |-- engines::*  per-backend argv, env, ports, properties
//!    |-- gguf::*     header-only model facts
//!    |-- sensors::*  RAM total, cgroup, footprints, pressure
//!    `-- status::*   EngineStatus (watch) and WardenEvent (broadcast)
//! ```
//!
//! - `warden`: the embedding API (`Warden::start`, `submit`, `shutdown`).
//! - `server`: the binary's HTTP server (`bind`).
//! - `messages`: one file per actor message.
//! - `actors`: `EngineActor` (+ its `EngineCore`), `IdleTimer`.
//! - `catalog`: the models a warden serves.
//! - `config`: every `WARDEN_*` variable, read once.
//! - `error`: `EngineError`, `ModelLoadError`, `GenerationError`, `ApiError`.
//! - `queue`: the queue bound.

pub mod actors;
pub mod catalog;
pub mod child;
pub mod config;
pub mod engines;
pub mod error;
pub mod gguf;
pub mod http;
pub mod law;
pub mod messages;
pub mod queue;
pub mod sensors;
pub mod server;
pub mod status;
pub mod warden;

pub use catalog::Catalog;
pub use config::WardenConfig;
pub use warden::{TurnRequest, Warden};
