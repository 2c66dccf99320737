//! llama.cpp RPC workers: the status a worker answers (`status`), which
//! build a binary is (`build`), and the warden's side of its workers
//! (`remote`: addresses, readings, the watch).

pub mod build;
pub mod remote;
pub mod status;
