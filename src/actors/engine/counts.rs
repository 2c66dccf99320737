//! What the child says it did in a turn: its `timings` object (llama-server
//! puts it on the last event of a stream and in a whole answer), read for
//! the tokens the slot holds afterwards: the prompt tokens it reused
//! (`cache_n`), the ones it processed (`prompt_n`) and the ones it generated
//! (`predicted_n`). The KV store decides on that count whether a
//! conversation is worth saving (`law::kv_save::MIN_SAVE_TOKENS`); an
//! estimate from the request's size counted a short conversation with a
//! large `max_tokens` as long. Also the decode rate the child measured
//! itself (`predicted_n` over `predicted_ms`): what a turn's tokens per
//! second is, since the relay's own clock also counts the events that carry
//! no token and the wait for the last one.

use memchr::memmem;
use serde_json::Value;

/// The child's own counts for one turn.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ChildCounts {
    /// Prompt tokens reused from the slot's cache.
    pub cache_n: u32,
    /// Prompt tokens processed.
    pub prompt_n: u32,
    /// Tokens generated.
    pub predicted_n: u32,
    /// The time the child spent generating them, in milliseconds.
    pub predicted_ms: Option<f64>,
}

impl ChildCounts {
    /// The tokens the slot holds after the turn.
    pub fn slot_tokens(self) -> u32 {
        self.cache_n
            .saturating_add(self.prompt_n)
            .saturating_add(self.predicted_n)
    }

    /// The counts in a JSON text (an SSE event's data or a whole answer),
    /// `None` when it carries no `timings` (checked by a byte search first,
    /// so the events of a stream that do not carry them cost no parse).
    pub fn read(json: &[u8]) -> Option<Self> {
        memmem::find(json, b"\"timings\"")?;
        let v: Value = serde_json::from_slice(json).ok()?;
        let t = v.get("timings")?;
        let n = |k: &str| {
            t.get(k)
                .and_then(Value::as_u64)
                .map(|n| n.min(u64::from(u32::MAX)) as u32)
        };
        Some(Self {
            cache_n: n("cache_n").unwrap_or(0),
            prompt_n: n("prompt_n")?,
            predicted_n: n("predicted_n").unwrap_or(0),
            predicted_ms: t.get("predicted_ms").and_then(Value::as_f64),
        })
    }

    /// Decode tokens over decode time, as the child measured them: `None`
    /// without a generated token or a time (a one-token answer has no
    /// decode interval).
    pub fn decode_per_s(self) -> Option<f64> {
        let ms = self.predicted_ms.filter(|ms| *ms > 0.0)?;
        (self.predicted_n >= 1).then(|| f64::from(self.predicted_n) * 1000.0 / ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_from_the_timings_only() {
        let rows: [(&[u8], Option<u32>); 4] = [
            // why: the last event of a stream: reused + processed + generated
            (
                br#"{"choices":[],"timings":{"cache_n":40,"prompt_n":7,"predicted_n":40,"predicted_ms":1.0}}"#,
                Some(87),
            ),
            // why: a token event carries no timings
            (br#"{"choices":[{"delta":{"content":"timings"}}]}"#, None),
            // why: no prompt_n, no count
            (br#"{"timings":{}}"#, None),
            (b"not json \"timings\"", None),
        ];
        for (i, (json, want)) in rows.into_iter().enumerate() {
            assert_eq!(ChildCounts::read(json).map(ChildCounts::slot_tokens), want, "row {i}");
        }
    }

    /// A turn's decode rate is the child's tokens over the child's time: 9
    /// tokens in 90 ms is 100 tok/s, whatever the relay waited around them.
    #[test]
    fn the_decode_rate_is_the_childs_own() {
        let rows: [(&[u8], Option<f64>); 4] = [
            (br#"{"timings":{"prompt_n":5,"predicted_n":9,"predicted_ms":90.0}}"#, Some(100.0)),
            // why: no time measured, no rate (never a division by zero)
            (br#"{"timings":{"prompt_n":5,"predicted_n":9,"predicted_ms":0}}"#, None),
            (br#"{"timings":{"prompt_n":5,"predicted_n":9}}"#, None),
            (br#"{"timings":{"prompt_n":5,"predicted_n":0,"predicted_ms":3.0}}"#, None),
        ];
        for (i, (json, want)) in rows.into_iter().enumerate() {
            let got = ChildCounts::read(json).and_then(ChildCounts::decode_per_s);
            assert_eq!(got, want, "row {i}");
        }
    }
}
