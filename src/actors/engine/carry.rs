//! What a generating turn carries from one child to the next (`resume`
//! decides and requeues; `relay` streams through it): its stream's shape,
//! the transcript its client was sent, the joint of a continuation, and its
//! last child's death while it waits for the next. A leaf: it knows the
//! law's splice, not the engine.

use tokio::time::Instant;

use crate::law::route::Route;
use crate::law::splice::{Dialect, Splice, Transcript};
use crate::sse::SseEvent;

/// What a generating turn carries from one child to the next.
#[derive(Debug, Default)]
pub(crate) struct Carry {
    /// Its stream's shape (`None`: a route with none to continue).
    pub dialect: Option<Dialect>,
    /// Times it went on after a death.
    pub resumes: u32,
    /// What its client was sent before the last joint.
    pub transcript: Transcript,
    /// The joint of this child's stream to that (a continuation).
    pub splice: Option<Splice>,
    /// Its last child's death, while it waits for the next.
    pub pause: Option<Pause>,
    /// The next admission continues (else it runs again).
    pub continuing: bool,
    /// Tokens its client already had, counted once on the new child.
    pub produced: Option<u64>,
    /// What the next child says again before its own text
    /// (`splice::continuation`).
    pub echo: Option<String>,
}

/// A turn's last child's death.
#[derive(Debug, Clone)]
pub(crate) struct Pause {
    /// When (the pause runs from there to the next child's first event).
    pub at: Instant,
    /// The child's pid.
    pub pid: u32,
    /// How it ended: the turn's error code (`child_killed`, `worker_lost`).
    pub code: String,
}

impl Carry {
    /// A new turn's, on `route`.
    pub fn new(route: Route) -> Self {
        Self {
            dialect: Dialect::of(route),
            ..Self::default()
        }
    }

    /// The events a streamed event of the child's becomes for the client:
    /// through the joint on a continuation; as it is otherwise, read into
    /// the transcript (the stream's held-back last event is not sent yet).
    pub fn outgoing(&mut self, ev: &SseEvent, last: bool) -> Vec<bytes::Bytes> {
        if let Some(s) = self.splice.as_mut() {
            return s.pass(ev.event.as_deref(), &ev.data, &ev.raw);
        }
        if !last && let Some(d) = self.dialect {
            self.transcript.read(d, ev.event.as_deref(), &ev.data);
        }
        vec![ev.raw.clone()]
    }

    /// What its client has now, across every joint.
    pub(super) fn sent(&self) -> Transcript {
        self.splice
            .as_ref()
            .map_or_else(|| self.transcript.clone(), Splice::transcript)
    }
}

