//! Keeping a conversation's KV cache across the warden's own interruptions
//! (idle reap, brake respawn or unload, manual unload, a model swap, another
//! conversation taking the single slot): when to save the slot, when a save
//! may be restored, what to evict. Pure; `actors::engine::kv` carries it out
//! through llama-server's `/slots/0?action=save|restore`.
//!
//! Measured on the pinned llama-server (SmolLM2, 2 cores): a save of a
//! 2,665-token slot took 0.06 s (23 KB per token), a restore 0.07 s, while
//! re-processing that prompt took 50.7 s. Below `MIN_SAVE_TOKENS` the
//! prompt re-reads in well under the time a save and a restore cost
//! together with their file traffic, so a short conversation is not saved.

/// Conversations shorter than this (estimated tokens) are not saved.
pub const MIN_SAVE_TOKENS: u32 = 256;
/// The longest a save or a restore may take before it is abandoned (the
/// stop or the turn goes on without it).
pub const SLOT_IO_TIMEOUT_S: u64 = 5;
/// The default cap of the on-disk store: this share of the free disk at
/// start, at most `MAX_CAP_BYTES`.
pub const FREE_DISK_SHARE: f64 = 0.05;
/// The default cap's ceiling (8 GiB: ~350,000 tokens of SmolLM2, ~60,000 of
/// an 8B model at f16 KV).
pub const MAX_CAP_BYTES: u64 = 8 << 30;

/// Whether a slot holding about `tokens` is worth saving.
pub fn worth_saving(tokens: u32) -> bool {
    tokens >= MIN_SAVE_TOKENS
}

/// What a slot's conversation needs before it leaves its slot (the child
/// stops, another conversation takes the slot, or the pool's law moves it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeLeaving {
    /// Nothing: the next child could not use a save (`kv_keep`), or the
    /// conversation is short enough to re-read at its return.
    Nothing,
    /// Nothing new: it was saved ahead while idle and the store still
    /// holds that save (a turn since would have made it stale).
    SavedAhead,
    /// A save, now.
    Write,
}

/// What conversation of `tokens` needs before it leaves its slot:
/// `reusable`, the child's saves can be restored by its next child
/// (`kv_keep`); `saved_ahead`, it was saved while idle and the store still
/// holds that save.
pub fn before_leaving(reusable: bool, tokens: u32, saved_ahead: bool) -> BeforeLeaving {
    if !reusable || !worth_saving(tokens) {
        BeforeLeaving::Nothing
    } else if saved_ahead {
        BeforeLeaving::SavedAhead
    } else {
        BeforeLeaving::Write
    }
}

/// Whether a save of `tokens` can be restored into a child whose window is
/// `window` (llama-server refuses one that does not fit the slot, and a
/// save that fills the window leaves no room for the next message).
pub fn fits(tokens: u32, window: Option<u32>) -> bool {
    window.is_some_and(|w| tokens < w)
}

/// The default cap for `free_bytes` of free disk.
pub fn default_cap(free_bytes: Option<u64>) -> u64 {
    match free_bytes {
        Some(f) => ((f as f64 * FREE_DISK_SHARE) as u64).min(MAX_CAP_BYTES),
        None => 1 << 30,
    }
}

/// Which saves to delete, oldest first, so the rest fit `cap`: `saves` are
/// `(name, bytes, saved_at)` in any order, and `newest` is the save just
/// made. It is the last to go whatever its `saved_at` says: the dates are
/// the wall clock's, which a VM or NTP may step back, and a step must never
/// evict the one save its conversation is about to need.
pub fn evict<'a>(saves: &[(&'a str, u64, u64)], cap: u64, newest: &str) -> Vec<&'a str> {
    let mut by_age: Vec<_> = saves.to_vec();
    by_age.sort_by_key(|&(name, _, at)| (name == newest, at, name));
    let mut total: u64 = by_age.iter().map(|s| s.1).sum();
    let mut out = Vec::new();
    for (name, bytes, _) in by_age {
        if total <= cap {
            break;
        }
        total -= bytes;
        out.push(name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_conversation_needs_before_it_leaves_its_slot() {
        use BeforeLeaving::*;
        let rows = [
            // why: a save the next child cannot restore (recurrent memory) is never written
            (false, 4000, false, Nothing),
            (false, 4000, true, Nothing),
            // why: a short conversation re-reads faster than a save and a restore
            (true, MIN_SAVE_TOKENS - 1, false, Nothing),
            (true, MIN_SAVE_TOKENS, false, Write),
            // why: saved ahead while idle and still in the store: the move writes nothing
            (true, 4000, true, SavedAhead),
            (true, 4000, false, Write),
        ];
        for (i, (reusable, tokens, ahead, want)) in rows.into_iter().enumerate() {
            assert_eq!(before_leaving(reusable, tokens, ahead), want, "row {i}");
        }
    }

    #[test]
    fn what_is_saved_and_what_fits() {
        // why: a short conversation re-reads faster than a save and restore
        assert!(!worth_saving(MIN_SAVE_TOKENS - 1));
        assert!(worth_saving(MIN_SAVE_TOKENS));
        let rows = [
            (3000, Some(4096), true),
            // why: after a brake shrink the window may no longer hold it
            (5000, Some(4096), false),
            // why: a save that fills the window leaves no room for a message
            (4096, Some(4096), false),
            (10, None, false),
        ];
        for (tokens, window, want) in rows {
            assert_eq!(fits(tokens, window), want, "{tokens} in {window:?}");
        }
    }

    #[test]
    fn the_cap_and_eviction() {
        assert_eq!(default_cap(Some(100 << 30)), 5 << 30);
        assert_eq!(default_cap(Some(1 << 40)), MAX_CAP_BYTES);
        assert_eq!(default_cap(None), 1 << 30);
        let saves = [("c", 30, 3), ("a", 50, 1), ("b", 40, 2)];
        // why: oldest first until the rest fit
        assert_eq!(evict(&saves, 100, "c"), vec!["a"]);
        assert_eq!(evict(&saves, 30, "c"), vec!["a", "b"]);
        assert!(evict(&saves, 120, "c").is_empty());
        // why: a single save over the cap goes too
        assert_eq!(evict(&saves, 0, "c"), vec!["a", "b", "c"]);
        // why: the clock stepped back before "a" was saved: it is dated
        // oldest but was just made, so the older ones go first
        assert_eq!(evict(&saves, 60, "a"), vec!["b", "c"]);
        assert_eq!(evict(&saves, 50, "a"), vec!["b", "c"]);
        assert_eq!(evict(&saves, 40, "a"), vec!["b", "c", "a"]);
    }
}
