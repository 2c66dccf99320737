//! The warden against the world: the real llama-server with the real
//! models, mlx_vlm.server, the official client libraries, memory cgroups,
//! network namespaces, RPC workers and a real browser. Every test here is
//! `#[ignore]`d with what it needs; ./test.sh runs them all.
//!
//! One module per area; `support` is the one set of helpers (tests/support).

#[path = "../support/mod.rs"]
mod support;

mod anthropic_client;
mod backpressure;
mod cgroup;
mod cli;
mod compact;
mod cors;
mod dialects_real;
mod embedding_model;
mod embeddings_http;
mod fuzz_requests;
mod hostile_clients;
mod hostile_requests;
mod kv_save;
mod kv_swa;
mod ladder;
mod live_settings;
mod llama_build;
mod metrics;
mod no_template;
mod ollama_client;
mod openai_client;
mod orphans;
mod real_brake;
mod real_http;
mod real_kv_law;
mod real_llama;
mod real_mlx;
mod reliability;
mod residents;
mod resume;
mod routes;
mod rpc_netns;
mod rpc_split;
mod schedule;
mod security;
mod slots;
mod stores;
mod ui;
mod upstream;
mod worker;
