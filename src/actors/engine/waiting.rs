//! What the engine's intake holds for the engine itself (`intake::Held`
//! for `Live`): a turn with its caller's channel, a load or an unload with
//! the answer its caller waits on. The intake orders and counts them; the
//! engine's handlers use what they carry.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::intake::Held;
use super::outbox::Outbox;
use crate::catalog::ModelEntry;
use crate::error::WardenError;
use crate::law::keep_alive::KeepAlive;
use crate::messages::{Reset, TurnRequest};
use crate::queue::QueueTicket;
use crate::status::EngineStatus;

/// The engine's own: what its handlers put in the intake.
#[derive(Debug)]
pub struct Live;

impl Held for Live {
    /// Boxed: a turn is most of what waits, and the control items beside
    /// it are a tenth of its size.
    type Turn = Box<Waiting>;
    type Reset = Reset;
    type Load = LoadAsk;
    type Unload = oneshot::Sender<Result<bool, WardenError>>;
}

/// A turn not yet admitted.
#[derive(Debug)]
pub struct Waiting {
    /// The request, whole.
    pub request: TurnRequest,
    /// Its model, resolved by `Warden::submit`.
    pub entry: Arc<ModelEntry>,
    /// Its caller's channel.
    pub out: Outbox,
    /// Its arrival number.
    pub seq: u64,
    /// When it arrived (a wait for another model's memory counts from it).
    pub arrived: tokio::time::Instant,
    /// Its place in the queue's bound.
    pub ticket: Option<QueueTicket>,
    /// `TurnStarted` was said (a turn sent back to wait after its start
    /// sample says it once).
    pub started: bool,
    /// A turn whose child died under it: what it carries to the next
    /// (`resume`); `None` for a new turn.
    pub carry: Option<Box<super::carry::Carry>>,
    /// What the engine reads of its body, read once (`Read::of`).
    pub read: Read,
}

/// What the engine reads of a turn's prompt: read once, when the turn
/// reaches the engine, and again only when a continuation after its child
/// died makes a new body, so the body is never serialized twice for the
/// same facts (each admission's seat asks for them, at every wake of a
/// waiting turn). Its bound is the body's own (`TurnBody::bound`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Read {
    /// What its prompt begins with, as text: its messages (chat) or its
    /// prompt (a raw completion or infill). Two requests whose texts begin
    /// alike begin alike in tokens too (the same template renders the same
    /// messages the same way).
    pub text: Option<String>,
    /// About how many tokens its prompt is (`slots::estimate_tokens` over
    /// the body's JSON); the child's own count replaces it at the turn's end.
    pub prompt: u32,
}

impl Read {
    /// What the engine reads of `body`.
    pub fn of(body: &crate::messages::body::TurnBody) -> Self {
        use serde_json::Value;
        let text = match (body.get("messages"), body.get("prompt")) {
            (Some(m), _) => serde_json::to_string(m).ok(),
            (None, Some(Value::String(p))) => Some(p.clone()),
            (None, Some(p)) => serde_json::to_string(p).ok(),
            (None, None) => None,
        };
        let json = serde_json::to_string(body.fields()).expect("a JSON map serializes");
        Self {
            text,
            prompt: crate::law::slots::estimate_tokens(&json),
        }
    }
}

/// `Load`, waiting to be carried out and answered.
#[derive(Debug)]
pub struct LoadAsk {
    /// The model (`None`: the default).
    pub model: Option<String>,
    /// The keep-alive to set.
    pub keep_alive: Option<KeepAlive>,
    /// When it arrived.
    pub arrived: tokio::time::Instant,
    /// Where the answer goes.
    pub reply: oneshot::Sender<Result<EngineStatus, WardenError>>,
}

#[cfg(test)]
mod tests {
    use super::Read;
    use serde_json::json;

    /// What the engine reads of each kind of body, once.
    #[test]
    fn a_body_is_read_for_its_bound_its_text_and_its_size() {
        let rows = [
            (
                json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40, "n_predict": 30}),
                Some(30),
                Some(r#"[{"content":"hi","role":"user"}]"#.to_string()),
            ),
            (json!({"prompt": "Once upon", "max_tokens": 8}), Some(8), Some("Once upon".to_string())),
            (json!({"prompt": [1, 2, 3]}), None, Some("[1,2,3]".to_string())),
            (json!({"input": "no prompt here"}), None, None),
        ];
        for (body, bound, text) in rows {
            let map = body.as_object().unwrap();
            let turn_body = crate::messages::body::TurnBody::new(map.clone());
            let read = Read::of(&turn_body);
            assert_eq!((turn_body.bound(), read.text.clone()), (bound, text), "{body}");
            let json = serde_json::to_string(map).unwrap();
            assert_eq!(read.prompt, crate::law::slots::estimate_tokens(&json), "{body}");
            assert!(read.prompt > 0, "{body}");
        }
    }
}
