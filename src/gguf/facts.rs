//! [`ModelFacts`]: what the warden knows of a model from its GGUF header(s),
//! and [`read_model_facts`], the entry point.

use std::path::{Path, PathBuf};

use super::error::GgufError;
use super::ftype::ftype_name;
use super::pooling::Pooling;
use super::split::read_parts;
use super::value::{Metadata, Value};

/// Most layers a model may declare (`LLAMA_MAX_LAYERS` of the pinned
/// llama.cpp, which asserts on more); bounds the per-layer vectors.
pub const MAX_LAYERS: u64 = 512;

/// What the warden knows of a model from its GGUF header alone.
///
/// `Default` (empty architecture, zero layers) exists for tests and for
/// callers that build facts by hand; the reader never returns it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ModelFacts {
    /// `general.architecture`: prefix of every model key, and which llama.cpp
    /// graph runs the model.
    pub architecture: String,
    /// `general.name`, for display.
    pub name: Option<String>,
    /// `general.size_label` (`135M`, `8x7B`), for display.
    pub size_label: Option<String>,
    /// `tokenizer.chat_template`: the Jinja template the child renders
    /// chats with (what Ollama's `/api/show` shows). Not serialized: it can
    /// be kilobytes.
    #[serde(skip)]
    pub chat_template: Option<String>,
    /// `general.file_type` (the `LLAMA_FTYPE` number); `None` when absent or
    /// not an integer, never a failure.
    pub file_type: Option<u32>,
    /// `{arch}.block_count`: layers, the length of every per-layer vector.
    pub block_count: u32,
    /// `{arch}.context_length`: the window the model was trained for.
    pub trained_window: Option<u64>,
    /// `{arch}.embedding_length`: hidden size, the head-size fallback.
    pub embedding_length: u64,
    /// `{arch}.attention.head_count` per layer (scalar expanded); 0 where a
    /// layer has no attention.
    pub head_count: Vec<u32>,
    /// `{arch}.attention.head_count_kv` per layer (scalar expanded), default
    /// `head_count`; a recurrent layer's 0 stays 0 (it holds no KV cache).
    pub kv_heads: Vec<u32>,
    /// `{arch}.attention.key_length`: K size per head, default
    /// `embedding_length / head_count_max()` (0 without heads).
    pub key_length: u32,
    /// `{arch}.attention.value_length`: V size per head, same default.
    pub value_length: u32,
    /// `{arch}.attention.sliding_window`: the SWA window, in tokens.
    pub sliding_window: Option<u32>,
    /// Per-layer sliding pattern (`true` = sliding) when
    /// `{arch}.attention.sliding_window_pattern` is an array (bool or
    /// integer, nonzero = sliding) or a bool scalar (every layer alike);
    /// `None` when absent or an integer scalar (see the period below).
    pub sliding_layers: Option<Vec<bool>>,
    /// `{arch}.attention.sliding_window_pattern` when it is a scalar: the
    /// period of the pattern (llama.cpp expands it per architecture, e.g.
    /// every 6th layer global for Gemma 3); `None` when absent or an array.
    pub sliding_window_period: Option<u32>,
    /// `{arch}.attention.kv_lora_rank`: the compressed KV width of MLA models.
    pub kv_lora_rank: Option<u32>,
    /// `{arch}.attention.max_alibi_bias`: set for ALiBi models.
    pub max_alibi_bias: Option<f32>,
    /// `{arch}.pooling_type`: how an embedding model folds its token
    /// vectors into one per input; chat models declare none.
    pub pooling: Option<Pooling>,
    /// Whether `tokenizer.chat_template` is present (chat endpoints need it).
    pub has_chat_template: bool,
    /// Whether llama.cpp finds fill-in-the-middle tokens in it (prefix,
    /// suffix and middle: by their ids in the header, else by their texts
    /// in the vocabulary), so `/infill` can run.
    pub fill_in_middle: bool,
    /// Bytes on disk of every file of the model (every part of a split).
    pub weights_bytes: u64,
    /// Bytes of the `token_embd.weight` tensor (from its type and dims).
    pub token_embd_bytes: u64,
    /// Bytes of MoE expert tensors (names containing `_exps`), which can be
    /// left in host memory.
    pub expert_bytes: u64,
    /// Bytes of the `output.weight` tensor; 0 for a tied model, whose output
    /// layer reuses `token_embd.weight` (and llama.cpp copies it to the
    /// device that runs the output layer).
    pub output_bytes: u64,
    /// Tensors over all parts.
    pub tensor_count: u64,
    /// The files read, in order (one, or every part of a split family).
    pub parts: Vec<PathBuf>,
}

impl ModelFacts {
    /// The largest per-layer head count (0 for a model without attention).
    pub fn head_count_max(&self) -> u32 {
        self.head_count.iter().copied().max().unwrap_or(0)
    }

    /// The quantization named by `file_type` in llama.cpp's `LLAMA_FTYPE`
    /// table (`3` is `Q4_1`, `15` is `Q4_K_M`); `None` if absent or unknown.
    pub fn file_type_name(&self) -> Option<&'static str> {
        self.file_type.and_then(ftype_name)
    }

    /// Whether the header declares a pooling that gives one vector per
    /// input: an embedding (or rerank) model, for `llama-server
    /// --embedding`, not for chat.
    pub fn is_embedding(&self) -> bool {
        self.pooling.is_some_and(Pooling::per_input)
    }
}

/// Reads the facts of the model at `path`: its header only, never its
/// tensor data. A `*-00001-of-0000N.gguf` path reads the whole split family.
pub fn read_model_facts(path: &Path) -> Result<ModelFacts, GgufError> {
    let parts = read_parts(path)?;
    // read_parts returns the first part first, or an error: never empty.
    let first = &parts[0].1;
    let mut facts = facts_from_metadata(path, &first.metadata)?;
    for (p, h) in &parts {
        let sum = |a: u64, b: u64| {
            a.checked_add(b)
                .ok_or_else(|| GgufError::invalid(p, "model size overflows u64"))
        };
        facts.weights_bytes = sum(facts.weights_bytes, h.file_size)?;
        facts.tensor_count = sum(facts.tensor_count, h.tensor_count)?;
        facts.expert_bytes = sum(facts.expert_bytes, h.expert_bytes)?;
        facts.token_embd_bytes = facts.token_embd_bytes.max(h.token_embd_bytes);
        facts.output_bytes = facts.output_bytes.max(h.output_bytes);
        facts.parts.push(p.clone());
    }
    Ok(facts)
}

/// Typed access to the kept keys, with errors that name the key.
struct Keys<'a> {
    /// The file, for errors.
    path: &'a Path,
    /// The kept metadata.
    meta: &'a Metadata,
    /// `general.architecture`, the prefix of model keys.
    arch: String,
}

impl Keys<'_> {
    /// The value of `{arch}.{suffix}`, with the full key name.
    fn get(&self, suffix: &str) -> (String, Option<&Value>) {
        let key = format!("{}.{suffix}", self.arch);
        let value = self.meta.get(&key);
        (key, value)
    }

    /// A [`GgufError::Invalid`] naming `key`.
    fn bad(&self, key: &str, v: &Value, want: &str) -> GgufError {
        GgufError::invalid(
            self.path,
            format!("{key} has type {} ({v:?}), expected {want}", v.type_name()),
        )
    }

    /// An optional unsigned integer that must fit in `max`.
    fn uint(&self, suffix: &str, max: u64) -> Result<Option<u64>, GgufError> {
        match self.get(suffix) {
            (_, None) => Ok(None),
            (key, Some(v)) => match v.as_u64() {
                Some(n) if n <= max => Ok(Some(n)),
                _ => Err(self.bad(&key, v, &format!("an unsigned integer <= {max}"))),
            },
        }
    }

    /// A required unsigned integer.
    fn required(&self, suffix: &str, max: u64) -> Result<u64, GgufError> {
        self.uint(suffix, max)?
            .ok_or_else(|| GgufError::invalid(self.path, format!("missing key {}.{suffix}", self.arch)))
    }

    /// A per-layer `u32` value, scalar or array of exactly `layers` entries.
    fn per_layer(&self, suffix: &str, layers: usize) -> Result<Option<Vec<u32>>, GgufError> {
        let (key, Some(v)) = self.get(suffix) else {
            return Ok(None);
        };
        match v {
            Value::Array(items) if items.len() == layers => items
                .iter()
                .map(|i| match i.as_u64() {
                    Some(n) if n <= u64::from(u32::MAX) => Ok(n as u32),
                    _ => Err(self.bad(&key, i, "u32 elements")),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Value::Array(_) | Value::SkippedArray { .. } => Err(GgufError::invalid(
                self.path,
                format!("{key} is an array whose length is not block_count {layers}"),
            )),
            _ => Ok(self.uint(suffix, u32::MAX.into())?.map(|n| vec![n as u32; layers])),
        }
    }
}

/// Builds the model facts from the metadata of the first (or only) part;
/// the size fields are left at zero for the caller to fill.
fn facts_from_metadata(path: &Path, meta: &Metadata) -> Result<ModelFacts, GgufError> {
    let arch = match meta.get("general.architecture") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(v) => {
            return Err(GgufError::invalid(
                path,
                format!("general.architecture has type {} ({v:?})", v.type_name()),
            ));
        }
        None => return Err(GgufError::invalid(path, "missing key general.architecture")),
    };
    let keys = Keys { path, meta, arch };
    let block_count = keys.required("block_count", MAX_LAYERS)?;
    if block_count == 0 {
        return Err(GgufError::invalid(path, format!("{}.block_count is 0", keys.arch)));
    }
    // block_count <= MAX_LAYERS = 512.
    let layers = block_count as usize;
    let embedding_length = keys.required("embedding_length", u64::MAX)?;
    let head_count = keys
        .per_layer("attention.head_count", layers)?
        .unwrap_or_else(|| vec![0; layers]);
    let kv_heads = keys
        .per_layer("attention.head_count_kv", layers)?
        .unwrap_or_else(|| head_count.clone());
    let max_heads = head_count.iter().copied().max().unwrap_or(0);
    let default_len = if max_heads == 0 {
        0
    } else {
        embedding_length / u64::from(max_heads)
    };
    let head_len = |suffix: &str| -> Result<u32, GgufError> {
        let n = keys.uint(suffix, u32::MAX.into())?.unwrap_or(default_len);
        u32::try_from(n).map_err(|_| {
            GgufError::invalid(
                path,
                format!(
                    "{}.{suffix} default {n} (embedding_length / heads) exceeds u32",
                    keys.arch
                ),
            )
        })
    };
    let u32_key =
        |suffix: &str| -> Result<Option<u32>, GgufError> { Ok(keys.uint(suffix, u32::MAX.into())?.map(|n| n as u32)) };
    let (sliding_layers, sliding_window_period) = sliding_pattern(&keys, layers)?;
    let max_alibi_bias = match keys.get("attention.max_alibi_bias") {
        (_, None) => None,
        (key, Some(v)) => Some(v.as_f64().ok_or_else(|| keys.bad(&key, v, "a number"))? as f32),
    };
    Ok(ModelFacts {
        name: meta.get("general.name").and_then(Value::as_str).map(str::to_owned),
        size_label: meta.get("general.size_label").and_then(Value::as_str).map(str::to_owned),
        chat_template: meta.chat_template.clone(),
        file_type: meta
            .get("general.file_type")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok()),
        block_count: block_count as u32,
        trained_window: keys.uint("context_length", u64::MAX)?,
        embedding_length,
        key_length: head_len("attention.key_length")?,
        value_length: head_len("attention.value_length")?,
        sliding_window: u32_key("attention.sliding_window")?,
        sliding_layers,
        sliding_window_period,
        kv_lora_rank: u32_key("attention.kv_lora_rank")?,
        max_alibi_bias,
        pooling: u32_key("pooling_type")?.map(Pooling::from_u32),
        has_chat_template: meta.has_chat_template,
        fill_in_middle: fill_in_middle(meta),
        head_count,
        kv_heads,
        weights_bytes: 0,
        token_embd_bytes: 0,
        expert_bytes: 0,
        output_bytes: 0,
        tensor_count: 0,
        parts: Vec::new(),
        architecture: keys.arch,
    })
}

/// Whether every FIM token is there, by id or by text (each found
/// separately, as llama.cpp's vocabulary does).
fn fill_in_middle(meta: &Metadata) -> bool {
    use super::value::{FIM_MID, FIM_PRE, FIM_SUF};
    let id = |names: [&str; 2]| {
        names
            .iter()
            .any(|n| meta.get(&format!("tokenizer.ggml.{n}_token_id")).is_some())
    };
    [
        (["fim_pre", "prefix"], FIM_PRE),
        (["fim_suf", "suffix"], FIM_SUF),
        (["fim_mid", "middle"], FIM_MID),
    ]
    .into_iter()
    .all(|(names, flag)| id(names) || meta.fim_texts & flag != 0)
}

/// `{arch}.attention.sliding_window_pattern`: an array gives the per-layer
/// pattern, a scalar the period.
fn sliding_pattern(keys: &Keys<'_>, layers: usize) -> Result<(Option<Vec<bool>>, Option<u32>), GgufError> {
    let suffix = "attention.sliding_window_pattern";
    let (key, value) = keys.get(suffix);
    match value {
        None => Ok((None, None)),
        Some(Value::Array(items)) if items.len() == layers => {
            let flags = items
                .iter()
                .map(|i| match i {
                    Value::Bool(b) => Ok(*b),
                    Value::Int { value, .. } => Ok(*value != 0),
                    other => Err(keys.bad(&key, other, "bool or integer elements")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((Some(flags), None))
        }
        Some(Value::Array(_) | Value::SkippedArray { .. }) => Err(GgufError::invalid(
            keys.path,
            format!("{key} is an array whose length is not block_count {layers}"),
        )),
        Some(Value::Bool(b)) => Ok((Some(vec![*b; layers]), None)),
        Some(_) => Ok((None, keys.uint(suffix, u32::MAX.into())?.map(|n| n as u32))),
    }
}
