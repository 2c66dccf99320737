//! The file formats the warden reads, tested without a child: the GGUF
//! header reader (built files, bad input, fuzzing, the real models' headers)
//! and the SSE parser (property tests and recorded streams).
//!
//! One module per area; `support` is the one set of helpers (tests/support).

#[path = "../support/mod.rs"]
mod support;

mod gguf_reader;
mod sse_parser;
