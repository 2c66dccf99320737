//! `PrefixCacheActor`: who holds the MLX child's KV (its prefix cache, one
//! conversation at a time), and the resets and barriers that keep it honest.
//! The engine awaits its replies inside atomic handlers, so its HTTP calls
//! to the child are serialized with every turn.
//!
//! - A turn of another conversation (or an Arena or compaction turn) resets
//!   the cache first: `POST /v1/cache/reset` (5 s), `{"enabled": false}`
//!   counting as success; logged `Prefix cache reset: reason=...`.
//! - After an abandoned turn, a barrier goes first: a one-token request,
//!   bounded by the first-chunk ceiling. With `MLX_VLM_MAX_NUM_SEQS=1` its
//!   completion proves the cancelled request left the batch, so the reset
//!   cannot race the cancelled request's late release of its blocks.
//! - A failed barrier or reset is one WARNING and leaves the owner dirty, so
//!   the next claim retries; it never fails a turn.

use std::time::Duration;

use actix::prelude::*;
use actix::{ActorFutureExt, WrapFuture};

use tokio::sync::broadcast;

use crate::child::client::ChildClient;
use crate::law::prefix::{Owner, plan_claim};
use crate::messages::prefix::{ClaimPrefix, PrefixAbandoned, PrefixChildChanged, ReleaseCache};
use crate::status::WardenEvent;

/// Bound of a reset (the spec's 5 s).
pub const RESET_TIMEOUT: Duration = Duration::from_secs(5);

/// The prefix cache actor.
pub struct PrefixCacheActor {
    owner: Owner,
    /// The last turn was abandoned: a barrier must precede the next reset.
    abandoned: bool,
    /// Where resets are announced (`/warden/events`).
    events: broadcast::Sender<WardenEvent>,
}

impl PrefixCacheActor {
    /// An actor for a child with an empty cache.
    pub fn new(events: broadcast::Sender<WardenEvent>) -> Self {
        Self {
            owner: Owner::Empty,
            abandoned: false,
            events,
        }
    }
}

impl Actor for PrefixCacheActor {
    type Context = Context<Self>;
}

/// `POST /v1/cache/reset`.
async fn reset(client: &ChildClient) -> Result<(), String> {
    let r = client
        .request(reqwest::Method::POST, "/v1/cache/reset")
        .timeout(RESET_TIMEOUT)
        .send()
        .await
        .map_err(|e| crate::child::ready::transport(&e))?;
    if !r.status().is_success() {
        return Err(format!("HTTP {}", r.status().as_u16()));
    }
    let v: serde_json::Value = r.json().await.map_err(|_| "an unreadable answer".to_string())?;
    let ok =
        v.get("enabled") == Some(&serde_json::Value::Bool(false)) || v.get("status").is_some_and(|s| s == "cleared");
    if ok { Ok(()) } else { Err("an unexpected answer".into()) }
}

/// One-token request: the barrier's and the release's shape.
async fn one_token(client: &ChildClient, model: &str, timeout: Duration) -> Result<(), String> {
    let body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "stream": false,
    });
    let r = client
        .request(reqwest::Method::POST, "/v1/chat/completions")
        .timeout(timeout)
        .json(&body)
        .send()
        .await
        .map_err(|e| crate::child::ready::transport(&e))?;
    let status = r.status();
    let _ = r.bytes().await;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("HTTP {}", status.as_u16()))
    }
}

impl Handler<ClaimPrefix> for PrefixCacheActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: ClaimPrefix, _ctx: &mut Self::Context) -> Self::Result {
        let plan = plan_claim(&self.owner, self.abandoned, &msg.conversation, msg.kind);
        let conversation = msg.conversation.clone();
        let events = self.events.clone();
        AtomicResponse::new(Box::pin(
            async move {
                if plan.barrier
                    && let Err(why) = one_token(&msg.client, &msg.model, msg.barrier_timeout).await
                {
                    tracing::warn!("prefix cache barrier failed ({why}); the reset waits for the next turn");
                    return Err(());
                }
                if let Some(reason) = plan.reset {
                    if let Err(why) = reset(&msg.client).await {
                        tracing::warn!("prefix cache reset failed ({why}); the next turn retries");
                        return Err(());
                    }
                    tracing::info!("Prefix cache reset: reason={reason}");
                    let _ = events.send(WardenEvent::PrefixReset {
                        reason,
                        barrier: plan.barrier,
                    });
                }
                Ok(())
            }
            .into_actor(self)
            .map(move |r, act, _| match r {
                Ok(()) => {
                    act.owner = Owner::Conversation(conversation);
                    act.abandoned = false;
                }
                Err(()) => act.owner = Owner::Dirty,
            }),
        ))
    }
}

impl Handler<PrefixAbandoned> for PrefixCacheActor {
    type Result = ();

    fn handle(&mut self, _msg: PrefixAbandoned, _ctx: &mut Self::Context) {
        self.abandoned = true;
    }
}

impl Handler<PrefixChildChanged> for PrefixCacheActor {
    type Result = ();

    fn handle(&mut self, _msg: PrefixChildChanged, _ctx: &mut Self::Context) {
        self.owner = Owner::Empty;
        self.abandoned = false;
    }
}

impl Handler<ReleaseCache> for PrefixCacheActor {
    type Result = AtomicResponse<Self, Result<(), String>>;

    fn handle(&mut self, msg: ReleaseCache, _ctx: &mut Self::Context) -> Self::Result {
        let barrier = self.abandoned;
        let events = self.events.clone();
        AtomicResponse::new(Box::pin(
            async move {
                if barrier {
                    one_token(&msg.client, &msg.model, msg.timeout)
                        .await
                        .map_err(|why| format!("barrier: {why}"))?;
                }
                reset(&msg.client).await.map_err(|why| format!("reset: {why}"))?;
                tracing::info!("Prefix cache reset: reason=memory");
                let _ = events.send(WardenEvent::PrefixReset {
                    reason: "memory",
                    barrier,
                });
                // mlx-vlm clears its buffer cache after a non-streamed request.
                one_token(&msg.client, &msg.model, msg.timeout)
                    .await
                    .map_err(|why| format!("request: {why}"))
            }
            .into_actor(self)
            .map(|r, act, _| {
                match &r {
                    Ok(()) => {
                        act.owner = Owner::Empty;
                        act.abandoned = false;
                    }
                    Err(_) => act.owner = Owner::Dirty,
                }
                r
            }),
        ))
    }
}
