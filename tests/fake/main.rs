//! The warden against a fake child: the engine actor scripted message by
//! message, its faults, watchdogs and supervision, and the HTTP faces over
//! the one fake (`child::fake`), in-process or run as a process (the
//! `fake-llama-server` binary). Fast, and runs without llama-server.
//!
//! One module per area; `support` is the one set of helpers (tests/support).

#[path = "../support/mod.rs"]
mod support;

mod bad_models;
mod brake_actor;
mod cli_docs;
mod cuda_engine;
mod dialects_http;
mod engine_actor;
mod faults_fake;
mod http_api;
mod kv_faults;
mod live_settings;
mod load;
mod mlx_bound;
mod mlx_runner;
mod no_template;
mod pull;
mod resume;
mod run_cli;
mod settings_file;
mod slots_actor;
mod stores;
mod supervision;
mod turn_stream;
mod watchdogs;
