//! Field checks the natively relayed dialects share (Anthropic's Messages,
//! OpenAI's Responses) for their own fields, the ones `law::request`'s
//! table (every generating route's sampling fields) does not know: each
//! field's JSON shape and range, refused with the one violation type
//! (`law::request::Violation`, a 400 naming the field in OpenAI's error
//! vocabulary, which each dialect's wire reshapes). Counts are
//! integers in `0..2^31`, llama.cpp's `int32` fields: anything larger would
//! wrap in the child.

use serde_json::{Map, Value};

use crate::law::request::Violation;

/// The JSON shape a field must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Text,
    /// An integer in `0..2^31`.
    Count,
    /// An object.
    Object,
    /// An array of anything.
    Array,
    /// An array of strings.
    Texts,
}

impl Kind {
    fn holds(self, v: &Value) -> bool {
        match self {
            Self::Text => v.is_string(),
            Self::Count => v.as_u64().is_some_and(|n| n < 1 << 31),
            Self::Object => v.is_object(),
            Self::Array => v.is_array(),
            Self::Texts => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        }
    }

    fn says(self) -> &'static str {
        match self {
            Self::Text => "a string",
            Self::Count => "a non-negative integer below 2^31",
            Self::Object => "an object",
            Self::Array => "an array",
            Self::Texts => "an array of strings",
        }
    }
}

/// `param` (a field of `obj`, named `param` in the error) is absent, null,
/// or of `kind`.
pub fn optional(obj: &Map<String, Value>, key: &str, kind: Kind, param: &str) -> Result<(), Violation> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(v) => of_kind(v, kind, param),
    }
}

/// `param` is present and of `kind`.
pub fn required(obj: &Map<String, Value>, key: &str, kind: Kind, param: &str) -> Result<(), Violation> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(Violation::required(param)),
        Some(v) => of_kind(v, kind, param),
    }
}

/// `param` is present and a string: the string.
pub fn required_text<'a>(obj: &'a Map<String, Value>, key: &str, param: &str) -> Result<&'a str, Violation> {
    required(obj, key, Kind::Text, param)?;
    Ok(obj.get(key).and_then(Value::as_str).unwrap_or_default())
}

/// `param` is present and an array: its items.
pub fn required_array<'a>(obj: &'a Map<String, Value>, key: &str, param: &str) -> Result<&'a [Value], Violation> {
    required(obj, key, Kind::Array, param)?;
    Ok(obj.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice))
}

/// `param` is present and an object: the object.
pub fn required_object<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    param: &str,
) -> Result<&'a Map<String, Value>, Violation> {
    required(obj, key, Kind::Object, param)?;
    obj.get(key)
        .and_then(Value::as_object)
        .ok_or_else(|| Violation::ty(param, Kind::Object.says()))
}

/// `v` (the value of `param`) is of `kind`.
pub fn of_kind(v: &Value, kind: Kind, param: &str) -> Result<(), Violation> {
    if kind.holds(v) {
        return Ok(());
    }
    // An integer out of range is a bad value; a fraction or a string is not
    // a count at all (as `law::request` says it for every route).
    let code = if kind == Kind::Count && (v.is_i64() || v.is_u64()) {
        "invalid_value"
    } else {
        "invalid_type"
    };
    Err(Violation {
        param: param.to_string(),
        code,
        message: format!("'{param}' must be {}", kind.says()),
    })
}

/// Each of `keys` of `obj` is absent, null or of its kind.
pub fn all_optional(obj: &Map<String, Value>, keys: &[(&str, Kind)]) -> Result<(), Violation> {
    keys.iter().try_for_each(|(k, kind)| optional(obj, k, *kind, k))
}

/// A 400 for a value the dialect defines but this server cannot honour.
pub fn unsupported(param: &str, message: impl Into<String>) -> Violation {
    Violation {
        param: param.to_string(),
        code: "unsupported_value",
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn kinds_and_ranges() {
        // (value, kind, accepted)
        let rows = [
            (json!(5), Kind::Count, true),
            // why: 2^31 wraps a llama.cpp int32
            (json!(2147483648u64), Kind::Count, false),
            (json!(2147483647u64), Kind::Count, true),
            // why: negative and fractional counts are refused, never wrapped or truncated
            (json!(-1), Kind::Count, false),
            (json!(1.5), Kind::Count, false),
            (json!("5"), Kind::Count, false),
            (json!(["a", "b"]), Kind::Texts, true),
            (json!(["a", 1]), Kind::Texts, false),
            (json!({}), Kind::Object, true),
            (json!([]), Kind::Object, false),
        ];
        for (i, (v, kind, ok)) in rows.into_iter().enumerate() {
            let obj = json!({ "f": v });
            let got = optional(obj.as_object().unwrap(), "f", kind, "f");
            assert_eq!(got.is_ok(), ok, "row {i}: {got:?}");
            if let Err(e) = got {
                assert_eq!(e.param, "f", "row {i}");
            }
        }
        let empty = json!({"f": null});
        // why: null is absent for an optional field, missing for a required one
        assert!(optional(empty.as_object().unwrap(), "f", Kind::Text, "f").is_ok());
        let e = required(empty.as_object().unwrap(), "f", Kind::Text, "f").unwrap_err();
        assert_eq!(e.code, "missing_required_parameter");
    }
}
