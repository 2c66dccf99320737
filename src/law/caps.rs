//! The window grid. llama.cpp pads the window it allocates up to a multiple
//! of 256 (`GGML_PAD(n_ctx, 256)` in llama-context.cpp; `/props` reports the
//! padded value), so every window and cap the warden sets is a multiple of
//! 256 (never under the 4096 floor), and every comparison with an allocated
//! window pads the other side first: an unpadded cap would stay below the
//! window its own respawn allocates and respawn again at every turn, and a
//! pin off the grid (`WARDEN_CTX=8000`) would draw a mismatch warning.

/// The grid of windows and caps.
pub const WINDOW_GRID_TOKENS: u32 = 256;
/// The smallest window the warden gives (the floor `--fit` applies too).
pub const WINDOW_FLOOR_TOKENS: u32 = 4096;

/// `n` rounded down to the grid (not floored).
pub fn round_down(n: u32) -> u32 {
    n / WINDOW_GRID_TOKENS * WINDOW_GRID_TOKENS
}

/// A cap: `n` rounded down to the grid, never under the floor.
pub fn cap(n: u32) -> u32 {
    round_down(n).max(WINDOW_FLOOR_TOKENS)
}

/// `n` padded up to the grid, as llama.cpp allocates it.
pub fn pad(n: u32) -> u32 {
    n.div_ceil(WINDOW_GRID_TOKENS).saturating_mul(WINDOW_GRID_TOKENS)
}

/// Whether an allocated window matches the `-c` requested, compared padded.
pub fn matches_requested(allocated: u32, requested: u32) -> bool {
    pad(allocated) == pad(requested)
}

/// Whether a child at `allocated` already honours `cap` (both padded): no
/// respawn is needed for it.
#[cfg(any(test, feature = "testing"))]
pub fn honours(allocated: u32, cap: u32) -> bool {
    pad(allocated) <= pad(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_rules() {
        let rows: &[(u32, u32, u32, u32)] = &[
            // (n, round_down, cap, pad)
            // why: on the grid, everything is identity
            (8192, 8192, 8192, 8192),
            // why: a user pin off the grid pads up like llama.cpp does
            (8000, 7936, 7936, 8192),
            // why: a cap never goes under the floor
            (1000, 768, 4096, 1024),
            (0, 0, 4096, 0),
        ];
        for (i, &(n, rd, c, p)) in rows.iter().enumerate() {
            assert_eq!((round_down(n), cap(n), pad(n)), (rd, c, p), "row {i}: n={n}");
        }
        // why: WARDEN_CTX=8000 allocates 8192 and draws no mismatch
        assert!(matches_requested(8192, 8000));
        assert!(!matches_requested(8192, 4096));
        // why: a cap of 6000 is honoured by the 6144 its own respawn allocates
        assert!(honours(6144, 6000));
        assert!(!honours(8192, 6144));
    }
}
