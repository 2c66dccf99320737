//! Whether a model's saved KV cache can be used again (`kv_save`), what its
//! llama-server child needs for that, and whether a restore was used. Pure:
//! from the GGUF facts and the child's own timings.
//!
//! Read in the pinned b10883's `tools/server/server-context.cpp`: a slot
//! restore (`action=restore`) loads the sequence's KV and its tokens and
//! clears the slot's context checkpoints (`slot->prompt.clear()`). At the
//! next turn, when the slot's oldest kept position is at or past
//! `n_past - n_swa` (`pos_min >= pos_min_thold`), the reuse needs a
//! checkpoint; with none the child re-reads the whole prompt ("forcing
//! full prompt re-processing due to lack of cache data"). A sliding-window
//! cache keeps only the last window's cells, a recurrent one only the last
//! position, so both always need one, and a restored slot never has one.
//! `--swa-full` gives the sliding layers a full-size cache and sets
//! `n_swa = 0`: the restored slot then holds every position and is reused
//! like a full-attention one (and no checkpoints are made at all). Nothing
//! in b10883 saves the checkpoints with the slot, and a recurrent state has
//! no full-size form: those models are not kept.
//!
//! Measured on the pinned llama-server (2 cores, shared and loaded, so the
//! times are rough) with `scripts/measure_kv_restore.py SERVER MODEL 32768
//! 130 [--swa-full]`: Gemma 3 270M at `-c 32768` (the window the law gives
//! it here), a 2,336-token conversation saved, the child restarted and
//! restored, then the next turn:
//!
//! | candidate | KV buffers | child anon. after 3 turns | checkpoints | next turn after restore |
//! |---|---|---|---|---|
//! | llama-server's default | 15 + 96 MiB | 273 MB | 9 of 7.5 MiB (up to 32) | 2,373 processed, 0 reused |
//! | `--swa-full` (chosen) | 480 + 96 MiB = the law's 18,432 B x 32768 | 713 MB | none | 37 processed, 2,336 reused |
//! | checkpoints saved with the slot | - | - | - | not possible: the slot file holds tokens and KV only, and a restore clears them |
//!
//! Without an interruption the same turn processed 37 tokens either way;
//! the save file was 15.1 MB and the restore 5 ms with both. Time: the
//! 2,321-token first read took 9.8 s / 30.3 s and 78.9 s / 65.7 s in two
//! default / `--swa-full` pairs, decode 2.0 / 2.3 and 0.7 / 1.1 tok/s:
//! no cost above this machine's noise. The flag's cost is in the load:
//! llama-server alone, `-c 32768`, started until `/health` said 200, three
//! alternated pairs on a quiet machine (`scripts/measure_swa_full_load.sh`): 873 / 807 / 839 ms
//! without it, 1,163 / 1,134 / 1,134 ms with it (+0.3 s), VmRSS 424 / 888
//! MiB. Through the warden a restored Gemma turn after a reap is then
//! 1.2-1.3 s (the load 1.1 s of it) against 3.4-8.2 s re-read (bench kv).
//! A tiny Mamba (`scripts/gen_mamba_model.py`): 39 tokens
//! processed without the interruption, 655 of 655 after the restore.

use serde::Serialize;

use crate::gguf::ModelFacts;

/// Architectures whose memory is recurrent only (`llm_arch_is_recurrent`
/// of the pinned llama.cpp).
pub const RECURRENT_ARCHS: &[&str] = &["mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"];

/// Architectures that mix attention with recurrent layers
/// (`llm_arch_is_hybrid` of the pinned llama.cpp).
pub const HYBRID_ARCHS: &[&str] = &[
    "jamba",
    "falcon-h1",
    "plamo2",
    "granitehybrid",
    "lfm2",
    "lfm2moe",
    "nemotron_h",
    "nemotron_h_moe",
    "qwen3next",
    "kimi-linear",
    "bailingmoe3",
    "kimi-k3",
    "qwen35",
    "qwen35moe",
    "qwen4exp",
    "deepseek4",
    "minimax-01",
];

/// Prompt tokens a turn after a restore may re-read beyond the last answer
/// and still count as reusing the restored cache: the chat template's
/// end-of-turn markers after that answer (2 to 5 tokens in the templates
/// here) and the one token llama-server always evaluates, with room.
pub const REUSE_SLACK_TOKENS: u32 = 16;

/// How a model's conversation cache can be kept across the warden's own
/// interruptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Keep {
    /// Full attention (or facts unread): a restored slot is reused as is.
    Plain,
    /// Sliding-window attention: kept when the child runs with
    /// `--swa-full`, which makes its KV exactly the full formula.
    FullSwa,
    /// Not kept: no save is written and the status says why.
    Not(NotKept),
}

/// Why a model's cache is not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotKept {
    /// Recurrent memory (Mamba, RWKV): one state, at the last position.
    Recurrent,
    /// Attention mixed with recurrent layers (Jamba, Qwen3-Next, LFM2, ...).
    Hybrid,
    /// A sliding-window model whose child keeps only the window's cells
    /// (`kv::SwaCache::Window`): the law chose more window over keeping.
    SlidingWindow,
}

impl NotKept {
    /// The reason, as the log, the status and `ps` say it.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Recurrent => {
                "recurrent memory: the state a save holds is its last position only, and llama-server re-reads the whole prompt after restoring it"
            }
            Self::Hybrid => {
                "hybrid attention and recurrent memory: the recurrent state a save holds is its last position only, and llama-server re-reads the whole prompt after restoring it"
            }
            Self::SlidingWindow => {
                "sliding-window cache kept to its window so that a larger window fits memory: it holds only the last window's cells, so its conversations are re-read after an unload"
            }
        }
    }

    /// A word for narrow places (`ps`).
    pub fn word(self) -> &'static str {
        match self {
            Self::Recurrent => "recurrent",
            Self::Hybrid => "hybrid",
            Self::SlidingWindow => "sliding_window",
        }
    }
}

/// How `facts`' cache is kept; `None` (header unread) is tried as plain,
/// and a restore it does not use is then the WARNING `reuse` decides.
pub fn keep(facts: Option<&ModelFacts>) -> Keep {
    let Some(f) = facts else { return Keep::Plain };
    let arch = f.architecture.as_str();
    if RECURRENT_ARCHS.contains(&arch) {
        Keep::Not(NotKept::Recurrent)
    } else if HYBRID_ARCHS.contains(&arch) {
        Keep::Not(NotKept::Hybrid)
    } else if super::kv::is_sliding(f) {
        Keep::FullSwa
    } else {
        Keep::Plain
    }
}

/// Whether the model can be kept with a full-size sliding cache
/// (`--swa-full`, chosen per spawn by `law::plan` as `kv::SwaCache`).
pub fn swa_full(facts: &ModelFacts) -> bool {
    keep(Some(facts)) == Keep::FullSwa
}

/// How a spawn of `facts` with sliding cache `cache` keeps its cache: a
/// sliding model kept to its window is not kept.
pub fn keep_at(facts: Option<&ModelFacts>, cache: super::kv::SwaCache) -> Keep {
    match (keep(facts), cache) {
        (Keep::FullSwa, super::kv::SwaCache::Window) => Keep::Not(NotKept::SlidingWindow),
        (k, _) => k,
    }
}

/// Whether the first turn after a restore used it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// The child reused the restored tokens, up to the last answer.
    Reused,
    /// It did not.
    Missed(Miss),
}

/// Why a restore was not used, as far as the child's timings tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// The child kept none of it (`cache_n` 0): its memory could not resume
    /// from the restored slot (no context checkpoint), or the prompt
    /// differs from its very first token.
    Discarded,
    /// The child kept only the first `cache_n` tokens: the prompt leaves
    /// the saved conversation there (its history was edited or compacted,
    /// or the template renders past turns differently).
    Diverged,
}

impl Miss {
    /// The reason, for the WARNING.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Discarded => {
                "the child kept nothing of the restored cache (a memory it cannot resume without context checkpoints, or a prompt that differs from its first token)"
            }
            Self::Diverged => {
                "the prompt leaves the saved conversation early (its history was edited or compacted, or the chat template renders past turns differently)"
            }
        }
    }
}

/// Whether a turn that reused `cache_n` prompt tokens used a restore of
/// `restored` tokens whose last `answer` were the model's own answer (a
/// client may send that answer back otherwise, e.g. trimmed).
pub fn reuse(restored: u32, answer: u32, cache_n: u32) -> Reuse {
    if cache_n.saturating_add(answer).saturating_add(REUSE_SLACK_TOKENS) >= restored {
        Reuse::Reused
    } else if cache_n == 0 {
        Reuse::Missed(Miss::Discarded)
    } else {
        Reuse::Missed(Miss::Diverged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::law::kv::tests::{gemma3, smollm2};

    #[test]
    fn which_shapes_are_kept_and_how() {
        let arch = |a: &str| ModelFacts {
            architecture: a.into(),
            ..smollm2()
        };
        let rows: Vec<(Option<ModelFacts>, Keep)> = vec![
            // why: full attention: the restored KV is every position
            (Some(smollm2()), Keep::Plain),
            // why: a sliding window needs a full-size SWA cache to resume
            (Some(gemma3()), Keep::FullSwa),
            // why: a recurrent state is the last position only
            (Some(arch("mamba")), Keep::Not(NotKept::Recurrent)),
            (Some(arch("rwkv7")), Keep::Not(NotKept::Recurrent)),
            // why: a hybrid's recurrent layers, likewise
            (Some(arch("qwen3next")), Keep::Not(NotKept::Hybrid)),
            (Some(arch("lfm2")), Keep::Not(NotKept::Hybrid)),
            // why: a sliding window declared as 0 is no window
            (
                Some(ModelFacts {
                    sliding_window: Some(0),
                    ..gemma3()
                }),
                Keep::Plain,
            ),
            // why: unread facts are tried; a miss is then said
            (None, Keep::Plain),
        ];
        for (i, (facts, want)) in rows.iter().enumerate() {
            assert_eq!(keep(facts.as_ref()), *want, "row {i}");
            // why: a full-size sliding cache changes nothing
            assert_eq!(keep_at(facts.as_ref(), crate::law::kv::SwaCache::Full), *want, "row {i}");
        }
        // why: a sliding cache kept to its window is not kept; nothing else changes
        use crate::law::kv::SwaCache::Window;
        assert_eq!(keep_at(Some(&gemma3()), Window), Keep::Not(NotKept::SlidingWindow));
        assert_eq!(keep_at(Some(&smollm2()), Window), Keep::Plain);
    }

    #[test]
    fn whether_a_restore_was_used() {
        let rows = [
            // (restored, answer, cache_n, verdict)
            // why: everything up to the new message reused
            (2600, 16, 2599, Reuse::Reused),
            // why: the client sent its own text for the last answer
            (2600, 16, 2584, Reuse::Reused),
            // why: plus the template's end-of-turn markers
            (2600, 16, 2600 - 16 - REUSE_SLACK_TOKENS, Reuse::Reused),
            // why: one more token re-read is a miss
            (
                2600,
                16,
                2600 - 16 - REUSE_SLACK_TOKENS - 1,
                Reuse::Missed(Miss::Diverged),
            ),
            // why: the SWA symptom: a full re-read
            (2600, 16, 0, Reuse::Missed(Miss::Discarded)),
            // why: only the template's opening shared
            (2600, 16, 12, Reuse::Missed(Miss::Diverged)),
            // why: a tiny restore is always within the slack
            (10, 0, 0, Reuse::Reused),
        ];
        for (i, (restored, answer, cache_n, want)) in rows.into_iter().enumerate() {
            assert_eq!(reuse(restored, answer, cache_n), want, "row {i}");
        }
    }
}
