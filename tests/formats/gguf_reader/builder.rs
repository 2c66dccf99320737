//! A small GGUF writer for synthetic test files, able to write both valid
//! files and hostile ones (raw values, overridden counts, bad dims).

/// A metadata value to write.
#[derive(Debug, Clone)]
pub enum V {
    U8(u8),
    I32(i32),
    U32(u32),
    U64(u64),
    I64(i64),
    F32(f32),
    Bool(bool),
    Str(String),
    /// An array: element type id and elements (written without their own
    /// type id).
    Arr(u32, Vec<V>),
    /// A type id and raw bytes written verbatim after it.
    Raw(u32, Vec<u8>),
}

impl V {
    pub fn s(s: &str) -> V {
        V::Str(s.to_string())
    }

    fn type_id(&self) -> u32 {
        match self {
            V::U8(_) => 0,
            V::U32(_) => 4,
            V::I32(_) => 5,
            V::F32(_) => 6,
            V::Bool(_) => 7,
            V::Str(_) => 8,
            V::Arr(..) => 9,
            V::U64(_) => 10,
            V::I64(_) => 11,
            V::Raw(t, _) => *t,
        }
    }

    fn write_body(&self, out: &mut Vec<u8>) {
        match self {
            V::U8(v) => out.push(*v),
            V::U32(v) => out.extend(v.to_le_bytes()),
            V::I32(v) => out.extend(v.to_le_bytes()),
            V::U64(v) => out.extend(v.to_le_bytes()),
            V::I64(v) => out.extend(v.to_le_bytes()),
            V::F32(v) => out.extend(v.to_le_bytes()),
            V::Bool(v) => out.push(u8::from(*v)),
            V::Str(s) => put_str(out, s.as_bytes()),
            V::Arr(elem, items) => {
                out.extend(elem.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for i in items {
                    i.write_body(out);
                }
            }
            V::Raw(_, bytes) => out.extend(bytes),
        }
    }
}

/// Writes a GGUF string.
pub fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s);
}

/// A tensor to declare.
#[derive(Debug, Clone)]
pub struct T {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: u32,
    /// Offset override; `None` packs the tensor after the previous one.
    pub offset: Option<u64>,
    /// Bytes of data the tensor takes (for packing and for the data section).
    pub bytes: u64,
}

/// A synthetic GGUF file.
#[derive(Debug, Clone)]
pub struct Gguf {
    pub version: u32,
    pub kvs: Vec<(String, V)>,
    pub tensors: Vec<T>,
    pub tensor_count: Option<u64>,
    pub kv_count: Option<u64>,
    pub alignment: u64,
}

/// Bytes per block and elements per block of the few types the tests use.
fn type_size(ty: u32) -> (u64, u64) {
    match ty {
        0 => (4, 1),
        1 => (2, 1),
        2 => (18, 32),
        8 => (34, 32),
        _ => (1, 1),
    }
}

impl Gguf {
    /// An empty version-3 file.
    pub fn new() -> Self {
        Gguf {
            version: 3,
            kvs: Vec::new(),
            tensors: Vec::new(),
            tensor_count: None,
            kv_count: None,
            alignment: 32,
        }
    }

    /// A tiny but complete llama-style model: 2 layers, 4 heads, 2 KV heads,
    /// embedding 64, trained window 256, three tensors.
    pub fn llama() -> Self {
        Gguf::new()
            .kv("general.architecture", V::s("llama"))
            .kv("general.name", V::s("tiny"))
            .kv("general.file_type", V::U32(1))
            .kv("llama.block_count", V::U32(2))
            .kv("llama.context_length", V::U32(256))
            .kv("llama.embedding_length", V::U32(64))
            .kv("llama.attention.head_count", V::U32(4))
            .kv("llama.attention.head_count_kv", V::U32(2))
            .kv(
                "tokenizer.ggml.tokens",
                V::Arr(8, vec![V::s("a"), V::s("bc"), V::s("")]),
            )
            .kv("tokenizer.ggml.scores", V::Arr(6, vec![V::F32(0.5); 3]))
            .kv("tokenizer.chat_template", V::s("{{ x }}"))
            .tensor("token_embd.weight", &[64, 3], 0)
            .tensor("blk.0.attn_q.weight", &[32, 2], 2)
            .tensor("output_norm.weight", &[64], 0)
    }

    /// Adds (or, for an existing key, replaces) a key/value pair.
    pub fn kv(mut self, key: &str, v: V) -> Self {
        match self.kvs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.kvs.push((key.to_string(), v)),
        }
        self
    }

    /// Removes a key.
    pub fn without(mut self, key: &str) -> Self {
        self.kvs.retain(|(k, _)| k != key);
        self
    }

    /// Adds a tensor packed after the previous one.
    pub fn tensor(mut self, name: &str, dims: &[u64], ty: u32) -> Self {
        let (size, block) = type_size(ty);
        let n: u64 = dims.iter().product();
        self.tensors.push(T {
            name: name.to_string(),
            dims: dims.to_vec(),
            ty,
            offset: None,
            bytes: n / block * size,
        });
        self
    }

    /// Bytes of the header up to the end of the tensor infos, and the whole
    /// file (header, padding, zeroed tensor data).
    pub fn build_parts(&self) -> (usize, Vec<u8>) {
        let mut out = Vec::new();
        out.extend(b"GGUF");
        out.extend(self.version.to_le_bytes());
        let tc = self.tensor_count.unwrap_or(self.tensors.len() as u64);
        let kc = self.kv_count.unwrap_or(self.kvs.len() as u64);
        out.extend(tc.to_le_bytes());
        out.extend(kc.to_le_bytes());
        for (k, v) in &self.kvs {
            put_str(&mut out, k.as_bytes());
            out.extend(v.type_id().to_le_bytes());
            v.write_body(&mut out);
        }
        let mut next = 0u64;
        let mut data_len = 0u64;
        for t in &self.tensors {
            put_str(&mut out, t.name.as_bytes());
            out.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.ty.to_le_bytes());
            let offset = t.offset.unwrap_or(next);
            out.extend(offset.to_le_bytes());
            if t.offset.is_none() {
                // Overridden offsets are hostile: their data is not written
                // and the next tensor packs as if they were absent.
                next = (offset + t.bytes).next_multiple_of(self.alignment);
                data_len = data_len.max(offset + t.bytes);
            }
        }
        let infos_end = out.len();
        if !self.tensors.is_empty() {
            out.resize(out.len().next_multiple_of(self.alignment as usize), 0);
        }
        out.resize(out.len() + data_len as usize, 0);
        (infos_end, out)
    }

    /// The whole file.
    pub fn build(&self) -> Vec<u8> {
        self.build_parts().1
    }
}
