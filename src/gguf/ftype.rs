//! llama.cpp's `LLAMA_FTYPE` table (`include/llama.h` of the pinned build):
//! the number stored in `general.file_type` and the quantization it names.

/// `(general.file_type, name)`. Removed ftypes (4-6, 33-35) are absent, so
/// they read as unknown.
const TABLE: &[(u32, &str)] = &[
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (7, "Q8_0"),
    (8, "Q5_0"),
    (9, "Q5_1"),
    (10, "Q2_K"),
    (11, "Q3_K_S"),
    (12, "Q3_K_M"),
    (13, "Q3_K_L"),
    (14, "Q4_K_S"),
    (15, "Q4_K_M"),
    (16, "Q5_K_S"),
    (17, "Q5_K_M"),
    (18, "Q6_K"),
    (19, "IQ2_XXS"),
    (20, "IQ2_XS"),
    (21, "Q2_K_S"),
    (22, "IQ3_XS"),
    (23, "IQ3_XXS"),
    (24, "IQ1_S"),
    (25, "IQ4_NL"),
    (26, "IQ3_S"),
    (27, "IQ3_M"),
    (28, "IQ2_S"),
    (29, "IQ2_M"),
    (30, "IQ4_XS"),
    (31, "IQ1_M"),
    (32, "BF16"),
    (36, "TQ1_0"),
    (37, "TQ2_0"),
    (38, "MXFP4_MOE"),
    (39, "NVFP4"),
    (40, "Q1_0"),
    (41, "Q2_0"),
];

/// The name of a `general.file_type` value (`3` is `Q4_1`, `15` is
/// `Q4_K_M`), or `None` for a number the pinned llama.cpp does not define.
pub fn ftype_name(file_type: u32) -> Option<&'static str> {
    TABLE.iter().find(|row| row.0 == file_type).map(|row| row.1)
}

#[cfg(test)]
mod tests {
    use super::ftype_name;

    #[test]
    fn table_matches_llama_h() {
        assert_eq!(ftype_name(3), Some("Q4_1"));
        assert_eq!(ftype_name(15), Some("Q4_K_M"));
        assert_eq!(ftype_name(32), Some("BF16"));
        assert_eq!(ftype_name(4), None);
        assert_eq!(ftype_name(1024), None);
    }
}
