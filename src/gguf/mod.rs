//! Header-only GGUF reader: turns a model file (or a split family) into
//! [`ModelFacts`] for the context-window law (KV bytes per token) and the
//! placement check, reading the header and tensor infos only.
//!
//! # Use
//!
//! [`read_model_facts`] is the entry point; [`read_header`] is the per-file
//! parse under it (tests use its `bytes_read` to prove the tensor data is
//! never touched). Every failure is a [`GgufError`] with a stable
//! [`GgufError::code`], the path at fault and a reason; bad input never
//! panics.
//!
//! # Why our own reader, not a crate
//!
//! - `gguf-rs` 0.1.8 (measured earlier): forces serde_json's
//!   `arbitrary_precision` on the whole build, reads unbuffered (~230 ms on
//!   the 98 MB SmolLM2), has a wrong file-type table, panics on a
//!   non-numeric `general.file_type`, fails the parse on an unknown tensor
//!   type. Rejected.
//! - `gguf-rs-lib` 0.3.3 (measured here, release build, best warm read of 5,
//!   `reader::open_gguf_file`, machine loaded by a llama.cpp build, load
//!   average 5-7): **41-55 ms** on SmolLM2-135M (98 MB) and **128-196 ms**
//!   on Gemma-3-270M (253 MB), against a 10 ms target; max RSS 33.7 MiB on
//!   Gemma (`/usr/bin/time -f %M`). It decodes every metadata value into
//!   memory, including the 262,144-entry vocabulary (default decode budget
//!   256 MiB). On the 17 hostile inputs in `tests/data/gguf/` it returned
//!   errors, never panicked, and errored on unknown tensor types (good), but
//!   accepted a nested array (llama.cpp refuses it), and reported a cut
//!   string and an absurd 2 MiB string alike as `I/O error: failed to fill
//!   whole buffer`, so a caller cannot tell a truncated download
//!   (`gguf_truncated`, fatal to the warden) from a corrupt header
//!   (`gguf_invalid`, the warden falls back to llama-server's own check).
//!   Rejected on speed and on error precision.
//! - This reader (`cargo test --release --test gguf_reader read_time --
//!   --nocapture`, same machine, best of 10 warm reads): **0.45 ms** on
//!   SmolLM2, **1.2 ms** on Gemma (debug build: 4.6 / 15 ms); max RSS
//!   2.0 MiB. It pulls 1.56 MiB of SmolLM2's 1.70 MiB header and 4.4 MiB of
//!   Gemma's 6.2 MiB header from the OS (fixed-size arrays such as scores are
//!   seeked over) and nothing of the tensor data. A 30 GB model costs what
//!   its header costs.
//!
//! # How it reads
//!
//! A 64 KiB `BufReader` over the file; a position and the file size are
//! tracked, and every count or length is checked against the bytes left
//! before anything is read or allocated. Only the keys the facts need are
//! decoded (`general.architecture`, `general.name`, `general.file_type`,
//! `general.alignment`, `split.*`, and `*.block_count`, `*.context_length`,
//! `*.embedding_length`, `*.attention.{head_count, head_count_kv,
//! key_length, value_length, sliding_window, sliding_window_pattern,
//! kv_lora_rank, max_alibi_bias}`, `*.pooling_type`); every other value is
//! seeked over: a fixed-size array in one seek, a string array by reading
//! each length and stepping over the bytes inside the buffer. `tokenizer.chat_template`
//! only counts by its presence. Tensor infos are sized from the ggml type
//! table ([`ggml_types`]) and summed on the fly; nothing is kept per tensor.
//!
//! # Bounds on hostile input (all without reading data)
//!
//! - A count or length above an absolute cap is `gguf_invalid`: strings the
//!   reader keeps or that lie outside `tokenizer.*` over 1 MiB (keys
//!   included); skipped `tokenizer.*` strings over 1 GiB and arrays over
//!   2^30 elements (llama.cpp's own limits); `tensor_count` / `kv_count`
//!   over 2^24; tensor names of 64 bytes or more (`GGML_MAX_NAME`); `n_dims`
//!   over 4; `block_count` over 512 (`LLAMA_MAX_LAYERS`).
//! - A plausible count or length that the bytes left cannot hold (records
//!   times their minimum size, array elements times their minimum size) is
//!   `gguf_truncated`: that is what a cut download looks like, and the warden
//!   treats it as fatal.
//! - Decoded metadata is charged to a 4 MiB budget (key, value and map
//!   overhead per kept entry); past it the header is `gguf_invalid`. Heap
//!   held during a read stays a few KiB for real files; the tests assert
//!   under 16 MiB for every hostile input and fuzz case.
//! - Unknown value types, nested arrays, duplicate kept keys, a
//!   `general.alignment` that is not a u32 power of two, negative or
//!   overflowing dims, a row not a whole number of blocks, an offset not
//!   aligned: `gguf_invalid`.
//! - **Unknown tensor types are an error** (`gguf_invalid`, "unknown tensor
//!   type N"), not "size unknown": the pinned llama.cpp refuses any type id
//!   outside its table (removed ids 4, 5, 31-33, 36-38 included), so the
//!   file would not load there either, and skipping the bound check would
//!   let a cut file through. As `gguf_invalid` is not fatal to the warden, a
//!   newer llama.cpp that knows the type still gets to decide.
//! - Tensor data past the end: data start (after the infos, aligned) plus
//!   the largest `offset + bytes` must fit in the file, per part; else
//!   `model_truncated`.
//!
//! Not checked (llama.cpp checks them at load): exact packing of tensor
//! offsets, duplicate tensor names, duplicate keys that are not kept.
//!
//! # Split families
//!
//! A path named `*-00001-of-0000N.gguf` (llama.cpp's `%s-%05d-of-%05d.gguf`)
//! is the first of N parts; the facts come from part 1, whose `split.count`
//! must agree with N (a `split.count` over 1 on a file not named so is
//! `gguf_invalid`, as is passing part K > 1). Every part must exist
//! (`split_part_missing`), have a valid header with its data in bounds, and
//! carry `split.no = K - 1` when it has the key; sizes, tensor counts and
//! expert bytes are summed, and `split.tensors.count` must match the sum.

mod error;
mod facts;
mod ftype;
pub mod ggml_types;
mod kv;
mod pooling;
pub mod reader;
mod source;
pub mod split;
pub mod value;

pub use error::GgufError;
pub use facts::{ModelFacts, read_model_facts};
pub use pooling::Pooling;
pub use reader::read_header;
