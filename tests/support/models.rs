//! Model files for tests: a tiny valid GGUF writer, the llama- and
//! heavy-shaped models the fakes serve, and the fake's script file
//! beside a model.
use std::io::Write;
use std::path::{Path, PathBuf};

/// One GGUF metadata value the writer supports.
pub enum Kv {
    Str(&'static str, String),
    U32(&'static str, u32),
    U32s(&'static str, Vec<u32>),
}

/// Writes a small valid GGUF (v3) with `kvs` and one f32 tensor of
/// `tensor_elems` elements named `token_embd.weight`.
pub fn write_gguf(path: &Path, kvs: &[Kv], tensor_elems: u64) {
    let mut b: Vec<u8> = Vec::new();
    let s = |b: &mut Vec<u8>, t: &str| {
        b.extend_from_slice(&(t.len() as u64).to_le_bytes());
        b.extend_from_slice(t.as_bytes());
    };
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for kv in kvs {
        match kv {
            Kv::Str(k, v) => {
                s(&mut b, k);
                b.extend_from_slice(&8u32.to_le_bytes());
                s(&mut b, v);
            }
            Kv::U32(k, v) => {
                s(&mut b, k);
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&v.to_le_bytes());
            }
            Kv::U32s(k, v) => {
                s(&mut b, k);
                b.extend_from_slice(&9u32.to_le_bytes());
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&(v.len() as u64).to_le_bytes());
                for x in v {
                    b.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    s(&mut b, "token_embd.weight");
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&tensor_elems.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // F32
    b.extend_from_slice(&0u64.to_le_bytes());
    while !b.len().is_multiple_of(32) {
        b.push(0);
    }
    b.extend(std::iter::repeat_n(0u8, (tensor_elems * 4) as usize));
    std::fs::File::create(path).unwrap().write_all(&b).unwrap();
}

/// The chat template the fake chat models carry (a chat model's GGUF has
/// one; without it the warden serves the model completions only).
pub const FAKE_CHAT_TEMPLATE: &str = "{% for m in messages %}{{ m.content }}{% endfor %}";

/// A llama-shaped GGUF: 2 layers, 2 KV heads, head dim 16, trained `ctx`,
/// a chat template.
pub fn write_llama_gguf(path: &Path, ctx: u32) {
    write_small_llama(path, ctx, true, 64);
}

/// As `write_llama_gguf`, with a chat template or none, and a tensor of
/// `tensor_elems` f32 elements (the file's size).
pub fn write_small_llama(path: &Path, ctx: u32, template: bool, tensor_elems: u64) {
    let mut kvs = vec![Kv::Str("general.architecture", "llama".into())];
    if template {
        kvs.push(Kv::Str("tokenizer.chat_template", FAKE_CHAT_TEMPLATE.into()));
    }
    kvs.extend([
        Kv::U32("llama.block_count", 2),
        Kv::U32("llama.context_length", ctx),
        Kv::U32("llama.embedding_length", 64),
        Kv::U32("llama.attention.head_count", 4),
        Kv::U32("llama.attention.head_count_kv", 2),
    ]);
    write_gguf(path, &kvs, tensor_elems);
}

/// The fake llama-server as a process (`child::fake::process`; its script
/// is `<model>.fake.json`, see `child::fake::script_file`).
pub fn fake_server() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fake-llama-server"))
}

/// Writes a fake model `id.gguf` in `dir` with the fake's `script` beside it.
pub fn fake_model(dir: &Path, id: &str, script: serde_json::Value) -> PathBuf {
    let p = dir.join(format!("{id}.gguf"));
    write_llama_gguf(&p, 8192);
    std::fs::write(dir.join(format!("{id}.gguf.fake.json")), script.to_string()).unwrap();
    p
}

/// A model with a heavy KV (32 layers x 8 KV heads x 128 x 2 x 2 B = 128 KiB
/// per token) and a 16384-token trained window, so that with 8 GiB of
/// (overridden) RAM its 16384- and 8192-token windows are the pressure's
/// cause and a 4096-token one is not (Flash-Attention-shaped heads, for the
/// CUDA engine's tests too).
pub fn heavy_model(dir: &Path, id: &str, script: serde_json::Value) {
    let p = dir.join(format!("{id}.gguf"));
    write_gguf(
        &p,
        &[
            Kv::Str("general.architecture", "llama".into()),
            Kv::Str("tokenizer.chat_template", FAKE_CHAT_TEMPLATE.into()),
            Kv::U32("llama.block_count", 32),
            Kv::U32("llama.context_length", 16384),
            Kv::U32("llama.embedding_length", 4096),
            Kv::U32("llama.attention.head_count", 32),
            Kv::U32("llama.attention.head_count_kv", 8),
        ],
        64,
    );
    std::fs::write(dir.join(format!("{id}.gguf.fake.json")), script.to_string()).unwrap();
}

/// Writes a model `id.gguf` in `dir` for the in-process fake (which takes
/// its script from the test, not from a file).
pub fn model_file(dir: &Path, id: &str) -> PathBuf {
    let p = dir.join(format!("{id}.gguf"));
    write_llama_gguf(&p, 8192);
    p
}

/// Saves `text` at `path` as editors do, written beside and renamed: a
/// watch never reads half a file.
pub fn save(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
