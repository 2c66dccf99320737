//! A turn's body as the engine receives it (`TurnBody`): what the warden
//! reads of it typed, read once when the turn is built, and every field as
//! the client sent it, relayed to the child untouched.
//!
//! The engine never writes the client's fields. What it adds for its child
//! (the bound the turn runs under, `stream`, the slot it seated the turn
//! in, each engine's own names: `Wire`) is written into the bytes it sends,
//! in one pass over the fields (`TurnBody::to_child`), so a turn that dies
//! and goes on on the next child is sent from the body its client sent. The
//! one rewrite is a continuation's (`TurnBody::continued`): a new body whose
//! `messages` end with what the client already has.

use bytes::Bytes;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::law::request::{TOKEN_FIELDS, requested_bound};
use crate::law::splice::{self, Dialect};

/// A turn's body: its fields as sent, and the token bound they ask for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnBody {
    /// Every field as the client sent it (less what its face took out:
    /// `model`, a keep-alive).
    fields: Map<String, Value>,
    /// The bound asked for: the least of the bounding fields
    /// (`law::request::TOKEN_FIELDS`; the child reads one, the warden
    /// folds them), or one the engine set since (a resumed turn's, less
    /// what its client already has).
    bound: Option<u32>,
}

impl From<Map<String, Value>> for TurnBody {
    fn from(fields: Map<String, Value>) -> Self {
        Self::new(fields)
    }
}

impl TurnBody {
    /// The body of `fields`, its bound read once.
    pub fn new(fields: Map<String, Value>) -> Self {
        let bound = requested_bound(&fields);
        Self { fields, bound }
    }

    /// The token bound asked for (`None`: the window's).
    pub fn bound(&self) -> Option<u32> {
        self.bound
    }

    /// A field as sent.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.fields.get(field)
    }

    /// Every field as sent.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }

    /// Sets `field` as a client would have sent it (a bounding field reads
    /// the bound again); the value it replaced.
    pub fn insert(&mut self, field: String, value: Value) -> Option<Value> {
        let bounds = TOKEN_FIELDS.contains(&field.as_str());
        let old = self.fields.insert(field, value);
        if bounds {
            self.bound = requested_bound(&self.fields);
        }
        old
    }

    /// Takes `field` out, as if the client had not sent it.
    pub fn remove(&mut self, field: &str) -> Option<Value> {
        let old = self.fields.remove(field);
        if TOKEN_FIELDS.contains(&field) {
            self.bound = requested_bound(&self.fields);
        }
        old
    }

    /// Changes the fields as a client would have sent them (a model's
    /// settings filling what a request left out), the bound read again.
    pub fn edit(&mut self, f: impl FnOnce(&mut Map<String, Value>)) {
        f(&mut self.fields);
        self.bound = requested_bound(&self.fields);
    }

    /// The engine's own bound for the turn from now on (a continued turn's:
    /// what is left of the client's, less what it already has), which its
    /// next seat reads. The client's fields stay as sent: `to_child` writes
    /// the seat's bound over them.
    pub(crate) fn bound_to(&mut self, n: u32) {
        self.bound = Some(n);
    }

    /// The body that goes on from `text`, the answer its client already
    /// has (`law::splice::continuation`): its `messages` end with it. With
    /// what the child must not say again, when the dialect echoes it.
    pub(crate) fn continued(&self, d: Dialect, text: &str) -> Result<(Self, Option<String>), &'static str> {
        let mut fields = self.fields.clone();
        let echo = splice::continuation(d, &mut fields, text)?;
        Ok((
            Self {
                fields,
                bound: self.bound,
            },
            echo,
        ))
    }

    /// The bytes the child gets: the fields as sent, and, for a generation
    /// (`turn`), the engine's own written over theirs.
    pub(crate) fn to_child(&self, turn: Option<ChildTurn<'_>>) -> Bytes {
        let out = serde_json::to_vec(&Written { body: self, turn }).expect("a JSON body serializes");
        Bytes::from(out)
    }
}

/// How an engine's child reads a generation's body: where the bound goes,
/// which names differ from the client's, what it must be told beyond the
/// warden's own fields (`EngineHooks::wire`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wire {
    /// The field the child reads the bound from.
    pub bound_field: &'static str,
    /// A client's field the child knows by another name: `(client's,
    /// child's)`. Sent under the child's name, unless the client sent that
    /// one too (then it wins, and the other is left out).
    pub renames: &'static [(&'static str, &'static str)],
    /// The `model` the child must be named (mlx-vlm loads by path).
    pub model: Option<String>,
}

/// What the engine writes over a generation's fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildTurn<'a> {
    /// The child's names.
    pub wire: &'a Wire,
    /// The bound it runs under.
    pub bound: u32,
    /// Whether it streams.
    pub stream: bool,
    /// The slot the warden seated it in (`None`: a child of one slot, or
    /// the child's own choice).
    pub slot: Option<usize>,
}

/// A body being written for the child.
struct Written<'a> {
    body: &'a TurnBody,
    turn: Option<ChildTurn<'a>>,
}

impl ChildTurn<'_> {
    /// Whether the client's `field` is written over (or left out) here.
    fn covers(&self, field: &str, fields: &Map<String, Value>) -> bool {
        TOKEN_FIELDS.contains(&field)
            || field == "stream"
            || (field == "id_slot" && self.slot.is_some())
            || (field == "model" && self.wire.model.is_some())
            || self.wire.renames.iter().any(|(from, to)| *from == field && fields.contains_key(*to))
    }

    /// The name the child knows the client's `field` by.
    fn name<'f>(&self, field: &'f str) -> &'f str {
        self.wire
            .renames
            .iter()
            .find(|(from, _)| *from == field)
            .map_or(field, |(_, to)| to)
    }
}

impl Serialize for Written<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields = &self.body.fields;
        let mut map = s.serialize_map(None)?;
        for (k, v) in fields {
            match &self.turn {
                None => map.serialize_entry(k, v)?,
                Some(t) if t.covers(k, fields) => {}
                Some(t) => map.serialize_entry(t.name(k), v)?,
            }
        }
        if let Some(t) = &self.turn {
            map.serialize_entry(t.wire.bound_field, &t.bound)?;
            map.serialize_entry("stream", &t.stream)?;
            if let Some(slot) = t.slot {
                map.serialize_entry("id_slot", &slot)?;
            }
            if let Some(model) = &t.wire.model {
                map.serialize_entry("model", model)?;
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(v: Value) -> TurnBody {
        TurnBody::new(v.as_object().unwrap().clone())
    }

    const LLAMA: Wire = Wire {
        bound_field: "n_predict",
        renames: &[("repetition_penalty", "repeat_penalty")],
        model: None,
    };

    fn written(b: &TurnBody, turn: Option<ChildTurn<'_>>) -> Value {
        serde_json::from_slice(&b.to_child(turn)).unwrap()
    }

    #[test]
    fn the_bound_is_read_once_and_set_by_a_client_field_again() {
        let mut b = body(json!({"max_tokens": 40, "n_predict": 30, "top_p": 0.9}));
        // why: the child reads one bounding field; the least one asked wins
        assert_eq!(b.bound(), Some(30));
        b.insert("max_completion_tokens".into(), json!(7));
        assert_eq!(b.bound(), Some(7));
        b.remove("max_completion_tokens");
        assert_eq!(b.bound(), Some(30));
        b.insert("temperature".into(), json!(0));
        assert_eq!(b.bound(), Some(30));
        // why: the engine's own bound leaves the client's fields as sent
        b.bound_to(12);
        assert_eq!((b.bound(), b.get("max_tokens")), (Some(12), Some(&json!(40))));
    }

    #[test]
    fn a_generation_is_written_with_the_engines_fields_over_the_clients() {
        let b = body(json!({
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 40, "n_predict": 30, "stream": true, "id_slot": 3,
            "repetition_penalty": 1.1, "x_ext": {"a": 1}
        }));
        let rows = [
            // why: one bound, in the child's field; the turn's own stream
            // and seat; the HF name in llama.cpp's; extensions untouched
            (
                ChildTurn {
                    wire: &LLAMA,
                    bound: 30,
                    stream: false,
                    slot: Some(1),
                },
                json!({"messages": [{"role": "user", "content": "hi"}], "n_predict": 30, "stream": false,
                       "id_slot": 1, "repeat_penalty": 1.1, "x_ext": {"a": 1}}),
            ),
            // why: a child of one slot: the client's own id_slot passes
            (
                ChildTurn {
                    wire: &LLAMA,
                    bound: 30,
                    stream: true,
                    slot: None,
                },
                json!({"messages": [{"role": "user", "content": "hi"}], "n_predict": 30, "stream": true,
                       "id_slot": 3, "repeat_penalty": 1.1, "x_ext": {"a": 1}}),
            ),
            // why: mlx-vlm reads max_tokens and loads by path
            (
                ChildTurn {
                    wire: &Wire {
                        bound_field: "max_tokens",
                        renames: &[],
                        model: Some("/m/SmolLM2".into()),
                    },
                    bound: 30,
                    stream: true,
                    slot: None,
                },
                json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 30, "stream": true,
                       "id_slot": 3, "repetition_penalty": 1.1, "x_ext": {"a": 1}, "model": "/m/SmolLM2"}),
            ),
        ];
        for (turn, want) in rows {
            assert_eq!(written(&b, Some(turn)), want);
        }
        // why: a body passed through (an embedding) is sent as it came
        assert_eq!(written(&b, None), Value::Object(b.fields().clone()));
    }

    #[test]
    fn a_clients_own_name_wins_over_a_rename() {
        let b = body(json!({"repetition_penalty": 1.1, "repeat_penalty": 1.3}));
        let turn = ChildTurn {
            wire: &LLAMA,
            bound: 5,
            stream: false,
            slot: None,
        };
        assert_eq!(
            written(&b, Some(turn)),
            json!({"repeat_penalty": 1.3, "n_predict": 5, "stream": false})
        );
    }

    #[test]
    fn a_continuation_is_a_new_body_and_the_old_one_stays() {
        let b = body(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9}));
        let (c, _) = b.continued(Dialect::Chat, "Hel").unwrap();
        assert_eq!(b.get("messages").unwrap().as_array().unwrap().len(), 1);
        assert_eq!(
            c.get("messages").unwrap()[1],
            json!({"role": "assistant", "content": "Hel"})
        );
        assert_eq!(c.bound(), Some(9));
    }
}
