//! `PrefixCacheActor`: who owns the MLX child's prefix cache (its KV, one
//! conversation at a time). Every MLX turn passes through it in arrival
//! order (`ClaimPrefix`, sent by `Warden::submit`); when the turn's
//! conversation takes the cache over (`law::prefix::plan_claim`) it queues a
//! `Reset` into the engine and then forwards the turn, so the reset runs
//! right before that turn and after every earlier one. It never talks to the
//! child: the engine carries the reset out (with its barrier) on its own
//! child, so the child's client and key stay in the engine.
//!
//! The owner is the conversation of the last turn forwarded, which is the
//! cache's owner once the engine has run it. A failed reset comes back as
//! `ResetFailed` and leaves the owner unknown, so the next claim resets; a
//! turn forwarded before that news arrived runs on the unreset cache, which
//! costs memory for one turn and never correctness (mlx-vlm matches a prefix
//! by its tokens).

use actix::prelude::*;

use crate::actors::EngineActor;
use crate::law::prefix::{Owner, plan_claim};
use crate::messages::Reset;
use crate::messages::prefix::{ClaimPrefix, ResetFailed};

/// The prefix cache actor.
pub struct PrefixCacheActor {
    owner: Owner,
    engine: Addr<EngineActor>,
}

impl PrefixCacheActor {
    /// An owner of nothing yet, forwarding turns to `engine`.
    pub fn new(engine: Addr<EngineActor>) -> Self {
        Self {
            owner: Owner::Empty,
            engine,
        }
    }
}

impl Actor for PrefixCacheActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Turns are bounded by the warden's queue before they get here.
        ctx.set_mailbox_capacity(1 << 20);
    }
}

impl Handler<ClaimPrefix> for PrefixCacheActor {
    type Result = ();

    fn handle(&mut self, ClaimPrefix(turn): ClaimPrefix, _ctx: &mut Self::Context) {
        // A tokenizer call runs nothing through the cache.
        if turn.route.generates() {
            let conversation = turn.conversation.as_deref().unwrap_or("");
            if let Some(reason) = plan_claim(&self.owner, conversation, turn.kind) {
                self.engine.do_send(Reset {
                    reason,
                    model: turn.model.clone(),
                });
            }
            self.owner = Owner::Conversation(conversation.to_string());
        }
        self.engine.do_send(turn);
    }
}

impl Handler<ResetFailed> for PrefixCacheActor {
    type Result = ();

    fn handle(&mut self, _msg: ResetFailed, _ctx: &mut Self::Context) {
        self.owner = Owner::Dirty;
    }
}
