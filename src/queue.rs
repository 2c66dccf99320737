//! The queue bound: how many turns are waiting in the engine's mailbox or
//! running. The mailbox itself is the queue (arrival order is service order);
//! this gauge only counts it, so that past `WARDEN_MAX_QUEUE` a new request
//! is refused at once with 503 `queue_full` instead of waiting without bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts turns in flight.
#[derive(Debug, Default)]
pub struct QueueGauge {
    depth: AtomicUsize,
}

/// One turn's place; dropping it (turn done, or message dropped) frees it.
#[derive(Debug)]
pub struct QueueTicket {
    gauge: Arc<QueueGauge>,
    /// The resident's own gauge, counted too (`try_enter_for`).
    own: Option<Arc<QueueGauge>>,
}

impl QueueGauge {
    /// A ticket when fewer than `max` turns are in flight.
    pub fn try_enter(self: &Arc<Self>, max: usize) -> Option<QueueTicket> {
        self.depth
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| (d < max).then_some(d + 1))
            .ok()
            .map(|_| QueueTicket {
                gauge: self.clone(),
                own: None,
            })
    }

    /// As `try_enter`, the ticket also counted in `own`, one resident's
    /// gauge (unbounded: the bound is this one's): an engine reads its own
    /// depth to refuse an eviction while turns are routed to it.
    pub fn try_enter_for(self: &Arc<Self>, own: &Arc<QueueGauge>, max: usize) -> Option<QueueTicket> {
        let mut ticket = self.try_enter(max)?;
        own.depth.fetch_add(1, Ordering::AcqRel);
        ticket.own = Some(own.clone());
        Some(ticket)
    }

    /// Turns waiting or running now.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Acquire)
    }
}

impl Drop for QueueTicket {
    fn drop(&mut self) {
        self.gauge.depth.fetch_sub(1, Ordering::AcqRel);
        if let Some(own) = &self.own {
            own.depth.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_bound_the_depth_and_free_on_drop() {
        let g = Arc::new(QueueGauge::default());
        let a = g.try_enter(2).unwrap();
        let _b = g.try_enter(2).unwrap();
        assert!(g.try_enter(2).is_none());
        drop(a);
        assert_eq!(g.depth(), 1);
        assert!(g.try_enter(2).is_some());
    }

    /// A resident's ticket counts in both gauges, is bounded by the
    /// warden's, and frees both.
    #[test]
    fn a_residents_ticket_counts_in_both() {
        let all = Arc::new(QueueGauge::default());
        let (a, b) = (Arc::new(QueueGauge::default()), Arc::new(QueueGauge::default()));
        let ta = all.try_enter_for(&a, 2).unwrap();
        let _tb = all.try_enter_for(&b, 2).unwrap();
        assert_eq!((all.depth(), a.depth(), b.depth()), (2, 1, 1));
        assert!(all.try_enter_for(&a, 2).is_none());
        assert_eq!(a.depth(), 1, "a refused ticket counts nowhere");
        drop(ta);
        assert_eq!((all.depth(), a.depth(), b.depth()), (1, 0, 1));
    }
}
