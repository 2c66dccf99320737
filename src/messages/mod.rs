//! The messages of the actor system, one file each: who sends it, to whom,
//! when, and its reply.
//!
//! | message | from | to | reply |
//! |---|---|---|---|
//! | `Generate` | `Warden::submit` (HTTP handlers, embedders); `PrefixCacheActor` forwards it on MLX | `EngineActor` | `()` (events on its channel) |
//! | `Reset` | `PrefixCacheActor` (MLX), just ahead of the turn that needs it | `EngineActor` | `()` |
//! | `BrakeSample` | `SensorActor` (every 60 s while a model is loaded) | `EngineActor` | `()` |
//! | `Reap` | `IdleTimer` (every 30 s while a model looks idle) | `EngineActor` | `()` |
//! | `SaveAhead` | `IdleTimer` (once the idle clock stood still `WARDEN_KV_SAVE_AHEAD_S`) | `EngineActor` | `()` |
//! | `Load` | `/warden/load`, embedders | `EngineActor` | `Reply<Result<EngineStatus, WardenError>>` (later when turns run) |
//! | `Unload` | `/warden/unload`, embedders | `EngineActor` | `Reply<Result<bool, WardenError>>` (later when turns run) |
//! | `TurnRelayed` | a turn's relay task (`actors::engine::relay`), at its end | `EngineActor` | `()` |
//! | `Evict` | another resident's `EngineActor` (its load making room: awaited; its brake: fire-and-forget) | `EngineActor` | `Option<u64>` (bytes freed) |
//! | `Shutdown` | `Warden::shutdown` | `EngineActor` | `()` |
//! | `WorkerCheck` | the worker watch (`rpc::remote`) | `EngineActor` | `()` |
//! | `Recover` | `EngineActor` itself, after one of its handlers panicked | `EngineActor` | `()` |
//! | `ClaimPrefix` | `Warden::submit` (MLX) | `PrefixCacheActor` | `()` (it forwards the turn) |
//! | `ResetFailed` | `EngineActor` (MLX) | `PrefixCacheActor` | `()` |
//!
//! The engine sends only fire-and-forget messages and awaits no actor in
//! a handler but one: a load that must make room awaits each idle
//! resident's `Evict` (`actors::engine::room`). That wait cannot close a
//! circle: only a resident with no turn routed to it is evicted, and the
//! `Evict` handler itself awaits nothing but its own child. The brake
//! reads the sensor's latest reading from a watch (`sensors::view`), and
//! the engine talks to its own child itself, so the child's client and key
//! never leave it.

pub mod body;
pub mod brake_sample;
pub mod evict;
pub mod generate;
pub mod load;
pub mod prefix;
pub mod reap;
pub mod save_ahead;
pub mod recover;
pub mod reply;
pub mod reset;
pub mod shutdown;
pub mod unload;
pub mod worker_check;

pub use brake_sample::BrakeSample;
pub use evict::Evict;
pub use generate::{Generate, Notice, Resolved, TurnEvent, TurnOptions, TurnRequest};
pub use load::Load;
pub use reap::Reap;
pub use save_ahead::SaveAhead;
pub use recover::Recover;
pub use reply::Reply;
pub use reset::Reset;
pub use shutdown::Shutdown;
pub use unload::Unload;
pub use worker_check::WorkerCheck;
