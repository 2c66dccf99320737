//! The actors: `EngineActor` (owns the child; its mailbox is the lock),
//! `IdleTimer` (the reap and brake clocks) and `SensorActor` (the OS's
//! memory readings). `crate::warden` assembles them.

pub mod engine;
pub mod idle_timer;
pub mod sensor;

pub use engine::{EngineActor, EngineCore};
pub use idle_timer::IdleTimer;
pub use sensor::SensorActor;
