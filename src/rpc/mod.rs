//! llama.cpp RPC workers: the status a worker answers (`status`).

pub mod status;
