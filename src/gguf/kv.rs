//! The key/value section of a GGUF header: wanted keys are decoded and kept
//! (within a byte budget), everything else is seeked over without decoding.

use super::error::GgufError;
use super::source::Source;
use super::value::{Metadata, Value, ValueType, fim_text, is_wanted_key};

/// Longest string value the reader keeps in memory (1 MiB); a longer one
/// outside `tokenizer.*` is `gguf_invalid`.
pub const MAX_KEPT_STRING: u64 = 1 << 20;
/// Longest string the reader will seek over (llama.cpp's
/// `GGUF_MAX_STRING_LENGTH`, 1 GiB); longer is `gguf_invalid`.
pub const MAX_SKIPPED_STRING: u64 = 1 << 30;
/// Most elements of an array (llama.cpp's `GGUF_MAX_ARRAY_ELEMENTS`).
pub const MAX_ARRAY_ELEMENTS: u64 = 1 << 30;
/// Longest array the reader decodes and keeps; longer arrays are seeked over
/// and only their shape kept (per-layer arrays have at most 512 entries).
pub const MAX_KEPT_ARRAY: u64 = 4096;
/// Most bytes of decoded metadata kept over the whole header (4 MiB; a real
/// header keeps a few KiB): bounds memory whatever the file holds.
pub const MAX_KEPT_BYTES: u64 = 4 << 20;
/// The largest chat template kept (64 KiB: the largest templates in use
/// are a few tens of KiB); a larger one is stepped over.
pub const MAX_TEMPLATE_KEPT: u64 = 64 << 10;
/// Bytes charged per kept entry beyond its key and value (map overhead).
const ENTRY_OVERHEAD: u64 = 64;
/// The `tokenizer.*` key that only matters by its presence.
const CHAT_TEMPLATE: &[u8] = b"tokenizer.chat_template";
/// The vocabulary: scanned for FIM token texts, never kept.
const TOKENS: &[u8] = b"tokenizer.ggml.tokens";

/// Reads every key/value pair, keeping the wanted ones within the
/// [`MAX_KEPT_BYTES`] budget and seeking over the rest.
pub(crate) fn read_kvs(src: &mut Source<'_>, count: u64) -> Result<Metadata, GgufError> {
    let mut meta = Metadata::default();
    let mut key = Vec::new();
    let mut budget = MAX_KEPT_BYTES;
    for i in 0..count {
        src.string_into(&mut key, MAX_KEPT_STRING, &|| format!("key of pair {i}"))?;
        if key.is_empty() {
            return Err(src.invalid(format!("key of pair {i} is empty")));
        }
        let what = || format!("value of {:?}", String::from_utf8_lossy(&key));
        let ty = read_type(src, &what)?;
        if key == CHAT_TEMPLATE {
            meta.has_chat_template = true;
            if ty == ValueType::String {
                // Kept for Ollama's /api/show when it is of a template's
                // size; a larger one is only stepped over (a header must
                // never cost its reader a big allocation).
                let len = src.string_len(MAX_SKIPPED_STRING, &what)?;
                if len <= MAX_TEMPLATE_KEPT {
                    let mut buf = vec![0; len as usize];
                    src.read_exact(&mut buf, &what)?;
                    meta.chat_template = Some(String::from_utf8_lossy(&buf).into_owned());
                } else {
                    src.skip(len, &what)?;
                }
                continue;
            }
        }
        let tokenizer = key.starts_with(b"tokenizer.");
        if key == TOKENS && ty == ValueType::Array {
            let (elem, count) = read_array_head(src, &what)?;
            if elem == ValueType::String {
                let fim = &mut meta.fim_texts;
                src.skip_strings_seen(count, MAX_SKIPPED_STRING, &what, &mut |t| *fim |= fim_text(t))?;
            } else {
                skip_elements(src, elem, count, &what)?;
            }
            continue;
        }
        if !is_wanted_key(&key) {
            skip_value(src, ty, tokenizer, &what)?;
            continue;
        }
        // Each kept entry costs its key, its slot and map overhead, so even
        // many tiny scalars cannot outgrow the budget.
        let entry = key.len() as u64 + size_of::<Value>() as u64 + ENTRY_OVERHEAD;
        charge(src, &mut budget, entry, &what)?;
        let value = read_value(src, ty, &mut budget, &what)?;
        let name = String::from_utf8_lossy(&key).into_owned();
        if meta.entries.insert(name.clone(), value).is_some() {
            return Err(src.invalid(format!("duplicate key {name:?}")));
        }
    }
    Ok(meta)
}

/// Reads a value type id; an undefined id is `gguf_invalid`.
fn read_type(src: &mut Source<'_>, what: &dyn Fn() -> String) -> Result<ValueType, GgufError> {
    let id = src.u32(&|| format!("type of {}", what()))?;
    ValueType::from_id(id).ok_or_else(|| src.invalid(format!("{} has unknown value type {id}", what())))
}

/// Reads an array's element type and count, refusing nested arrays and
/// counts the file cannot hold.
fn read_array_head(src: &mut Source<'_>, what: &dyn Fn() -> String) -> Result<(ValueType, u64), GgufError> {
    let elem = read_type(src, what)?;
    if elem == ValueType::Array {
        return Err(src.invalid(format!("{} is a nested array", what())));
    }
    let count = src.u64(&|| format!("count of {}", what()))?;
    if count > MAX_ARRAY_ELEMENTS {
        return Err(src.invalid(format!("{} has absurd element count {count}", what())));
    }
    src.need(count * elem.min_size(), &|| format!("{} with {count} elements", what()))?;
    Ok((elem, count))
}

/// Seeks over a value without decoding it. String arrays cost one length
/// read per element; fixed-size arrays one seek.
fn skip_value(
    src: &mut Source<'_>,
    ty: ValueType,
    tokenizer: bool,
    what: &dyn Fn() -> String,
) -> Result<(), GgufError> {
    let string_cap = if tokenizer { MAX_SKIPPED_STRING } else { MAX_KEPT_STRING };
    match ty {
        ValueType::String => {
            let len = src.string_len(string_cap, what)?;
            src.skip(len, what)
        }
        ValueType::Array => {
            let (elem, count) = read_array_head(src, what)?;
            if let Some(size) = elem.fixed_size() {
                // read_array_head checked count * size <= remaining.
                return src.skip(count * size, what);
            }
            src.skip_strings(count, string_cap, what)
        }
        // Every other type is fixed-size.
        _ => src.skip(ty.min_size(), what),
    }
}

/// Takes `n` bytes from the kept-metadata `budget`, or fails with
/// `gguf_invalid` once [`MAX_KEPT_BYTES`] is spent.
fn charge(src: &Source<'_>, budget: &mut u64, n: u64, what: &dyn Fn() -> String) -> Result<(), GgufError> {
    *budget = budget
        .checked_sub(n)
        .ok_or_else(|| src.invalid(format!("metadata kept exceeds {MAX_KEPT_BYTES} bytes at {}", what())))?;
    Ok(())
}

/// Decodes a value of a wanted key, charging what it keeps to `budget`.
fn read_value(
    src: &mut Source<'_>,
    ty: ValueType,
    budget: &mut u64,
    what: &dyn Fn() -> String,
) -> Result<Value, GgufError> {
    match ty {
        ValueType::String => {
            let mut buf = Vec::new();
            src.string_into(&mut buf, MAX_KEPT_STRING, what)?;
            charge(src, budget, buf.len() as u64, what)?;
            Ok(Value::String(String::from_utf8_lossy(&buf).into_owned()))
        }
        ValueType::Array => {
            let (elem, count) = read_array_head(src, what)?;
            if elem == ValueType::String || count > MAX_KEPT_ARRAY {
                skip_elements(src, elem, count, what)?;
                return Ok(Value::SkippedArray { elem, count });
            }
            charge(src, budget, count * size_of::<Value>() as u64, what)?;
            // count <= MAX_KEPT_ARRAY, and its bytes were checked to exist.
            let mut items = Vec::with_capacity(count as usize);
            for _ in 0..count {
                items.push(read_scalar(src, elem, what)?);
            }
            Ok(Value::Array(items))
        }
        _ => read_scalar(src, ty, what),
    }
}

/// Seeks over `count` elements of type `elem`.
fn skip_elements(
    src: &mut Source<'_>,
    elem: ValueType,
    count: u64,
    what: &dyn Fn() -> String,
) -> Result<(), GgufError> {
    match elem.fixed_size() {
        Some(size) => src.skip(count * size, what),
        None => src.skip_strings(count, MAX_KEPT_STRING, what),
    }
}

/// Decodes one fixed-size value.
fn read_scalar(src: &mut Source<'_>, ty: ValueType, what: &dyn Fn() -> String) -> Result<Value, GgufError> {
    let mut b = [0u8; 8];
    // Only fixed-size types reach here (strings and arrays are handled by
    // the callers), so the size is known.
    let size = ty.fixed_size().unwrap_or(8) as usize;
    src.read_exact(&mut b[..size], what)?;
    let int = |value: i128| Value::Int { ty, value };
    Ok(match ty {
        ValueType::U8 => int(b[0].into()),
        ValueType::I8 => int((b[0] as i8).into()),
        ValueType::Bool => Value::Bool(b[0] != 0),
        ValueType::U16 => int(u16::from_le_bytes([b[0], b[1]]).into()),
        ValueType::I16 => int(i16::from_le_bytes([b[0], b[1]]).into()),
        ValueType::U32 => int(u32::from_le_bytes([b[0], b[1], b[2], b[3]]).into()),
        ValueType::I32 => int(i32::from_le_bytes([b[0], b[1], b[2], b[3]]).into()),
        ValueType::F32 => Value::Float {
            ty,
            value: f32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(),
        },
        ValueType::U64 => int(u64::from_le_bytes(b).into()),
        ValueType::I64 => int(i64::from_le_bytes(b).into()),
        ValueType::F64 => Value::Float {
            ty,
            value: f64::from_le_bytes(b),
        },
        ValueType::String | ValueType::Array => {
            return Err(src.invalid(format!("{} is not a scalar", what())));
        }
    })
}
