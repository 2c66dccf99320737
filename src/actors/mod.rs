//! The actors: `EngineActor` (owns the child; its mailbox is the lock) and
//! `IdleTimer` (the reap and brake clocks). `crate::warden` assembles them.

pub mod engine;
pub mod idle_timer;

pub use engine::{EngineActor, EngineCore};
pub use idle_timer::IdleTimer;
