//! The one reading of a dialect's body into its typed request: serde types
//! (`#[derive(Deserialize)]`, borrowing from the parsed body), read once by
//! `decode`, whose error (serde's, with the path `serde_path_to_error`
//! tracks) becomes the one violation type every dialect answers with
//! (`law::request::Violation`, a 400 naming the field).
//!
//! What serde says maps to a code by one table (`code_of`), each row with
//! its reason. The marker types here check a field's JSON shape without
//! copying what the warden does not read (`Text`, `Object`, `Array`,
//! `Count`), and `StrOr` reads the "a string or an array of X" shape every
//! dialect's content has, keeping the path into the array (serde's
//! untagged enums would say only "did not match any variant"), as
//! `StrOrMap` reads "a name or an object".
//!
//! Every type reads `null` as absent through `Option` (as llama-server
//! does); a required field is an `Option` whose `None` the dialect's rules
//! turn into `missing_required_parameter`, so absent and null read alike.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::law::request::Violation;

/// The typed request `T` read from `body`, or the violation that names
/// the field where it is not what `T` says.
pub fn decode<'a, T: Deserialize<'a>>(body: &'a serde_json::Map<String, serde_json::Value>) -> Result<T, Violation> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let path = param_of(e.path());
        violation(&path, &e.into_inner().to_string())
    })
}

/// serde's path as the error's `param`: `messages[0].content[2].text`
/// (its own rendering, without the `.` it gives the root).
fn param_of(path: &serde_path_to_error::Path) -> String {
    let p = path.to_string();
    if p == "." { String::new() } else { p }
}

/// The code serde's message stands for, at `param` (the table).
fn code_of(param: &str, said: &str) -> &'static str {
    // A `type` tag names a kind of item; one outside the set is a kind the
    // dialect defines (or not) that this server does not read, which the
    // client can act on by leaving it out. Any other name outside its set
    // (a role) is a bad value.
    let last = param.rsplit(['.', '[']).next().unwrap_or(param);
    match said {
        s if s.starts_with("unknown variant") && last == "type" => "unsupported_value",
        s if s.starts_with("unknown variant") => "invalid_value",
        // An integer out of its range, a length off its bound.
        s if s.starts_with("invalid value") || s.starts_with("invalid length") => "invalid_value",
        s if s.starts_with("missing field") => "missing_required_parameter",
        // A wrong JSON type, and anything else serde says (a custom error
        // is a shape the type refused).
        _ => "invalid_type",
    }
}

/// serde's message at `param` as the violation a client reads.
fn violation(param: &str, said: &str) -> Violation {
    let code = code_of(param, said);
    if code == "missing_required_parameter" {
        // serde names the missing field at its parent's path.
        let field = said.split('`').nth(1).unwrap_or_default();
        let param = if param.is_empty() {
            field.to_string()
        } else {
            format!("{param}.{field}")
        };
        return Violation::new(code, format!("'{param}' is required"), param);
    }
    let expected = said.split_once("expected ").map(|(_, e)| plain(e));
    let got = said.split('`').nth(1).unwrap_or_default();
    let message = match (code, expected) {
        ("unsupported_value", Some(e)) => {
            format!("'{param}' is '{got}', which this server does not read (it reads {e})")
        }
        (_, Some(e)) if said.starts_with("unknown variant") => format!("'{param}' must be {e} (got '{got}')"),
        (_, Some(e)) => format!("'{param}' must be {e}"),
        (_, None) => format!("'{param}': {said}"),
    };
    Violation::new(code, message, param)
}

/// serde's name of an expected shape in a client's words: a derived
/// struct is "an object", a sequence "an array", a unit enum's name "a
/// string".
fn plain(expected: &str) -> String {
    let e = expected.replace('`', "");
    match e.as_str() {
        s if s.starts_with("struct ") || s == "a map" => "an object".into(),
        "a sequence" => "an array".into(),
        "variant identifier" | "a borrowed string" => "a string".into(),
        _ => e,
    }
}

/// A string the warden checks but does not read (not copied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Text;

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Text, E> {
                Ok(Text)
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON object whose entries are the child's to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Object;

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Object;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Object, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Object)
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON array whose items are the child's to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Array;

impl<'de> Deserialize<'de> for Array {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Array;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Array, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Array)
            }
        }
        d.deserialize_seq(V)
    }
}

/// A count llama.cpp reads as `int32`: an integer in `0..2^31` (anything
/// larger would wrap in the child; a fraction is not a count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count(pub u32);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-negative integer below 2^31")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Count, E> {
                match u32::try_from(n) {
                    Ok(n) if n < 1 << 31 => Ok(Count(n)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(n), &self)),
                }
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Count, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(n), &self)),
                }
            }
        }
        d.deserialize_u64(V)
    }
}

/// A string, or an array of `T` (content, `system`, a tool result):
/// errors inside the array keep their index in the path.
#[derive(Debug, Clone, PartialEq)]
pub enum StrOr<T> {
    /// The string form.
    Str,
    /// The items.
    Items(Vec<T>),
}

impl<T> StrOr<T> {
    /// The items (none for the string form).
    pub fn items(&self) -> &[T] {
        match self {
            Self::Str => &[],
            Self::Items(v) => v,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for StrOr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = StrOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<StrOr<T>, E> {
                Ok(StrOr::Str)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<StrOr<T>, A::Error> {
                let mut items = Vec::with_capacity(s.size_hint().unwrap_or(0));
                while let Some(item) = s.next_element()? {
                    items.push(item);
                }
                Ok(StrOr::Items(items))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A string read as `S` (a set of names: its unknown one is named), or an
/// object read as `O` (a choice of a function, a tool call's arguments);
/// errors inside the object keep their path.
#[derive(Debug, Clone, PartialEq)]
pub enum StrOrMap<S, O> {
    /// The string form.
    Str(S),
    /// The object form.
    Map(O),
}

impl<'de, S: Deserialize<'de>, O: Deserialize<'de>> Deserialize<'de> for StrOrMap<S, O> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<S, O>(PhantomData<(S, O)>);
        impl<'de, S: Deserialize<'de>, O: Deserialize<'de>> Visitor<'de> for V<S, O> {
            type Value = StrOrMap<S, O>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an object")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                S::deserialize(de::value::BorrowedStrDeserializer::<E>::new(s)).map(StrOrMap::Str)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                S::deserialize(de::value::StrDeserializer::<E>::new(s)).map(StrOrMap::Str)
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
                O::deserialize(de::value::MapAccessDeserializer::new(m)).map(StrOrMap::Map)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `field` is present (`Some`), else the violation that says `param` is
/// required: the rules' check of what a type requires.
pub fn need<T>(field: &Option<T>, param: impl FnOnce() -> String) -> Result<(), Violation> {
    match field {
        Some(_) => Ok(()),
        None => Err(Violation::required(param())),
    }
}

/// For `#[serde(default, deserialize_with = "typed::present")]`: a field
/// where absent (`None`) and `null` (`Some(None)`) differ (an assistant
/// message's content may be null beside tool calls; absent it must name
/// them).
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::*;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)] // read by the decoder; the rows check its errors
    struct Sample {
        role: Role,
        text: Option<Text>,
        max: Option<Count>,
        meta: Option<Object>,
        content: Option<StrOr<Part>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Role {
        User,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[allow(dead_code)]
    struct Part {
        #[serde(rename = "type")]
        kind: Kind,
        text: Option<Text>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Text,
    }

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn serde_errors_become_the_violation_naming_the_field() {
        // (body, code, param)
        let rows = [
            (json!({}), "missing_required_parameter", "role"),
            // why: a role outside its set is a bad value
            (json!({"role": "wizard"}), "invalid_value", "role"),
            (json!({"role": 5}), "invalid_type", "role"),
            (json!({"role": "user", "text": 1}), "invalid_type", "text"),
            // why: 2^31 wraps a llama.cpp int32, a negative is not a count
            (json!({"role": "user", "max": 2147483648u64}), "invalid_value", "max"),
            (json!({"role": "user", "max": -1}), "invalid_value", "max"),
            (json!({"role": "user", "max": 1.5}), "invalid_type", "max"),
            (json!({"role": "user", "meta": []}), "invalid_type", "meta"),
            (json!({"role": "user", "content": 5}), "invalid_type", "content"),
            // why: the path reaches into the array, past the string-or-array shape
            (
                json!({"role": "user", "content": [{"type": "text", "text": 1}]}),
                "invalid_type",
                "content[0].text",
            ),
            (
                json!({"role": "user", "content": [{"text": "x"}]}),
                "missing_required_parameter",
                "content[0].type",
            ),
            // why: a `type` outside its set is a kind this server does not read
            (
                json!({"role": "user", "content": [{"type": "document"}]}),
                "unsupported_value",
                "content[0].type",
            ),
        ];
        for (i, (v, code, param)) in rows.into_iter().enumerate() {
            let b = body(v);
            let e = decode::<Sample>(&b).expect_err(&format!("row {i}"));
            assert_eq!((e.code, e.param.as_str()), (code, param), "row {i}: {}", e.message);
            assert!(e.message.contains(param), "row {i}: {}", e.message);
        }
    }

    #[test]
    fn good_bodies_read_null_as_absent() {
        let b = body(json!({"role": "user", "text": null, "max": 7, "meta": {"a": 1}, "content": "hi", "other": [1]}));
        let s = decode::<Sample>(&b).unwrap();
        assert_eq!((s.text, s.max, s.meta), (None, Some(Count(7)), Some(Object)));
        assert_eq!(s.content, Some(StrOr::Str));
        // why: 2^31 - 1 is the largest int32 the child reads
        let b = body(json!({"role": "user", "max": 2147483647u64}));
        assert_eq!(decode::<Sample>(&b).unwrap().max, Some(Count(2147483647)));
        let b = body(json!({"role": "user", "content": [{"type": "text", "text": "a"}]}));
        assert_eq!(decode::<Sample>(&b).unwrap().content.unwrap().items().len(), 1);
    }

    #[test]
    fn messages_say_what_was_expected() {
        let b = body(json!({"role": "user", "max": "9"}));
        let e = decode::<Sample>(&b).unwrap_err();
        assert_eq!(e.message, "'max' must be a non-negative integer below 2^31");
        let b = body(json!({"role": "user", "content": [{"type": "document"}]}));
        let e = decode::<Sample>(&b).unwrap_err();
        assert_eq!(
            e.message,
            "'content[0].type' is 'document', which this server does not read (it reads text)"
        );
    }
}
