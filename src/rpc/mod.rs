//! llama.cpp RPC workers: the status a worker answers (`status`, shared by
//! both sides), which build a binary is (`build`), the warden's side of its
//! workers (`remote`: addresses, readings, the watch). The
//! `llm-warden worker` side itself (rpc-server supervised, the status
//! endpoint) is the top-level `crate::worker`.

pub mod build;
pub mod remote;
pub mod status;
