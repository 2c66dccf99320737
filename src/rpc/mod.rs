//! llama.cpp RPC workers: the status a worker answers (`status`, shared by
//! both sides), which build a binary is (`build`), the warden's side of its
//! workers (`remote`: addresses, readings, the watch) and the
//! `llm-warden worker` side itself (`worker`: rpc-server supervised, the
//! status endpoint).

pub mod build;
pub mod remote;
pub mod status;
