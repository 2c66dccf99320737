//! `TurnEvents`: a turn's events as one `Stream`, with the child's streamed
//! answer (`TurnEvent::Stream`, a `Relay` to pull) expanded in place into
//! `TurnEvent::Chunk`s. What the HTTP response, the CLI and an embedding
//! application read; the relay is still pulled on the reader's own thread.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

use super::TurnEvent;
use crate::child::relay::Relay;

/// A turn's events, relay expanded.
pub struct TurnEvents {
    /// An event read ahead (the HTTP handler peeks at the first).
    first: Option<TurnEvent>,
    rx: mpsc::Receiver<TurnEvent>,
    relay: Option<Box<Relay>>,
}

impl TurnEvents {
    /// The events of the turn behind `rx`, `first` (already received) first.
    pub fn new(first: Option<TurnEvent>, rx: mpsc::Receiver<TurnEvent>) -> Self {
        Self { first, rx, relay: None }
    }

    /// The next event (`None` once the engine is done with the turn).
    pub async fn next_event(&mut self) -> Option<TurnEvent> {
        futures::StreamExt::next(self).await
    }
}

impl Stream for TurnEvents {
    type Item = TurnEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TurnEvent>> {
        let this = &mut *self;
        loop {
            if let Some(relay) = this.relay.as_mut() {
                match Pin::new(relay.as_mut()).poll_next(cx) {
                    Poll::Ready(Some(bytes)) => return Poll::Ready(Some(TurnEvent::Chunk(bytes))),
                    // Ended: its end went to the engine, which sends the rest.
                    Poll::Ready(None) => this.relay = None,
                    Poll::Pending => return Poll::Pending,
                }
            }
            let next = match this.first.take() {
                Some(ev) => Some(ev),
                None => match this.rx.poll_recv(cx) {
                    Poll::Ready(ev) => ev,
                    Poll::Pending => return Poll::Pending,
                },
            };
            match next {
                Some(TurnEvent::Stream(relay)) => this.relay = Some(relay),
                other => return Poll::Ready(other),
            }
        }
    }
}
