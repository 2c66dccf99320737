//! `WorkerCheck`: sent by the worker watch (`rpc::remote::start_watch`) to
//! the `EngineActor` whenever a worker's reading fails or its rpc-server
//! changes. The engine retires a live child one of whose workers is lost
//! (a turn in flight has already seen it through its own watch); nothing
//! to answer.

use actix::Message;

/// Look at the workers again.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct WorkerCheck;
