//! Split model families (`name-00001-of-00003.gguf`, written by
//! `llama-gguf-split`): finding the parts, checking each one, and refusing a
//! family with a missing part.

use std::path::{Path, PathBuf};

use super::error::GgufError;
use super::reader::{GgufHeader, read_header};

/// Where a path sits in a split family, parsed from its file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitName {
    /// Everything before `-NNNNN-of-MMMMM.gguf`, directory included.
    pub prefix: PathBuf,
    /// This file's 1-based part number.
    pub part: u32,
    /// How many parts the name says the family has.
    pub count: u32,
}

impl SplitName {
    /// Parses llama.cpp's split naming (`%s-%05d-of-%05d.gguf`); `None` when
    /// the name does not follow it or the numbers are out of order.
    pub fn parse(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        let stem = name.strip_suffix(".gguf")?;
        // "-00001-of-00003" is 15 ASCII bytes.
        let cut = stem.len().checked_sub(15)?;
        let (base, tail) = (stem.get(..cut)?, stem.get(cut..)?);
        let b = tail.as_bytes();
        let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
        if base.is_empty() || b[0] != b'-' || &b[6..10] != b"-of-" || !digits(&b[1..6]) {
            return None;
        }
        if !digits(&b[10..15]) {
            return None;
        }
        let part: u32 = tail[1..6].parse().ok()?;
        let count: u32 = tail[10..15].parse().ok()?;
        if part == 0 || part > count {
            return None;
        }
        Some(SplitName {
            prefix: path.with_file_name(base),
            part,
            count,
        })
    }

    /// The path of part `part` (1-based) of this family.
    pub fn part_path(&self, part: u32) -> PathBuf {
        let mut name = self.prefix.clone().into_os_string();
        name.push(format!("-{part:05}-of-{:05}.gguf", self.count));
        PathBuf::from(name)
    }
}

/// Reads the header of `path` and, when it is the first part of a split
/// family, of every other part; returns the parts in order.
///
/// The family's size comes from the file name, cross-checked against the
/// `split.count` key of part 1; every part must exist (else
/// `split_part_missing`), be a valid GGUF with its tensor data in bounds,
/// and carry the right `split.no` when it has one.
pub fn read_parts(path: &Path) -> Result<Vec<(PathBuf, GgufHeader)>, GgufError> {
    let split = SplitName::parse(path);
    if let Some(s) = &split
        && s.part != 1
    {
        return Err(GgufError::invalid(
            path,
            format!(
                "this is part {} of {}; pass the first part {:?}",
                s.part,
                s.count,
                s.part_path(1)
            ),
        ));
    }
    let first = read_header(path)?;
    let count = family_count(path, split.as_ref(), &first)?;
    let mut parts = vec![(path.to_path_buf(), first)];
    let Some(split) = split.filter(|_| count > 1) else {
        return Ok(parts);
    };
    // Check presence of every part first, so a missing one is reported
    // before any time is spent on the others.
    check_present(path, &split, count)?;
    parts.extend(read_others(path, &split, count)?);
    check_tensor_total(path, &parts)?;
    Ok(parts)
}

/// The family's size: the file name's, which part 1's `split.count` (when
/// present) must agree with.
fn family_count(path: &Path, split: Option<&SplitName>, first: &GgufHeader) -> Result<u32, GgufError> {
    let key_count = match first.metadata.get("split.count") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| GgufError::invalid(path, format!("split.count has type {}", v.type_name())))?,
        ),
    };
    match (split, key_count) {
        (Some(s), Some(k)) if k != u64::from(s.count) => Err(GgufError::invalid(
            path,
            format!("file name says {} parts, split.count says {k}", s.count),
        )),
        (Some(s), _) => Ok(s.count),
        (None, Some(k)) if k > 1 => Err(GgufError::invalid(
            path,
            format!("split.count says {k} parts but the file name does not end -00001-of-{k:05}.gguf"),
        )),
        (None, _) => Ok(1),
    }
}

fn part_missing(path: &Path, part: u32, count: u32, missing: PathBuf) -> GgufError {
    GgufError::SplitPartMissing {
        path: path.to_path_buf(),
        missing,
        part,
        count,
    }
}

fn check_present(path: &Path, split: &SplitName, count: u32) -> Result<(), GgufError> {
    for part in 2..=count {
        let p = split.part_path(part);
        if let Err(e) = std::fs::metadata(&p)
            && e.kind() == std::io::ErrorKind::NotFound
        {
            return Err(part_missing(path, part, count, p));
        }
    }
    Ok(())
}

/// Parts 2 to `count`, each a valid GGUF with the right `split.no`.
fn read_others(path: &Path, split: &SplitName, count: u32) -> Result<Vec<(PathBuf, GgufHeader)>, GgufError> {
    let mut parts = Vec::new();
    for part in 2..=count {
        let p = split.part_path(part);
        let header = read_header(&p).map_err(|e| match e {
            GgufError::Missing { path: lost } => part_missing(path, part, count, lost),
            other => other,
        })?;
        if let Some(v) = header.metadata.get("split.no")
            && v.as_u64() != Some(u64::from(part - 1))
        {
            return Err(GgufError::invalid(
                &p,
                format!("split.no is {v:?}, expected {} for part {part}", part - 1),
            ));
        }
        parts.push((p, header));
    }
    Ok(parts)
}

fn check_tensor_total(path: &Path, parts: &[(PathBuf, GgufHeader)]) -> Result<(), GgufError> {
    let total: u64 = parts.iter().map(|(_, h)| h.tensor_count).sum();
    if let Some(v) = parts[0].1.metadata.get("split.tensors.count")
        && v.as_u64() != Some(total)
    {
        return Err(GgufError::invalid(
            path,
            format!("split.tensors.count is {v:?}, the parts hold {total} tensors"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_llama_cpp_names() {
        let s = SplitName::parse(Path::new("/m/qwen-00001-of-00003.gguf")).expect("split name");
        assert_eq!((s.part, s.count), (1, 3));
        assert_eq!(s.part_path(3), PathBuf::from("/m/qwen-00003-of-00003.gguf"));
        for plain in [
            "/m/qwen.gguf",
            "/m/-00001-of-00003.gguf",
            "/m/q-00004-of-00003.gguf",
            "/m/q-00000-of-00003.gguf",
            "/m/q-0001x-of-00003.gguf",
            "/m/q-00001-of-00003.bin",
            "/m/é-00001-of-0003.gguf",
        ] {
            assert_eq!(SplitName::parse(Path::new(plain)), None, "{plain}");
        }
    }
}
