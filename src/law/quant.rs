//! The quant picker: which GGUF of a model directory is the model.
//!
//! The spec's order, q4_k_m > q4_0 > q5_k_m > q8_0 > f16, then the smallest
//! remaining file; `mmproj` sidecars are never the model. Q4_K_M first: the
//! best quality per byte that every engine runs well; f16 last of the named
//! ones because it is the largest. Names are matched case-insensitively on the
//! quant tag as llama.cpp's tools write it (`model-Q4_K_M.gguf`,
//! `model.q4_k_m.gguf`). Only the first part of a split family stands for it.
//!
//! `pull` chooses among a hub repository's files by the same order, among
//! those that fit this machine (`pull_choice`): a file fits when its weights
//! and `PULL_HEADROOM_BYTES` (the compute buffer and a floor window's KV of
//! a small model) fit the CPU budget, 0.75 of the RAM total. A quant the
//! person names is fetched whatever its size (`with_tag`).

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

/// What `pull` leaves beside the weights in the CPU budget.
pub const PULL_HEADROOM_BYTES: u64 = 512 * 1024 * 1024;

/// The share of RAM a pulled model's weights may take, with the headroom.
pub fn pull_budget(ram_bytes: u64) -> u64 {
    ((ram_bytes as f64 * super::window::CPU_RAM_FRACTION) as u64).saturating_sub(PULL_HEADROOM_BYTES)
}

/// What `pull` fetches when no quant is named: `Ok` the index `pick` gives
/// among the files whose size fits `budget_bytes`; `Err` with the smallest
/// model file when none fits (`None`: no model file at all).
pub fn pull_choice(files: &[Candidate], budget_bytes: u64) -> Result<usize, Option<usize>> {
    let fitting: Vec<usize> = (0..files.len()).filter(|&i| files[i].size <= budget_bytes).collect();
    let sub: Vec<Candidate> = fitting.iter().map(|&i| files[i].clone()).collect();
    match pick(&sub) {
        Some(k) => Ok(fitting[k]),
        None => Err((0..files.len())
            .filter(|&i| !is_mmproj(&files[i].name))
            .min_by_key(|&i| (files[i].size, &files[i].name))),
    }
}

/// The model file carrying the quant `tag` a person named (any case;
/// the smallest when several do), never a sidecar.
pub fn with_tag(files: &[Candidate], tag: &str) -> Option<usize> {
    let tag = tag.to_ascii_lowercase();
    (0..files.len())
        .filter(|&i| !is_mmproj(&files[i].name) && has_tag(&files[i].name, &tag))
        .min_by_key(|&i| (files[i].size, &files[i].name))
}

/// The quant tag of a file name, as llama.cpp's tools write it (the last
/// `-` or `.` separated word before `.gguf`, a split family's part number
/// left out): what a refusal lists.
pub fn tag_of(name: &str) -> &str {
    let stem = name.strip_suffix(".gguf").unwrap_or(name);
    let stem = match stem.rfind("-of-").and_then(|i| stem[..i].rfind('-')) {
        Some(j) => &stem[..j],
        None => stem,
    };
    stem.rsplit(['-', '.']).next().unwrap_or(stem)
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

    #[test]
    fn pull_chooses_what_fits_this_machine() {
        const GIB: u64 = 1 << 30;
        let repo = [
            c("m-Q4_K_M.gguf", 5 * GIB),
            c("m-Q2_K.gguf", 3 * GIB),
            c("m-Q8_0.gguf", 9 * GIB),
            c("mmproj-m-f16.gguf", GIB / 2),
        ];
        let rows: &[(u64, Result<&str, Option<&str>>)] = &[
            // why: 24 GiB: the preferred quant fits
            (24 * GIB, Ok("m-Q4_K_M.gguf")),
            // why: 8 GiB (a 5.5 GiB budget): Q4_K_M still fits
            (8 * GIB, Ok("m-Q4_K_M.gguf")),
            // why: 6 GiB (a 4 GiB budget): only the smaller Q2_K fits
            (6 * GIB, Ok("m-Q2_K.gguf")),
            // why: 2 GiB: nothing fits; the smallest model file is named, never the projector
            (2 * GIB, Err(Some("m-Q2_K.gguf"))),
        ];
        for (i, (ram, want)) in rows.iter().enumerate() {
            let got = pull_choice(&repo, pull_budget(*ram))
                .map(|k| repo[k].name.as_str())
                .map_err(|e| e.map(|k| repo[k].name.as_str()));
            assert_eq!(got, *want, "row {i}");
        }
        assert_eq!(pull_choice(&[c("mmproj-f16.gguf", 1)], GIB), Err(None));
        // why: a named quant, whatever its size or case; never a sidecar
        assert_eq!(with_tag(&repo, "Q8_0"), Some(2));
        assert_eq!(with_tag(&repo, "q2_k"), Some(1));
        assert_eq!(with_tag(&repo, "Q6_K"), None);
        assert_eq!(with_tag(&repo, "f16"), None);
        for (name, tag) in [
            ("m-Q4_K_M.gguf", "Q4_K_M"),
            ("m.q8_0.gguf", "q8_0"),
            ("big-Q8_0-00001-of-00003.gguf", "Q8_0"),
            ("plain.gguf", "plain"),
        ] {
            assert_eq!(tag_of(name), tag, "{name}");
        }
    }
}
