//! The KV cache's shape: bytes per token of window, and what a child
//! really allocates for a window (sliding-window layers included).
//!
//! Measured on the pinned b10883 with one slot and the f16 cache, the KV
//! buffer llama-server prints is exactly n_ctx × Σ over layers of
//! (key_length + value_length) × kv_heads\[layer\] × 2 B (SmolLM2: 23,040 B per
//! token, 180.00 MiB at 8192). A recurrent layer declares 0 KV heads and
//! counts 0. A sliding-window model runs with `--swa-full` (`kv_keep`: a
//! restored conversation is reused only then), so its sliding layers hold
//! the whole window too and the formula is exact: Gemma-3-270M prints
//! 480.00 + 96.00 MiB at 32768 = 18,432 B per token (without the flag,
//! 15.00 + 96.00 MiB). Only a sliding model the warden does not run that
//! way (a hybrid one, `kv_keep::Keep::Not`) holds just its window's cells,
//! and the formula over-estimates it, on the safe side.

use crate::gguf::ModelFacts;

/// Bytes of one f16 cache element.
const F16_BYTES: u64 = 2;
/// llama.cpp's default micro-batch (`n_ubatch`): sizes the sliding cache.
pub const N_UBATCH: u64 = 512;
/// llama.cpp pads every cache it allocates to this many cells.
pub const CACHE_PAD_CELLS: u64 = 256;

/// KV bytes of one layer per cell.
fn layer_bytes(facts: &ModelFacts, layer: usize) -> u64 {
    let heads = facts.kv_heads.get(layer).copied().unwrap_or(0) as u64;
    (facts.key_length as u64 + facts.value_length as u64) * heads * F16_BYTES
}

/// The full-attention formula: KV bytes per token of window, every layer.
pub fn kv_bytes_per_token(facts: &ModelFacts) -> u64 {
    (0..facts.block_count as usize).map(|l| layer_bytes(facts, l)).sum()
}

/// `n` rounded up to the cache padding.
pub fn pad_cells(n: u64) -> u64 {
    n.div_ceil(CACHE_PAD_CELLS) * CACHE_PAD_CELLS
}

/// The KV bytes a child with one sequence really allocates at window
/// `n_ctx`: the formula, unless the child keeps a small sliding cache (a
/// sliding model without `--swa-full`) and the GGUF says which layers
/// slide: sliding layers hold
/// `min(n_ctx, pad(window + n_ubatch))` cells (llama.cpp's `n_ctx_swa` for
/// one sequence), the others `n_ctx`. `None` for a sliding-window model whose
/// GGUF carries no layer pattern: the mix is then unknown, and the spec's
/// placement floor counts nothing rather than guess.
pub fn kv_bytes_allocated(facts: &ModelFacts, n_ctx: u64) -> Option<u64> {
    let Some(window) = facts
        .sliding_window
        .filter(|&w| w > 0 && !super::kv_keep::swa_full(facts))
    else {
        return Some(kv_bytes_per_token(facts) * n_ctx);
    };
    let pattern = facts.sliding_layers.as_ref()?;
    let swa_cells = n_ctx.min(pad_cells(window as u64 + N_UBATCH));
    Some(
        (0..facts.block_count as usize)
            .map(|l| {
                let cells = if pattern.get(l).copied().unwrap_or(false) {
                    swa_cells
                } else {
                    n_ctx
                };
                layer_bytes(facts, l) * cells
            })
            .sum(),
    )
}

/// Whether the model uses a sliding window (Gemma lineage).
pub fn is_sliding(facts: &ModelFacts) -> bool {
    facts.sliding_window.is_some_and(|w| w > 0)
}

/// Whether the formula over-estimates the model's KV: a sliding window
/// whose child keeps only the window's cells (no `--swa-full`). Such a
/// window is never reported memory-bound.
pub fn is_over_estimated(facts: &ModelFacts) -> bool {
    is_sliding(facts) && !super::kv_keep::swa_full(facts)
}

/// Whether the model uses MLA (DeepSeek lineage, `kv_lora_rank`): the formula
/// does not model it, so the warden passes no `-c` and lets fit size it.
pub fn is_mla(facts: &ModelFacts) -> bool {
    facts.kv_lora_rank.is_some_and(|r| r > 0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Facts shaped like SmolLM2-135M (llama, 30 layers, 3 KV heads, 64/64).
    pub(crate) fn smollm2() -> ModelFacts {
        ModelFacts {
            architecture: "llama".into(),
            block_count: 30,
            trained_window: Some(8192),
            embedding_length: 576,
            head_count: vec![9; 30],
            kv_heads: vec![3; 30],
            key_length: 64,
            value_length: 64,
            weights_bytes: 98_362_432,
            has_chat_template: true,
            fill_in_middle: false,
            ..ModelFacts::default()
        }
    }

    /// Facts shaped like Gemma-3-270M (18 layers, 1 KV head, 256/256, SWA 512).
    pub(crate) fn gemma3() -> ModelFacts {
        ModelFacts {
            architecture: "gemma3".into(),
            block_count: 18,
            trained_window: Some(32768),
            embedding_length: 640,
            head_count: vec![4; 18],
            kv_heads: vec![1; 18],
            key_length: 256,
            value_length: 256,
            sliding_window: Some(512),
            weights_bytes: 253_113_024,
            has_chat_template: true,
            fill_in_middle: false,
            ..ModelFacts::default()
        }
    }

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn per_token_formula_matches_the_buffers_llama_server_prints() {
        let rows: &[(ModelFacts, u64, &str)] = &[
            // why: SmolLM2 prints KV buffer size = 180.00 MiB at -c 8192
            (smollm2(), 23_040, "smollm2"),
            // why: the full formula for Gemma-3-270M: 144 MiB at 8192 (exact with --swa-full)
            (gemma3(), 18_432, "gemma3"),
        ];
        for (i, (facts, want, name)) in rows.iter().enumerate() {
            assert_eq!(kv_bytes_per_token(facts), *want, "row {i} ({name})");
        }
        assert_eq!(kv_bytes_per_token(&smollm2()) * 8192, 180 * MIB);
        assert_eq!(kv_bytes_per_token(&gemma3()) * 8192, 144 * MIB);
    }

    #[test]
    fn recurrent_layers_count_zero() {
        let mut f = smollm2();
        f.kv_heads[0] = 0;
        f.kv_heads[1] = 0;
        assert_eq!(kv_bytes_per_token(&f), 23_040 / 30 * 28);
    }

    #[test]
    fn what_a_child_allocates() {
        let mut g = gemma3();
        // gemma3's rule in llama.cpp: every 6th layer is global
        let pattern: Vec<bool> = (0..18).map(|l| (l + 1) % 6 != 0).collect();
        // why: Gemma runs with --swa-full: it prints 480.00 + 96.00 MiB at -c 32768
        assert_eq!(kv_bytes_allocated(&g, 32768), Some(480 * MIB + 96 * MIB));
        assert!(!is_over_estimated(&g));
        // why: the layer pattern does not matter with a full-size sliding cache
        g.sliding_layers = Some(pattern.clone());
        assert_eq!(kv_bytes_allocated(&g, 8192), Some(144 * MIB));
        // why: a full-attention model allocates the formula exactly
        assert_eq!(kv_bytes_allocated(&smollm2(), 8192), Some(180 * MIB));
        // A sliding hybrid (not kept, so no --swa-full): only its window.
        let mut h = ModelFacts {
            architecture: "jamba".into(),
            ..gemma3()
        };
        assert!(is_over_estimated(&h));
        // why: without a pattern key the mix is unknown
        assert_eq!(kv_bytes_allocated(&h, 8192), None);
        h.sliding_layers = Some(pattern);
        // why: Gemma-3-270M's shape without the flag prints 15.00 MiB (SWA, 1024 cells) + 24.00 MiB
        assert_eq!(kv_bytes_allocated(&h, 8192), Some(15 * MIB + 24 * MIB));
        // why: at -c 16384 it prints 15.00 + 48.00 MiB
        assert_eq!(kv_bytes_allocated(&h, 16384), Some(15 * MIB + 48 * MIB));
    }
}
