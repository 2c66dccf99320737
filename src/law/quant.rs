//! The quant picker: which GGUF of a model directory is the model.
//!
//! The spec's order, q4_k_m > q4_0 > q5_k_m > q8_0 > f16, then the smallest
//! remaining file; `mmproj` sidecars are never the model. Q4_K_M first: the
//! best quality per byte that every engine runs well; f16 last of the named
//! ones because it is the largest. Names are matched case-insensitively on the
//! quant tag as llama.cpp's tools write it (`model-Q4_K_M.gguf`,
//! `model.q4_k_m.gguf`). Only the first part of a split family stands for it.

/// The preferred quant tags, best first.
pub const QUANT_PREFERENCE: &[&str] = &["q4_k_m", "q4_0", "q5_k_m", "q8_0", "f16"];

/// One candidate file: its name and its size on disk (a split family's total).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The file name (not the path).
    pub name: String,
    /// Bytes on disk.
    pub size: u64,
}

/// Whether a file name is a vision projector sidecar.
pub fn is_mmproj(name: &str) -> bool {
    name.to_ascii_lowercase().contains("mmproj")
}

/// Whether `name` carries `tag` as a whole quant tag (not inside a longer one:
/// `q4_0` must not match `q4_0_4_4`).
fn has_tag(name: &str, tag: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.match_indices(tag).any(|(i, _)| {
        let before = lower[..i].chars().next_back();
        let after = lower[i + tag.len()..].chars().next();
        let sep = |c: Option<char>| c.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_');
        sep(before) && sep(after)
    })
}

/// The index of the model file among `files`, or `None` when none qualifies.
pub fn pick(files: &[Candidate]) -> Option<usize> {
    let models: Vec<usize> = (0..files.len()).filter(|&i| !is_mmproj(&files[i].name)).collect();
    for tag in QUANT_PREFERENCE {
        if let Some(&i) = models
            .iter()
            .filter(|&&i| has_tag(&files[i].name, tag))
            .min_by_key(|&&i| (files[i].size, &files[i].name))
        {
            return Some(i);
        }
    }
    models.into_iter().min_by_key(|&i| (files[i].size, &files[i].name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, size: u64) -> Candidate {
        Candidate {
            name: name.into(),
            size,
        }
    }

    #[test]
    fn picks_by_preference_then_size_never_mmproj() {
        let rows: &[(&[Candidate], Option<&str>)] = &[
            // why: q4_k_m beats every other tag, whatever the sizes
            (
                &[c("m-Q8_0.gguf", 8), c("m-Q4_K_M.gguf", 40), c("m-f16.gguf", 16)],
                Some("m-Q4_K_M.gguf"),
            ),
            // why: q4_0 is second
            (&[c("m-Q8_0.gguf", 8), c("m-Q4_0.gguf", 40)], Some("m-Q4_0.gguf")),
            // why: q5_k_m before q8_0 before f16
            (
                &[c("m.f16.gguf", 1), c("m.q8_0.gguf", 2), c("m.q5_k_m.gguf", 3)],
                Some("m.q5_k_m.gguf"),
            ),
            // why: no preferred tag: the smallest file
            (&[c("m-Q6_K.gguf", 60), c("m-Q3_K_S.gguf", 30)], Some("m-Q3_K_S.gguf")),
            // why: an mmproj is never the model, even when smallest or tagged
            (&[c("mmproj-m-f16.gguf", 1), c("m-Q6_K.gguf", 60)], Some("m-Q6_K.gguf")),
            // why: only sidecars: no model
            (&[c("mmproj-Q4_K_M.gguf", 1)], None),
            // why: q4_0 must not match the longer q4_0_4_4 tag
            (&[c("m-Q4_0_4_4.gguf", 1), c("m-Q8_0.gguf", 9)], Some("m-Q8_0.gguf")),
            (&[], None),
        ];
        for (i, (files, want)) in rows.iter().enumerate() {
            let got = pick(files).map(|k| files[k].name.as_str());
            assert_eq!(got, *want, "row {i}");
        }
    }
}
