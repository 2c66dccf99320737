//! The warden's side door: tokenizer calls (and the child's own metrics)
//! reach the live child beside a running turn instead of through the queue.

use super::{Resolved, Warden};
use crate::actors::engine::{Door, DoorError};
use crate::error::WardenError;
use crate::law::request_chat::Needs;
use crate::law::route::Route;

/// How long a tokenizer call through the side door may take (it reads the
/// vocabulary, milliseconds even for a long text).
const TOKENIZER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Warden {
    /// The side door to the live child when it runs `model`, else `None`.
    fn door_for(&self, model: &str) -> Option<Door> {
        let door = self.inner.residency.engine(Some(model))?.door.borrow().clone()?;
        (door.model == model).then_some(door)
    }

    /// The side door to the child of the most recently used resident.
    pub(crate) fn door(&self) -> Option<Door> {
        self.inner.residency.current()?.door.borrow().clone()
    }

    /// The side door to every live child (the metrics read each).
    pub(crate) fn doors(&self) -> Vec<Door> {
        self.inner
            .residency
            .engines()
            .iter()
            .filter_map(|s| s.door.borrow().clone())
            .collect()
    }

    /// A tokenizer call: straight to the child when it runs the model
    /// (beside any running turn: see `law::route`), else `None` and the
    /// caller queues it as a turn, which loads the model first. A child that
    /// stops between the look and the call is also answered through the
    /// queue. `model` was resolved for `route` (`Warden::resolve_for`),
    /// which refused a route this engine's child does not serve.
    pub(crate) async fn tokenize_now(
        &self,
        route: Route,
        model: &Resolved,
        needs: &Needs,
        body: bytes::Bytes,
    ) -> Option<Result<(u16, bytes::Bytes), WardenError>> {
        // What the queue's submit would refuse, refused here too (an
        // image counted for a model with no projector).
        if let Some(v) = needs.unmet(model.caps, &model.entry.id) {
            return Some(Err(WardenError::Unmet(v)));
        }
        let door = self.door_for(&model.entry.id)?;
        match door.tokenizer(route, body, TOKENIZER_TIMEOUT).await {
            Ok(v) => Some(Ok(v)),
            Err(DoorError::Transport(_)) => None,
            Err(DoorError::Timeout) => Some(Err(WardenError::ChildTimeout {
                route: route.path(),
                after: TOKENIZER_TIMEOUT,
            })),
            Err(DoorError::NotADoorRoute) => None,
        }
    }
}
