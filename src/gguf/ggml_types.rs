//! ggml tensor types: block size and bytes per block, for sizing tensors from
//! their header entry alone.
//!
//! The table mirrors `type_traits[]` in `ggml/src/ggml.c` of the pinned
//! llama.cpp build (ids from `enum ggml_type` in `ggml/include/ggml.h`, block
//! byte sizes measured with `sizeof(block_*)` from `ggml-common.h`). Ids that
//! llama.cpp has removed (4, 5, 31-33, 36-38) have `blck_size = 0` there and
//! are refused by its loader, so they are unknown here too.

/// Size facts of one ggml tensor type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    /// The numeric id stored in a GGUF tensor info.
    pub id: u32,
    /// ggml's name of the type, for messages.
    pub name: &'static str,
    /// Elements per block (1 for plain types, 32/64/128/256 for quants).
    pub block_size: u64,
    /// Bytes per block.
    pub type_size: u64,
}

/// `(id, name, block_size, type_size)` for every type the pinned ggml knows.
const TABLE: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
    (42, "Q2_0", 64, 18),
];

/// Looks up a ggml type by id; `None` for ids the pinned ggml does not know
/// (the caller turns that into `unknown tensor type N`).
pub fn ggml_type(id: u32) -> Option<GgmlType> {
    TABLE
        .iter()
        .find(|row| row.0 == id)
        .map(|&(id, name, block_size, type_size)| GgmlType {
            id,
            name,
            block_size,
            type_size,
        })
}

/// Bytes of a tensor of type `ty` with dimensions `dims`, as `ggml_nbytes`
/// computes for a contiguous tensor: `n_elements / block_size * type_size`.
///
/// Refuses, with a reason, what llama.cpp's loader refuses: a row length
/// (`dims[0]`) that is not a whole number of blocks, an element count that
/// does not fit in `i64`, and a byte size that does not fit in `u64`.
pub fn tensor_bytes(ty: GgmlType, dims: &[u64]) -> Result<u64, String> {
    let mut elements: u64 = 1;
    for &d in dims {
        elements = elements
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| format!("element count of shape {dims:?} overflows"))?;
    }
    let row = dims.first().copied().unwrap_or(1);
    if row % ty.block_size != 0 {
        return Err(format!(
            "row length {row} is not a multiple of the {} block size {}",
            ty.name, ty.block_size
        ));
    }
    (elements / ty.block_size)
        .checked_mul(ty.type_size)
        .ok_or_else(|| format!("byte size of shape {dims:?} overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_ids() {
        assert_eq!(ggml_type(12).map(|t| t.name), Some("Q4_K"));
        for removed in [4, 5, 31, 32, 33, 36, 37, 38, 43, u32::MAX] {
            assert!(ggml_type(removed).is_none(), "{removed}");
        }
    }

    #[test]
    fn sizes_match_ggml() {
        // token_embd.weight of SmolLM2-135M: Q8_0, 576 x 49152.
        let q8 = ggml_type(8).expect("Q8_0 is in the table");
        assert_eq!(tensor_bytes(q8, &[576, 49152]), Ok(30_081_024));
        let f32 = ggml_type(0).expect("F32 is in the table");
        assert_eq!(tensor_bytes(f32, &[]), Ok(4));
        assert!(tensor_bytes(q8, &[33]).is_err());
        assert!(tensor_bytes(f32, &[u64::MAX]).is_err());
        assert!(tensor_bytes(f32, &[1 << 40, 1 << 40]).is_err());
    }
}
