//! The actors of the design card: `EngineActor` (owns the child; its
//! mailbox is the lock), `IdleTimer` (sends `Reap`), `SensorActor` (samples
//! the OS's memory on its own clock, sends `BrakeSample`) and
//! `PrefixCacheActor` (who owns the MLX child's KV, sends `Reset`).
//! `crate::warden` assembles them.

pub mod engine;
pub mod idle_timer;
pub mod prefix_cache;
pub mod sensor;

pub use engine::{EngineActor, EngineCore};
pub use idle_timer::IdleTimer;
pub use prefix_cache::PrefixCacheActor;
pub use sensor::SensorActor;
