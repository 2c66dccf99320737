//! The MLX child's prefix cache, on the engine's side: a `Reset` carried
//! out on the engine's own child (`law::prefix::plan_reset`: skipped when
//! the cache holds no conversation; a barrier first after an abandoned
//! turn), the memory brake's release, and what each turn leaves in the
//! cache. Every failure is one WARNING and a `ResetFailed` to the owner; it
//! never fails a turn.

use crate::actors::engine::EngineCore;
use crate::engines::mlx;
use crate::law::prefix::{ChildCache, ResetPlan, plan_reset};
use crate::messages::Reset;
use crate::messages::prefix::ResetFailed;
use crate::status::WardenEvent;

impl EngineCore {
    /// The `Reset` the prefix cache's owner queued before a turn.
    pub(crate) async fn reset_prefix(&mut self, msg: Reset) {
        let same_model = match (self.resolve(msg.model.as_deref()), &self.child) {
            (Ok(entry), Some(c)) => c.model_id() == entry.id,
            _ => false,
        };
        let barrier = match plan_reset(
            self.child.as_ref().and_then(|c| Some(c.engine.mlx()?.cache)),
            same_model,
        ) {
            ResetPlan::Skip(why) => {
                tracing::debug!("prefix cache reset ({}) skipped: {why}", msg.reason);
                return;
            }
            ResetPlan::Reset { barrier } => barrier,
        };
        match self.reset_cache(barrier).await {
            Ok(()) => {
                tracing::info!("Prefix cache reset: reason={}", msg.reason);
                self.emit(WardenEvent::PrefixReset {
                    reason: msg.reason,
                    barrier,
                });
            }
            Err(why) => {
                tracing::warn!("prefix cache {why}; the next turn retries");
                self.prefix_failed();
            }
        }
    }

    /// The brake's release: the reset (with its barrier when due), said as
    /// a `memory` reset, then a one-token request.
    pub(crate) async fn release_cache(&mut self) -> Result<(), String> {
        let barrier = self
            .child
            .as_ref()
            .and_then(|c| c.engine.mlx())
            .is_some_and(|m| m.cache.abandoned);
        if let Err(why) = self.reset_cache(barrier).await {
            self.prefix_failed();
            return Err(why);
        }
        tracing::info!("Prefix cache reset: reason=memory");
        self.emit(WardenEvent::PrefixReset {
            reason: "memory",
            barrier,
        });
        let Some(c) = self.child.as_ref() else {
            return Err("no child".into());
        };
        // mlx-vlm clears its buffer cache after a non-streamed request.
        let r = mlx::one_token(
            &c.client,
            &mlx::model_arg(&c.plan.entry.path),
            self.cfg.first_token_timeout,
        )
        .await;
        r.map_err(|why| format!("request: {why}"))
    }

    /// The barrier (when asked) and the reset; the cache is fresh after.
    async fn reset_cache(&mut self, barrier: bool) -> Result<(), String> {
        let Some(c) = self.child.as_ref() else {
            return Err("reset: no child".into());
        };
        if barrier {
            let model = mlx::model_arg(&c.plan.entry.path);
            mlx::one_token(&c.client, &model, self.cfg.first_token_timeout)
                .await
                .map_err(|why| format!("barrier failed ({why})"))?;
        }
        mlx::reset_cache(&c.client)
            .await
            .map_err(|why| format!("reset failed ({why})"))?;
        if let Some(m) = self.child.as_mut().and_then(|c| c.engine.mlx_mut()) {
            m.cache = ChildCache::FRESH;
        }
        Ok(())
    }

    /// Tells the owner the cache's contents are unknown.
    fn prefix_failed(&self) {
        if let Some(p) = &self.prefix {
            p.do_send(ResetFailed);
        }
    }

    /// What a generating turn left in the MLX child's cache: a
    /// conversation's KV, and whether its request may still be in the
    /// batch (abandoned) or has proved the batch empty (completed).
    pub(crate) fn cache_after_turn(&mut self, abandoned: bool, completed: bool) {
        if let Some(m) = self.child.as_mut().and_then(|c| c.engine.mlx_mut()) {
            m.cache.fresh = false;
            if abandoned {
                m.cache.abandoned = true;
            } else if completed {
                m.cache.abandoned = false;
            }
        }
    }
}
