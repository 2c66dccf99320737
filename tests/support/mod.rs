//! Shared test support, one concern a file: a long conversation over HTTP
//! (`conversation`), model files and the Python
//! fake's scripts (`models`), starting a warden (`warden`: `TestWarden`, the
//! one way), a turn's request and events (`turns`), what a real test needs
//! and may lack (`real`), serving over HTTP (`serve`), processes seen from
//! outside (`procs`), a scripted pressure view for the brake (`pressure`), a bounded poll for what no event says (`wait`), the
//! warden's log lines captured (`logs`), and
//! the RPC split, worker and browser rigs, and a stand-in for the Hugging
//! Face hub (`hub`).
#![allow(dead_code, unused_imports)]

pub mod conversation;
pub mod hub;
pub mod logs;
pub mod models;
pub mod pressure;
pub mod procs;
pub mod real;
pub mod serve;
pub mod slow_clients;
pub mod split;
pub mod turns;
pub mod wait;
pub mod warden;
pub mod webdriver;
pub mod workers;

pub use conversation::*;
pub use logs::*;
pub use models::*;
pub use procs::*;
pub use real::*;
pub use serve::*;
pub use turns::*;
pub use wait::*;
pub use warden::*;

/// A trial count: `default` in the everyday run, `full` (RELIABILITY.md's
/// count) with `WARDEN_SOAK=1`.
pub fn soak(default: usize, full: usize) -> usize {
    if std::env::var("WARDEN_SOAK").is_ok_and(|v| v == "1") {
        full
    } else {
        default
    }
}
