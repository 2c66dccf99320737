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
//!  HTTP (http::*, actix-web)
//!    | Warden::submit -> Generate ------------------------------+
//!    | (MLX: -> ClaimPrefix -> PrefixCacheActor, who owns the    |
//!    |  child's KV: it queues Reset, then forwards Generate) ----+
//!    v                                                           v
//!  EngineActor (actors::engine) -- owns the one child (child::*), its client and key
//!    |  its mailbox is the spec's generation lock (AtomicResponse handlers);
//!    |  it awaits no other actor in a handler
//!    |<-- BrakeSample -- SensorActor (own clock: RAM pressure, paging; every
//!    |                   60 s while loaded), its latest reading in a watch
//!    |-- reads <-- that watch at a turn's start and end (sensors::view)
//!    |<-- Reap -- IdleTimer (every 30 s, only when a model looks idle)
//!    |-- ResetFailed --> PrefixCacheActor (the next claim resets)
//!    |-- publishes Door (watch): /tokenize, /detokenize and the child's
//!    |   /metrics reach the live child beside a turn, nothing else can
//!    |-- reads <-- the worker watch (rpc::remote, every 200 ms; WorkerCheck
//!    |   into the mailbox when a worker fails): RPC workers' readings
//!    |-- emit --> metrics::Metrics (counted) + WardenEvent (broadcast)
//!    |-- law::*      pure decisions (the plan, windows, caps, brakes, crash codes,
//!    |               CUDA, MLX, the prefix cache)
//!    |-- engines::*  one home per engine behind engines::hooks: cpu/ (llama-server,
//!    |               the RPC split), cuda/ (llama-server on a GPU, NVML, the
//!    |               spill gauge), mlx/ (mlx_vlm.server), llama (their shared part)
//!    |-- gguf::*     header-only model facts
//!    |-- sensors::*  RAM total and cgroup, footprints, pressure providers, the
//!    |               view of the latest reading, the dashboard's memory history
//!    |               (its own sampler thread)
//!    `-- status::*   EngineStatus (watch) and WardenEvent (broadcast)
//! ```
//!
//! - `warden`: the embedding API (`Warden::start`, `chat` (a turn as typed
//!   chunks), `submit` (its raw events, for the HTTP relay), `shutdown`,
//!   the tokenizer's side door, metrics, the memory history, `plan_for`:
//!   the plan a load would get, as `/v1/models` shows it).
//! - `engines`: per backend; `engines::preflight` selects the engine and
//!   runs the CUDA pre-flight; `engines::hooks` is the one trait every
//!   engine implements (spawn spec, request adaptation, after-load, brake
//!   sample) and the one place that dispatches on the engine; each engine's
//!   home is its folder: `cpu/` (the RAM brake sample, the split over RPC
//!   workers and a lost worker), `cuda/` (after-load placement, the spill
//!   brake, NVML, the spill gauge), `mlx/` (the memory bound, the MLX brake,
//!   the prefix cache's resets), with the llama.cpp engines' shared part in
//!   `llama` (argv, ping, `llama/brake`: `llama_step` carried out) and each
//!   engine's per-child state in `live::ChildState`; `engines::plan`
//!   gathers the readings `law::plan` turns into every spawn's window and
//!   placement (a load, `inspect` and `/v1/models` alike); `engines::cpu::rpc`
//!   plans the CPU engine's split over RPC workers (`law::split`,
//!   `law::workers`) and reads back what each device got.
//! - `child`: the one child: `launch` (the seam that starts it: an OS
//!   process, or with the `testing` feature the in-process fake
//!   llama-server `child::fake`, which runs the watchdog tests on paused
//!   tokio time), `process` (process group, parent-death signal, the one
//!   `terminate`), its output, key, port, readiness probe and HTTP client.
//! - `server`: the binary's HTTP server (`bind`).
//! - `sse`: the incremental SSE parser of a chat stream (the engine's relay,
//!   `llm-warden chat`, the bench and embedders read streams with it).
//! - `messages`: one file per actor message.
//! - `actors`: `EngineActor` (its state is `EngineCore`, with its `Brake`
//!   and a state derived from the child: `load`, `spawn` (a child to
//!   readiness), `retire` (the one way a live child leaves), `turn`,
//!   `relay` (the child's answer, streamed or whole, and its timings),
//!   `outbox` (every hand-over to a caller bounded by the client stall
//!   bound), `door` (the tokenizer's and metrics' way to the live child
//!   beside a turn), `kv` (a conversation's KV saved and restored across
//!   the warden's own interruptions), `brake` (the engine-neutral part:
//!   the reading, the idle pacing, the window memory and carries; each
//!   engine's sample and action are its hook), `reap`, `publish`, `supervise`: a
//!   handler that panics answers its message, retires the child and the
//!   engine carries on; `counts`: the child's own token counts of a turn);
//!   the engine-specific parts live in `engines`.
//!   `IdleTimer` (sends `Reap`), `SensorActor` (samples on its own clock,
//!   sends `BrakeSample`), `PrefixCacheActor` (owns who holds the MLX
//!   cache, sends `Reset`).
//! - `http`: the actix-web routes (chat, completions, infill, the
//!   tokenizer, `/metrics`, the dashboard `ui`, the warden's own);
//!   `http::dialects` the other dialects (Anthropic's Messages, OpenAI's
//!   Responses, the token counters, the Ollama API translated), each
//!   answered through its `http::reply::Wire`;
//!   `http::stall` closes the connection of a client that stopped reading;
//!   `http::cors` lets listed browser origins in; `http::origin` refuses
//!   uninvited pages and rebound hosts; `http::validate` refuses a malformed
//!   body with the field named, by `law::request`'s table, before any turn.
//! - `metrics`: Prometheus counters fed by every engine event, and the text
//!   format.
//! - `kv_store`: the on-disk store of saved KV caches (bounded, 0600).
//! - `catalog`: the models a warden serves; `capabilities`: what each
//!   entry's files let a request send it (a projector's encoders, FIM
//!   tokens), read once per entry for the HTTP checks.
//! - `config`: every `WARDEN_*` variable, read once.
//! - `error`: `EngineError`, `ModelLoadError`, `GenerationError`, `ApiError`.
//! - `queue`: the queue bound.
//! - `rpc`: llama.cpp RPC workers: the status wire type both sides share
//!   (`status`), which build a binary is (`build`), the warden's side
//!   (`remote`: addresses, readings, the watch), and `worker`
//!   (`llm-warden worker`: rpc-server supervised, its keyed
//!   `/worker/status`).

/// The crate's internals: `pub(crate)`, and public only with the
/// `testing` feature (this crate's integration tests and the bench enable
/// it; an embedder never needs it). Hidden from the docs either way.
macro_rules! internal {
    ($($name:ident;)*) => {
        $(
            #[cfg(feature = "testing")]
            #[doc(hidden)]
            pub mod $name;
            #[cfg(not(feature = "testing"))]
            pub(crate) mod $name;
        )*
    };
}

internal! {
    actors;
    capabilities;
    child;
    engines;
    gguf;
    kv_store;
    law;
    messages;
    metrics;
    queue;
    rpc;
    secret;
    sensors;
    server;
    worker;
}

pub mod catalog;
pub mod cli;
pub mod config;
pub mod error;
pub mod http;
pub mod sse;
pub mod status;
pub mod warden;

pub use catalog::Catalog;
pub use config::WardenConfig;
pub use messages::prefix::TurnKind;
pub use messages::{Notice, TurnEvent, TurnOptions};
pub use warden::{Chunk, TurnRequest, TurnStream, TurnWatch, Warden, WardenBuilder};
