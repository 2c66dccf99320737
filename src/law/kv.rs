//! The KV cache's shape: bytes per token of window, and what a child
//! really allocates for a window (sliding-window layers included).
//!
//! Measured on the pinned b10883 with one slot and the f16 cache, the KV
//! buffer llama-server prints is exactly n_ctx × Σ over layers of
//! (key_length + value_length) × kv_heads\[layer\] × 2 B (SmolLM2: 23,040 B per
//! token, 180.00 MiB at 8192). A recurrent layer declares 0 KV heads and
//! counts 0. A sliding-window model runs with `--swa-full` where that
//! costs no window (`law::plan`; `kv_keep`: a restored conversation is
//! reused only then), so its sliding layers hold the whole window too and
//! the formula is exact: Gemma-3-270M prints 480.00 + 96.00 MiB at 32768 =
//! 18,432 B per token. Where the full cache would bind the window, it runs
//! with the small cache (`SwaCache::Window`), whose own formula is exact
//! too (`SlidingKv`: 15.00 + 96.00 MiB at 32768, the sliding layers'
//! `swa_cells`). Only a sliding model whose layer pattern the warden does
//! not know, or a hybrid one (`kv_keep::Keep::Not`), is sized on the full
//! formula while holding just its window's cells: an over-estimate, on the
//! safe side.

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
/// `n_ctx` with the cache a model is kept with (`kv_keep::swa_full`): the
/// formula, unless the child keeps a small sliding cache (a sliding model
/// not kept, a hybrid one) and its layer pattern is known
/// (`sliding_pattern`): then `SlidingKv::bytes`. `None` for a sliding model
/// whose pattern is unknown: the mix is then unknown, and the spec's
/// placement floor counts nothing rather than guess.
pub fn kv_bytes_allocated(facts: &ModelFacts, n_ctx: u64) -> Option<u64> {
    if !is_sliding(facts) || super::kv_keep::swa_full(facts) {
        return Some(kv_bytes_per_token(facts) * n_ctx);
    }
    sliding_kv(facts).map(|s| s.bytes(n_ctx, 1))
}

/// The period llama.cpp b10883 gives each sliding architecture's layer
/// pattern when the GGUF does not say it (`set_swa_pattern(period)` in its
/// `src/models/*.cpp`): layer `l` slides when `l % period < period - 1`.
/// An architecture not listed has no pattern the warden knows, and keeps
/// the full-size cache.
pub const SWA_PERIODS: &[(&str, u32)] = &[
    ("gemma2", 2),
    ("gemma3", 6),
    ("gemma3n", 5),
    ("cohere2", 4),
    ("gpt-oss", 2),
    ("exaone4", 4),
];

/// Which layers slide: the GGUF's per-layer pattern, else its period, else
/// the architecture's (`SWA_PERIODS`); `None` when the mix is unknown.
pub fn sliding_pattern(facts: &ModelFacts) -> Option<Vec<bool>> {
    if let Some(p) = &facts.sliding_layers {
        return Some(p.clone());
    }
    let period = facts.sliding_window_period.or_else(|| {
        SWA_PERIODS
            .iter()
            .find(|(a, _)| *a == facts.architecture)
            .map(|(_, p)| *p)
    })?;
    let period = u64::from(period);
    Some(
        (0..facts.block_count as u64)
            .map(|l| period == 0 || l % period < period - 1)
            .collect(),
    )
}

/// The cells of a small sliding cache over `slots` sequences in one pool at
/// window `n_ctx`: llama.cpp's `size_swa`,
/// `GGML_PAD(min(n_ctx, n_swa * n_seq + n_ubatch), 256)`.
pub fn swa_cells(n_ctx: u64, n_swa: u64, slots: u64) -> u64 {
    pad_cells(n_ctx.min(n_swa * slots.max(1) + N_UBATCH))
}

/// A sliding model's cache when its sliding layers keep only their window
/// (no `--swa-full`): its full layers grow with the window, its sliding
/// layers hold `swa_cells`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingKv {
    /// KV bytes per token of the full-attention layers.
    pub full_per_token: u64,
    /// KV bytes per cell of the sliding layers.
    pub sliding_per_cell: u64,
    /// The sliding window, tokens.
    pub n_swa: u64,
}

impl SlidingKv {
    /// What the child allocates at window `n_ctx` over `slots` sequences.
    pub fn bytes(&self, n_ctx: u64, slots: u64) -> u64 {
        self.full_per_token * n_ctx + self.sliding_per_cell * swa_cells(n_ctx, self.n_swa, slots)
    }

    /// The sliding layers' bytes at any window past their cells (the part
    /// that does not grow with the window).
    pub fn fixed_bytes(&self, slots: u64) -> u64 {
        self.sliding_per_cell * pad_cells(self.n_swa * slots.max(1) + N_UBATCH)
    }
}

/// The small-cache shape of a sliding model whose layer pattern is known.
pub fn sliding_kv(facts: &ModelFacts) -> Option<SlidingKv> {
    let n_swa = u64::from(facts.sliding_window.filter(|&w| w > 0)?);
    let pattern = sliding_pattern(facts)?;
    let (mut full, mut sliding) = (0, 0);
    for l in 0..facts.block_count as usize {
        if pattern.get(l).copied().unwrap_or(false) {
            sliding += layer_bytes(facts, l);
        } else {
            full += layer_bytes(facts, l);
        }
    }
    Some(SlidingKv {
        full_per_token: full,
        sliding_per_cell: sliding,
        n_swa,
    })
}

/// How a sliding model's child keeps its sliding layers' cache, decided
/// per spawn by the window law (`law::plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SwaCache {
    /// Full size (`--swa-full`): a restored conversation is reused, and the
    /// KV is the full formula. Chosen where it does not cost the window.
    #[default]
    Full,
    /// The window's cells only: more window in the same memory, and a
    /// conversation is re-read after an unload (`kv_keep`).
    Window,
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

    /// The pattern of each sliding architecture, as llama.cpp expands it.
    #[test]
    fn sliding_patterns_follow_the_architecture() {
        let g = gemma3();
        let p = sliding_pattern(&g).unwrap();
        assert_eq!(p.iter().filter(|s| !**s).count(), 3, "every 6th of 18 layers is global");
        assert!(!p[5] && !p[11] && !p[17] && p[0] && p[4]);
        let two = ModelFacts {
            architecture: "gemma2".into(),
            block_count: 4,
            ..gemma3()
        };
        assert_eq!(sliding_pattern(&two), Some(vec![true, false, true, false]));
        let given = ModelFacts {
            sliding_window_period: Some(3),
            block_count: 3,
            ..gemma3()
        };
        assert_eq!(sliding_pattern(&given), Some(vec![true, true, false]));
        let unknown = ModelFacts {
            architecture: "mistral3".into(),
            ..gemma3()
        };
        assert_eq!(sliding_pattern(&unknown), None);
        assert_eq!(sliding_kv(&unknown), None);
    }

    /// The small sliding cache, against what llama-server b10883 prints
    /// without `--swa-full` (Gemma 3 270M: 15 sliding layers of 1 KiB a
    /// cell, 3 full ones).
    #[test]
    fn the_small_sliding_cache_matches_what_llama_server_prints() {
        let s = sliding_kv(&gemma3()).unwrap();
        assert_eq!((s.full_per_token, s.sliding_per_cell, s.n_swa), (3 * 1024, 15 * 1024, 512));
        for (n_ctx, slots, cells, bytes, why) in [
            (8192, 1, 1024, 15 * MIB + 24 * MIB, "one slot: 15.00 + 24.00 MiB at 8192"),
            (16384, 1, 1024, 15 * MIB + 48 * MIB, "15.00 + 48.00 MiB at 16384"),
            (32768, 1, 1024, 15 * MIB + 96 * MIB, "15.00 + 96.00 MiB at 32768"),
            (32768, 4, 2560, 2560 * 15 * 1024 + 96 * MIB, "four slots in one pool: 512 x 4 + 512 cells"),
            (768, 1, 768, 768 * 18 * 1024, "a window under the cells: all of it"),
        ] {
            assert_eq!(swa_cells(n_ctx, 512, slots), cells, "{why}");
            assert_eq!(s.bytes(n_ctx, slots), bytes, "{why}");
        }
        assert_eq!(s.fixed_bytes(1), 15 * MIB);
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
