//! The MLX child's prefix cache, on the engine's side: the reset itself
//! (a barrier request first after an abandoned turn, then the cache's
//! clear), leaving the engine's record of the cache fresh. When a reset is
//! due is the law's (`law::prefix::plan_reset`); the actor carries the
//! owner's `Reset` and says what came of it.

use std::time::Duration;

use super::MlxChild;
use crate::engines::live::ChildView;
use crate::law::prefix::ChildCache;

impl MlxChild {
    /// The barrier (when asked) and the reset; the cache is fresh after.
    pub(crate) async fn reset_cache(
        &mut self,
        child: ChildView<'_>,
        barrier: bool,
        timeout: Duration,
    ) -> Result<(), String> {
        if barrier {
            let model = super::model_arg(&child.plan.entry.path);
            super::one_token(child.client, &model, timeout)
                .await
                .map_err(|why| format!("barrier failed ({why})"))?;
        }
        super::reset_cache(child.client)
            .await
            .map_err(|why| format!("reset failed ({why})"))?;
        self.cache = ChildCache::FRESH;
        Ok(())
    }
}
