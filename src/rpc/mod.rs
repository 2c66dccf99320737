//! llama.cpp RPC workers: the status a worker answers (`status`, shared with
//! the warden) and the `llm-warden worker` side itself (`worker`: rpc-server
//! supervised, the status endpoint).

pub mod status;
pub mod worker;
