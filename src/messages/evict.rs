//! `Evict`: an engine making room for its load, or the brake over all
//! residents (`law::residents`) → another resident's `EngineActor`: stop
//! your idle child (its KV saved first, as an unload does) because another
//! model needs the memory. Replies the bytes freed (the law's footprint),
//! or `None` when there was nothing to stop or a turn was routed to it
//! since the decision (its queue is not empty): a resident with work is
//! never evicted, so the asker decides again.

use actix::Message;

/// Stop the idle child for another model.
#[derive(Debug, Message)]
#[rtype(result = "Option<u64>")]
pub struct Evict;
