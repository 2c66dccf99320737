//! [`Pooling`]: how a model folds its token vectors into one per input
//! (`{arch}.pooling_type`). A header that declares a pooling is an
//! embedding (or rerank) model's; chat models carry no such key.

/// `{arch}.pooling_type`, numbered as llama.cpp b10883's
/// `LLAMA_POOLING_TYPE_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// 0: one vector per token, which `/v1/embeddings` cannot return.
    None,
    /// 1: the mean of the token vectors (sentence-transformers' MiniLM).
    Mean,
    /// 2: the first token's (`[CLS]`) vector.
    Cls,
    /// 3: the last token's vector (decoder-based embedders).
    Last,
    /// 4: a relevance score from a classifier head: a reranker.
    Rank,
    /// A number llama.cpp does not define (it aborts on such a model at its
    /// first embedding).
    Other(u32),
}

impl Pooling {
    /// The pooling a header's number stands for.
    pub fn from_u32(n: u32) -> Self {
        match n {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            n => Pooling::Other(n),
        }
    }

    /// Whether it gives one vector (or score) per input, as
    /// `/v1/embeddings` and `/v1/rerank` answer.
    pub fn per_input(self) -> bool {
        matches!(self, Pooling::Mean | Pooling::Cls | Pooling::Last | Pooling::Rank)
    }
}

#[cfg(test)]
mod tests {
    use super::Pooling;

    /// Each of llama.cpp's numbers maps to its pooling, and only the ones
    /// that fold the tokens give a vector per input.
    #[test]
    fn numbers_follow_llama_cpp() {
        let rows = [
            (0, Pooling::None, false), // why: per-token vectors
            (1, Pooling::Mean, true),  // why: all-MiniLM-L6-v2's
            (2, Pooling::Cls, true),
            (3, Pooling::Last, true),
            (4, Pooling::Rank, true),      // why: a reranker's score is per input too
            (5, Pooling::Other(5), false), // why: not a number b10883 defines
            (u32::MAX, Pooling::Other(u32::MAX), false),
        ];
        for (i, (n, want, per_input)) in rows.into_iter().enumerate() {
            let got = Pooling::from_u32(n);
            assert_eq!((got, got.per_input()), (want, per_input), "row {i}: {n}");
        }
    }
}
