//! The messages of the actor system, one file each: who sends it, to whom,
//! when, and its reply.
//!
//! | message | from | to | reply |
//! |---|---|---|---|
//! | `Generate` | HTTP handlers, embedders | `EngineActor` | `()` (events on its channel) |
//! | `Load` | `/warden/load`, embedders | `EngineActor` | `Result<EngineStatus, ApiError>` |
//! | `Unload` | `/warden/unload`, embedders | `EngineActor` | `Result<bool, ApiError>` |
//! | `ReapTick` | `IdleTimer` (every 30 s) | `EngineActor` | `()` |
//! | `BrakeTick` | `IdleTimer` (every 60 s) | `EngineActor` | `()` |
//! | `Shutdown` | `Warden::shutdown` | `EngineActor` | `()` |
//! | `WorkerCheck` | the worker watch (`rpc::remote`) | `EngineActor` | `()` |
//! | `ReadSensors` | `EngineActor` (brake samples) | `SensorActor` | `Result<Readings, BrakeOff>` |
//! | `ReadVram` | `EngineActor` (CUDA spill samples) | `SensorActor` | `Result<u64, String>` |
//! | `ClaimPrefix`, `PrefixAbandoned`, `PrefixChildChanged`, `ReleaseCache` | `EngineActor` (MLX) | `PrefixCacheActor` | see `prefix` |

pub mod brake_tick;
pub mod generate;
pub mod load;
pub mod prefix;
pub mod read_sensors;
pub mod read_vram;
pub mod reap_tick;
pub mod shutdown;
pub mod unload;
pub mod worker_check;

pub use brake_tick::BrakeTick;
pub use generate::{Generate, Notice, TurnEvent, TurnOptions};
pub use load::Load;
pub use read_sensors::{BrakeOff, ReadSensors};
pub use read_vram::ReadVram;
pub use reap_tick::ReapTick;
pub use shutdown::Shutdown;
pub use unload::Unload;
pub use worker_check::WorkerCheck;
