//! The recent lifecycle events, numbered, in a bounded ring: what
//! `/warden/events` replays to a subscriber before its live events, so the
//! dashboard's timeline opens with what happened before the page did, and a
//! reconnecting `EventSource` (which sends the last id it saw as
//! `Last-Event-ID`) gets exactly what it missed, nothing twice.
//!
//! `RECENT_EVENTS` = 256: a dashboard shows the last 200 (its timeline's
//! bound), and 256 events take about 64 KiB. The ring is fed by one task
//! subscribed to the engine's broadcast; it numbers each event and
//! re-broadcasts it with its number, so a replay and the live stream after
//! it share one numbering and the seam between them is exact.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::broadcast::{self, error::RecvError};

use crate::status::WardenEvent;

/// How many events the ring keeps.
pub const RECENT_EVENTS: usize = 256;

/// One numbered event and when the warden saw it (Unix ms).
#[derive(Debug, Clone)]
pub struct Numbered {
    /// Its number, from 1, in the order the engine sent them.
    pub id: u64,
    /// When it was recorded.
    pub at_ms: u64,
    /// The event.
    pub event: Arc<WardenEvent>,
}

/// The ring and the numbered stream.
#[derive(Debug)]
pub struct Recent {
    ring: Mutex<VecDeque<Numbered>>,
    live: broadcast::Sender<Numbered>,
}

impl Recent {
    /// Starts recording `events` (on the current runtime); ends with them.
    pub fn start(events: &broadcast::Sender<WardenEvent>) -> Arc<Self> {
        let me = Arc::new(Self {
            ring: Mutex::new(VecDeque::with_capacity(RECENT_EVENTS)),
            live: broadcast::channel(super::EVENTS_BUFFER).0,
        });
        let mut rx = events.subscribe();
        let recorder = me.clone();
        actix::spawn(async move {
            let mut next = 1u64;
            loop {
                match rx.recv().await {
                    Ok(event) => {
                        recorder.record(next, Arc::new(event));
                        next += 1;
                    }
                    // The numbers skip what was lost, so a reader sees the gap.
                    Err(RecvError::Lagged(n)) => next += n,
                    Err(RecvError::Closed) => return,
                }
            }
        });
        me
    }

    fn record(&self, id: u64, event: Arc<WardenEvent>) {
        let at_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let n = Numbered { id, at_ms, event };
        // A poisoned lock still holds a valid ring.
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == RECENT_EVENTS {
            ring.pop_front();
        }
        ring.push_back(n.clone());
        // Under the lock: a subscriber that snapshots the ring under it
        // gets every later event live, none twice.
        let _ = self.live.send(n);
    }

    /// The events after `after` (all kept when `None`), and the live ones
    /// that follow them.
    pub fn since(&self, after: Option<u64>) -> (Vec<Numbered>, broadcast::Receiver<Numbered>) {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let rx = self.live.subscribe();
        let kept = ring
            .iter()
            .filter(|n| after.is_none_or(|a| n.id > a))
            .cloned()
            .collect();
        (kept, rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recent() -> Recent {
        Recent {
            ring: Mutex::new(VecDeque::new()),
            live: broadcast::channel(16).0,
        }
    }

    fn ev(seq: u64) -> Arc<WardenEvent> {
        Arc::new(WardenEvent::TurnStarted { seq })
    }

    /// The ring keeps the last RECENT_EVENTS; a reader after an id gets
    /// the later ones, then the live ones, with no gap and nothing twice.
    #[test]
    fn a_reader_gets_what_it_missed_then_the_rest_live() {
        let r = recent();
        for id in 1..=(RECENT_EVENTS as u64 + 10) {
            r.record(id, ev(id));
        }
        let (all, _) = r.since(None);
        // why: the ring is bounded: the 10 oldest are gone
        assert_eq!((all.len(), all[0].id), (RECENT_EVENTS, 11));
        let (missed, mut live) = r.since(Some(RECENT_EVENTS as u64 + 8));
        assert_eq!(missed.iter().map(|n| n.id).collect::<Vec<_>>(), [265, 266]);
        r.record(267, ev(267));
        // why: what is recorded after the snapshot comes live, once
        assert_eq!(live.try_recv().unwrap().id, 267);
        assert!(live.try_recv().is_err());
    }
}
