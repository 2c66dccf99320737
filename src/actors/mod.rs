//! The actors: `EngineActor` (owns the child; its mailbox is the lock),
//! `IdleTimer` (the reap and brake clocks), `SensorActor` (the OS's memory
//! readings) and `PrefixCacheActor` (who owns the MLX child's KV). `crate::warden` assembles them.

pub mod engine;
pub mod idle_timer;
pub mod prefix_cache;
pub mod sensor;

pub use engine::{EngineActor, EngineCore};
pub use idle_timer::IdleTimer;
pub use prefix_cache::PrefixCacheActor;
pub use sensor::SensorActor;
