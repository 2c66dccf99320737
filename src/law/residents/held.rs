//! What an eviction, a wait and a refusal name: each resident and what it
//! holds (`Held`), why a load cannot go ahead (`Shortfall`) and the
//! refusal's message. Re-exported from `law::residents`.

use std::fmt;

use super::ModelKind;
use crate::law::window::MIB;

/// The code of the refusal (a 503).
pub const DOES_NOT_FIT_CODE: &str = "model_does_not_fit";

/// A resident and what it holds, as an eviction or a refusal names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub model: String,
    pub kind: ModelKind,
    /// Its footprint: what an eviction frees.
    pub bytes: u64,
    /// A turn in flight or queued.
    pub in_turn: bool,
}

/// Why a load cannot go ahead now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    pub model: String,
    /// Its footprint at the floor window.
    pub needs_bytes: u64,
    /// The room its footprint would have with every idle resident evicted
    /// (negative when the residents in a turn hold more than the share).
    pub room_bytes: i64,
    /// The count cap, when the count is what the residents in a turn hold.
    pub max_resident: Option<usize>,
    /// Every resident and what it holds.
    pub residents: Vec<Held>,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: i64| b / MIB as i64;
        write!(
            f,
            "{} needs {} MiB at its floor window",
            self.model,
            mib(self.needs_bytes as i64)
        )?;
        match self.max_resident {
            Some(n) => write!(f, "; residents in a turn fill the count cap (WARDEN_MAX_RESIDENT={n})")?,
            None => write!(
                f,
                "; {} MiB is left beside the residents in a turn",
                mib(self.room_bytes)
            )?,
        }
        for (i, r) in self.residents.iter().enumerate() {
            let sep = if i == 0 { ": " } else { ", " };
            let state = if r.in_turn { "in a turn" } else { "idle" };
            write!(
                f,
                "{sep}{} ({}) holds {} MiB, {state}",
                r.model,
                r.kind.as_str(),
                mib(r.bytes as i64)
            )?;
        }
        Ok(())
    }
}
