//! The low-level GGUF header parse: magic, version, counts, metadata
//! key/value pairs, tensor infos and the data-section bound. Tensor data is
//! never read.

use std::path::Path;

use super::error::GgufError;
use super::ggml_types::{ggml_type, tensor_bytes};
use super::kv::read_kvs;
use super::source::Source;
use super::value::{Metadata, Value, ValueType};

/// Most tensors / key-value pairs a header may declare (2^24); more is
/// `gguf_invalid`. Fewer, but more than the bytes left can hold, is
/// `gguf_truncated`.
pub const MAX_RECORDS: u64 = 1 << 24;
/// Most dimensions of a tensor (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Longest tensor name llama.cpp accepts (`GGML_MAX_NAME` less the NUL).
pub const MAX_TENSOR_NAME: u64 = 63;
/// Smallest encoding of a key/value pair: key length, type, one byte.
const MIN_KV_RECORD: u64 = 8 + 4 + 1;
/// Smallest encoding of a tensor info: name length, n_dims, type, offset.
const MIN_TENSOR_RECORD: u64 = 8 + 4 + 4 + 8;

/// Everything the reader learns from one GGUF file's header.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// GGUF version (2 or 3).
    pub version: u32,
    /// Tensors declared in this file.
    pub tensor_count: u64,
    /// Key/value pairs declared in this file.
    pub kv_count: u64,
    /// The kept metadata (see [`super::value::is_wanted_key`]).
    pub metadata: Metadata,
    /// `general.alignment`, default 32: tensor data alignment.
    pub alignment: u64,
    /// Offset of the tensor data section (after the tensor infos, aligned).
    pub data_start: u64,
    /// Bytes the file must have to hold every tensor: `data_start` + the
    /// largest tensor end.
    pub data_end: u64,
    /// The file's size in bytes.
    pub file_size: u64,
    /// Bytes of `token_embd.weight` in this file (0 if not here).
    pub token_embd_bytes: u64,
    /// Bytes of MoE expert tensors (names containing `_exps`) in this file.
    pub expert_bytes: u64,
    /// Bytes of `output.weight` in this file (0 if not here: a tied model
    /// reuses `token_embd.weight`).
    pub output_bytes: u64,
    /// Bytes actually read from the file: proves the data was not touched.
    pub bytes_read: u64,
}

/// Reads and checks the header of one GGUF file (no split handling): every
/// declared count and length is checked against the bytes left before it is
/// used, and the tensor data is checked to fit in the file without reading it.
pub fn read_header(path: &Path) -> Result<GgufHeader, GgufError> {
    let mut src = Source::open(path)?;
    let version = read_preamble(&mut src)?;
    let tensor_count = read_count(&mut src, "tensor_count", MIN_TENSOR_RECORD)?;
    let kv_count = read_count(&mut src, "kv_count", MIN_KV_RECORD)?;
    let metadata = read_kvs(&mut src, kv_count)?;
    let alignment = match metadata.get("general.alignment") {
        None => 32,
        Some(Value::Int {
            ty: ValueType::U32,
            value,
        }) if *value > 0 && (*value as u64).is_power_of_two() => *value as u64,
        Some(v) => {
            return Err(src.invalid(format!(
                "general.alignment must be a u32 power of two, found {} {v:?}",
                v.type_name()
            )));
        }
    };
    let tensors = read_tensor_infos(&mut src, tensor_count, alignment)?;
    let data_start = if tensor_count > 0 {
        src.pos.next_multiple_of(alignment)
    } else {
        src.pos
    };
    let data_end = data_start
        .checked_add(tensors.max_end)
        .ok_or_else(|| src.invalid("tensor data end overflows u64"))?;
    if data_end > src.size {
        return Err(GgufError::ModelTruncated {
            path: path.to_path_buf(),
            needed: data_end,
            size: src.size,
        });
    }
    Ok(GgufHeader {
        version,
        tensor_count,
        kv_count,
        metadata,
        alignment,
        data_start,
        data_end,
        file_size: src.size,
        token_embd_bytes: tensors.token_embd_bytes,
        expert_bytes: tensors.expert_bytes,
        output_bytes: tensors.output_bytes,
        bytes_read: src.bytes_read(),
    })
}

/// Checks the magic and version; returns the version.
fn read_preamble(src: &mut Source<'_>) -> Result<u32, GgufError> {
    let avail = src.remaining().min(4) as usize;
    let mut magic = [0u8; 4];
    src.read_exact(&mut magic[..avail], &|| "magic".into())?;
    if magic[..avail] != b"GGUF"[..avail] {
        return Err(GgufError::NotGguf {
            path: src.path.to_path_buf(),
            reason: format!(
                "starts with {:?}, expected \"GGUF\"",
                String::from_utf8_lossy(&magic[..avail])
            ),
        });
    }
    if avail < 4 {
        return Err(src.truncated("file ends inside the magic"));
    }
    let version = src.u32(&|| "version".into())?;
    let refuse = |reason: &str| GgufError::VersionUnsupported {
        path: src.path.to_path_buf(),
        version,
        reason: reason.to_string(),
    };
    match version {
        2 | 3 => Ok(version),
        0 => Err(refuse("version 0 is not a GGUF version")),
        1 => Err(refuse("GGUF v1 is no longer supported by llama.cpp")),
        v if v & 0xFFFF == 0 => Err(refuse("looks big-endian; only little-endian is supported")),
        _ => Err(refuse("newer than the supported versions 2 and 3")),
    }
}

/// Reads a record count and bounds it: over [`MAX_RECORDS`] is absurd,
/// more records than the bytes left can hold is a truncated header.
fn read_count(src: &mut Source<'_>, name: &str, min_record: u64) -> Result<u64, GgufError> {
    let n = src.u64(&|| name.to_string())?;
    if n > MAX_RECORDS {
        return Err(src.invalid(format!("{name} {n} is absurd (limit {MAX_RECORDS})")));
    }
    src.need(n * min_record, &|| format!("{name} {n}"))?;
    Ok(n)
}

/// What the tensor infos add up to.
struct TensorTotals {
    /// Largest `offset + bytes` over the tensors, relative to the data start.
    max_end: u64,
    /// Bytes of `token_embd.weight`.
    token_embd_bytes: u64,
    /// Bytes of tensors whose name contains `_exps`.
    expert_bytes: u64,
    /// Bytes of `output.weight`.
    output_bytes: u64,
}

/// Reads every tensor info, sizing each from its type and dims; nothing is
/// kept per tensor, so memory does not grow with the tensor count.
fn read_tensor_infos(src: &mut Source<'_>, count: u64, alignment: u64) -> Result<TensorTotals, GgufError> {
    let mut totals = TensorTotals {
        max_end: 0,
        token_embd_bytes: 0,
        expert_bytes: 0,
        output_bytes: 0,
    };
    let mut name = Vec::with_capacity(MAX_TENSOR_NAME as usize);
    for i in 0..count {
        src.string_into(&mut name, MAX_TENSOR_NAME, &|| format!("name of tensor {i}"))?;
        let what = || format!("tensor {:?}", String::from_utf8_lossy(&name));
        let n_dims = src.u32(&what)?;
        if n_dims > MAX_DIMS {
            return Err(src.invalid(format!("{} has {n_dims} dimensions (max {MAX_DIMS})", what())));
        }
        let mut dims = [0u64; MAX_DIMS as usize];
        for d in dims.iter_mut().take(n_dims as usize) {
            *d = src.u64(&what)?;
        }
        let type_id = src.u32(&what)?;
        let ty =
            ggml_type(type_id).ok_or_else(|| src.invalid(format!("{} has unknown tensor type {type_id}", what())))?;
        let bytes = tensor_bytes(ty, &dims[..n_dims as usize])
            .map_err(|reason| src.invalid(format!("{}: {reason}", what())))?;
        let offset = src.u64(&what)?;
        if offset % alignment != 0 {
            return Err(src.invalid(format!("{} offset {offset} is not aligned to {alignment}", what())));
        }
        let end = offset
            .checked_add(bytes)
            .ok_or_else(|| src.invalid(format!("{} end overflows u64", what())))?;
        totals.max_end = totals.max_end.max(end);
        if name == b"token_embd.weight" {
            totals.token_embd_bytes = bytes;
        }
        if name == b"output.weight" {
            totals.output_bytes = bytes;
        }
        if name.windows(5).any(|w| w == b"_exps") {
            totals.expert_bytes = totals
                .expert_bytes
                .checked_add(bytes)
                .ok_or_else(|| src.invalid("expert tensor bytes overflow u64"))?;
        }
    }
    Ok(totals)
}
