//! GGUF metadata values: the type ids of the format and the decoded values the
//! reader keeps (only the keys the facts need; see [`super::reader`]).

use std::collections::HashMap;

/// GGUF metadata value type ids (`enum gguf_type` in llama.cpp's `gguf.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// 0: `u8`.
    U8,
    /// 1: `i8`.
    I8,
    /// 2: `u16`.
    U16,
    /// 3: `i16`.
    I16,
    /// 4: `u32`.
    U32,
    /// 5: `i32`.
    I32,
    /// 6: `f32`.
    F32,
    /// 7: `bool`, one byte.
    Bool,
    /// 8: string, `u64` length then UTF-8 bytes.
    String,
    /// 9: array, `u32` element type, `u64` count, then the elements.
    Array,
    /// 10: `u64`.
    U64,
    /// 11: `i64`.
    I64,
    /// 12: `f64`.
    F64,
}

impl ValueType {
    /// Decodes a type id; `None` for ids the format does not define.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// Encoded size of one value of a fixed-size type; `None` for strings and
    /// arrays, whose size depends on their content.
    pub fn fixed_size(self) -> Option<u64> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// Smallest encoded size of one value: the fixed size, 8 for a string
    /// (its length), 12 for an array (element type and count). Used to bound
    /// declared counts by the bytes left in the file.
    pub fn min_size(self) -> u64 {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            // Every other type is fixed-size.
            _ => self.fixed_size().unwrap_or(1),
        }
    }

    /// The name used in messages (`u32`, `string`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }
}

/// A decoded metadata value, as kept by the reader.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Any integer type, widened so one accessor serves all eight.
    Int {
        /// The stored type, for messages and for keys that demand one type.
        ty: ValueType,
        /// The value.
        value: i128,
    },
    /// `f32` or `f64`, widened.
    Float {
        /// The stored type.
        ty: ValueType,
        /// The value.
        value: f64,
    },
    /// A bool.
    Bool(bool),
    /// A string (lossily decoded if not UTF-8).
    String(String),
    /// A short array of scalars (per-layer values).
    Array(Vec<Value>),
    /// An array too long to keep (or of strings): only its shape is known.
    SkippedArray {
        /// The element type.
        elem: ValueType,
        /// The element count.
        count: u64,
    },
}

impl Value {
    /// The type name, for "key X has type T" messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Int { ty, .. } | Value::Float { ty, .. } => ty.name(),
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) | Value::SkippedArray { .. } => "array",
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer that
    /// fits in `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int { value, .. } => u64::try_from(*value).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a float or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float { value, .. } => Some(*value),
            Value::Int { value, .. } => Some(*value as f64),
            _ => None,
        }
    }

    /// The value as a string slice, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

/// The metadata keys the reader kept, by name, plus the fact that a chat
/// template was seen (its text is skipped, never kept).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    /// Kept key/value pairs.
    pub entries: HashMap<String, Value>,
    /// Whether `tokenizer.chat_template` was present.
    pub has_chat_template: bool,
    /// Its text, when of a template's size (`kv::MAX_TEMPLATE_KEPT`).
    pub chat_template: Option<String>,
    /// Which fill-in-the-middle token texts the vocabulary holds
    /// (`FIM_PRE | FIM_SUF | FIM_MID`): llama.cpp finds a model's FIM
    /// tokens by these texts when its header names no ids.
    pub fim_texts: u8,
}

/// `Metadata::fim_texts`: a prefix token's text was seen.
pub const FIM_PRE: u8 = 1;
/// `Metadata::fim_texts`: a suffix token's text was seen.
pub const FIM_SUF: u8 = 2;
/// `Metadata::fim_texts`: a middle token's text was seen.
pub const FIM_MID: u8 = 4;

/// The texts llama.cpp's vocabulary (b10883, `llama-vocab.cpp`) takes for
/// each FIM token when the header names none.
const FIM_TEXTS: &[(u8, &[&str])] = &[
    (
        FIM_PRE,
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
    ),
    (
        FIM_SUF,
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
    ),
    (
        FIM_MID,
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
    ),
];

/// The FIM flag `token` stands for, 0 for any other text.
pub fn fim_text(token: &[u8]) -> u8 {
    FIM_TEXTS
        .iter()
        .filter(|(_, texts)| texts.iter().any(|t| t.as_bytes() == token))
        .fold(0, |acc, (flag, _)| acc | flag)
}

impl Metadata {
    /// The value of `key`, if it was present and kept.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.get(key)
    }
}

/// Exact keys the facts need.
const KEEP_EXACT: &[&str] = &[
    "general.architecture",
    "general.name",
    "general.size_label",
    "general.file_type",
    "general.alignment",
    "split.no",
    "split.count",
    "split.tensors.count",
    // A projector's encoders: what a chat request may send it.
    "clip.has_vision_encoder",
    "clip.has_audio_encoder",
    // Fill-in-the-middle token ids (and their older names).
    "tokenizer.ggml.fim_pre_token_id",
    "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id",
    "tokenizer.ggml.prefix_token_id",
    "tokenizer.ggml.suffix_token_id",
    "tokenizer.ggml.middle_token_id",
];

/// Key suffixes (after `{arch}`) the facts need; matched on any prefix
/// because `general.architecture` may come after them in the file.
const KEEP_SUFFIX: &[&str] = &[
    ".block_count",
    ".context_length",
    ".embedding_length",
    ".attention.head_count",
    ".attention.head_count_kv",
    ".attention.key_length",
    ".attention.value_length",
    ".attention.sliding_window",
    ".attention.sliding_window_pattern",
    ".attention.kv_lora_rank",
    ".attention.max_alibi_bias",
    ".pooling_type",
];

/// Whether the reader should decode and keep the value of `key`.
pub fn is_wanted_key(key: &[u8]) -> bool {
    KEEP_EXACT.iter().any(|k| k.as_bytes() == key)
        || (!key.starts_with(b"general.")
            && !key.starts_with(b"tokenizer.")
            && KEEP_SUFFIX.iter().any(|s| key.ends_with(s.as_bytes())))
}
