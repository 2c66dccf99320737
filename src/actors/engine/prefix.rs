//! The MLX child's prefix cache, the actor's part: the owner's `Reset`
//! (`PrefixCacheActor`, queued before a turn) planned by the law
//! (`law::prefix::plan_reset`: skipped when the cache holds no conversation
//! or the turn starts a fresh child; a barrier first after an abandoned
//! turn), carried out by the engine (`MlxChild::reset_cache`), and said:
//! one INFO line and a `prefix_reset` event, or one WARNING and a
//! `ResetFailed` to the owner. A failure never fails a turn.

use super::core::EngineCore;
use crate::law::prefix::{ResetPlan, plan_reset};
use crate::messages::Reset;
use crate::messages::prefix::ResetFailed;
use crate::status::WardenEvent;

impl EngineCore {
    /// The `Reset` the prefix cache's owner queued before a turn.
    pub(crate) async fn reset_prefix(&mut self, msg: Reset) {
        let same_model = self.child.holds(&msg.model);
        let cache = self.child.get().and_then(|c| c.engine.prefix_cache());
        let barrier = match plan_reset(cache, same_model) {
            ResetPlan::Skip(why) => {
                tracing::debug!("prefix cache reset ({}) skipped: {why}", msg.reason);
                return;
            }
            ResetPlan::Reset { barrier } => barrier,
        };
        let timeout = self.cfg().first_token_timeout;
        let done = match self.child.get_mut() {
            Some(c) => {
                let (view, engine) = c.parts();
                engine.reset_prefix_cache(view, barrier, timeout).await
            }
            None => Err("reset: no child".into()),
        };
        match done {
            Ok(()) => self.said_reset(msg.reason, barrier),
            Err(why) => {
                tracing::warn!("prefix cache {why}; the next turn retries");
                self.prefix_failed();
            }
        }
    }

    /// A reset done: the log line and the event.
    pub(crate) fn said_reset(&self, reason: &'static str, barrier: bool) {
        tracing::info!("Prefix cache reset: reason={reason}");
        self.emit(WardenEvent::PrefixReset { reason, barrier });
    }

    /// Tells the owner the cache's contents are unknown.
    pub(crate) fn prefix_failed(&self) {
        if let Some(p) = &self.outlets.prefix {
            p.do_send(ResetFailed);
        }
    }
}
