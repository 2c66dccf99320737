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
use crate::messages::prefix::{ClaimPrefix, ResetFailed};
use crate::messages::{Generate, Reset};

/// The prefix cache actor.
pub struct PrefixCacheActor {
    owner: Owner,
    /// Where resets go (the engine).
    resets: Recipient<Reset>,
    /// Where turns go (the engine's same mailbox, so a reset sent first is
    /// handled first).
    turns: Recipient<Generate>,
}

impl PrefixCacheActor {
    /// An owner of nothing yet, forwarding turns to `engine`.
    pub fn new(engine: Addr<EngineActor>) -> Self {
        Self::over(engine.clone().recipient(), engine.recipient())
    }

    /// The same over any mailbox that takes both (a test's recorder).
    fn over(resets: Recipient<Reset>, turns: Recipient<Generate>) -> Self {
        Self {
            owner: Owner::Empty,
            resets,
            turns,
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
        let req = &turn.request;
        if req.route.generates() {
            let conversation = req.conversation.as_deref().unwrap_or("");
            if let Some(reason) = plan_claim(&self.owner, conversation, req.kind) {
                self.resets.do_send(Reset {
                    reason,
                    model: turn.entry.id.clone(),
                });
            }
            self.owner = Owner::Conversation(conversation.to_string());
        }
        self.turns.do_send(turn);
    }
}

impl Handler<ResetFailed> for PrefixCacheActor {
    type Result = ();

    fn handle(&mut self, _msg: ResetFailed, _ctx: &mut Self::Context) {
        self.owner = Owner::Dirty;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::law::route::Route;
    use crate::messages::TurnRequest;
    use crate::messages::prefix::TurnKind;

    /// A mailbox that records what reaches it, in order.
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Actor for Recorder {
        type Context = Context<Self>;
    }

    impl Handler<Reset> for Recorder {
        type Result = ();
        fn handle(&mut self, m: Reset, _: &mut Context<Self>) {
            self.0.lock().unwrap().push(format!("reset:{}", m.reason));
        }
    }

    impl Handler<Generate> for Recorder {
        type Result = ();
        fn handle(&mut self, m: Generate, _: &mut Context<Self>) {
            let who = m.request.conversation.unwrap_or_default();
            self.0.lock().unwrap().push(format!("turn:{who}"));
        }
    }

    fn turn(conversation: &str, kind: TurnKind, route: Route) -> ClaimPrefix {
        let (events, _) = tokio::sync::mpsc::channel(1);
        let entry = crate::catalog::ModelEntry {
            id: "m".into(),
            path: "/m".into(),
            format: crate::catalog::ModelFormat::Mlx,
            mmproj: None,
        };
        ClaimPrefix(Generate {
            request: TurnRequest::new(route, crate::messages::body::TurnBody::default())
                .stream(true)
                .conversation(Some(conversation.into()))
                .kind(kind),
            entry: Arc::new(entry),
            events,
            seq: 0,
            ticket: None,
            home: None,
        })
    }

    /// Each reset reaches the engine's mailbox right ahead of the turn that
    /// needs it, and a failed reset makes the next claim reset again.
    #[actix_rt::test]
    async fn a_reset_is_queued_just_ahead_of_its_turn() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let rec = Recorder(log.clone()).start();
        let pca = PrefixCacheActor::over(rec.clone().recipient(), rec.clone().recipient()).start();
        for (conv, kind, route) in [
            ("a", TurnKind::Chat, Route::Chat),
            ("a", TurnKind::Chat, Route::Chat),
            ("b", TurnKind::Chat, Route::Chat),
            ("b", TurnKind::Arena, Route::Chat),
            // A tokenizer call claims nothing.
            ("c", TurnKind::Chat, Route::Tokenize),
            ("b", TurnKind::Chat, Route::Chat),
        ] {
            pca.do_send(turn(conv, kind, route));
        }
        pca.send(ResetFailed).await.unwrap();
        pca.send(turn("b", TurnKind::Chat, Route::Chat)).await.unwrap();
        // The recorder got everything the actor forwarded before it answered.
        rec.send(Reset {
            reason: "end",
            model: "m".into(),
        })
        .await
        .unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            [
                "turn:a",
                "turn:a",
                "reset:conversation_change",
                "turn:b",
                "reset:arena",
                "turn:b",
                "turn:c",
                "turn:b",
                "reset:conversation_change",
                "turn:b",
                "reset:end",
            ]
        );
    }
}
