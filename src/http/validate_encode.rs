//! Request validation for the routes an embedding model serves:
//! `/v1/embeddings` (OpenAI's shape) and `/v1/rerank` (llama.cpp's, as
//! Jina's and Cohere's clients send it). What llama-server b10883 would
//! throw on inside its handler (a field of the wrong type reaches a JSON
//! conversion, a 500) or answer only after a load is refused here with a
//! 400 naming the field; unknown fields pass (`dimensions`, `user`).
//!
//! `input` takes every shape OpenAI's takes: a string, an array of strings,
//! an array of token ids, or an array of such arrays (what
//! `tokenize_input_prompts` of b10883 reads). Empty inputs are refused
//! (the child would refuse each after tokenizing; OpenAI refuses them too).

use serde_json::{Map, Value};

use super::validate::invalid;
use crate::error::ApiError;

/// `/v1/embeddings`'s body.
pub fn embeddings(body: &Map<String, Value>) -> Result<(), ApiError> {
    let input = match body.get("input") {
        None | Some(Value::Null) => {
            return Err(invalid("missing_required_parameter", "'input' is required", "input"));
        }
        Some(v) => v,
    };
    input_shape(input)?;
    match body.get("encoding_format") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if s == "float" || s == "base64" => Ok(()),
        Some(_) => Err(invalid(
            "invalid_value",
            "'encoding_format' must be \"float\" or \"base64\"",
            "encoding_format",
        )),
    }
}

/// `/v1/rerank`'s body: a `query` and its `documents` (strings).
pub fn rerank(body: &Map<String, Value>) -> Result<(), ApiError> {
    match body.get("query") {
        Some(Value::String(s)) if !s.is_empty() => {}
        None | Some(Value::Null) => {
            return Err(invalid("missing_required_parameter", "'query' is required", "query"));
        }
        Some(_) => return Err(invalid("invalid_type", "'query' must be a non-empty string", "query")),
    }
    let docs = match body.get("documents") {
        Some(Value::Array(d)) if !d.is_empty() => d,
        None | Some(Value::Null) => {
            return Err(invalid(
                "missing_required_parameter",
                "'documents' is required",
                "documents",
            ));
        }
        Some(_) => {
            return Err(invalid(
                "invalid_type",
                "'documents' must be a non-empty array of strings",
                "documents",
            ));
        }
    };
    for (i, d) in docs.iter().enumerate() {
        if !d.is_string() {
            let param = format!("documents[{i}]");
            return Err(invalid("invalid_type", format!("{param} must be a string"), &param));
        }
    }
    match body.get("top_n") {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v.as_u64().is_some() => Ok(()),
        Some(_) => Err(invalid(
            "invalid_type",
            "'top_n' must be a non-negative integer",
            "top_n",
        )),
    }
}

/// One of `input`'s four shapes, nothing empty.
fn input_shape(input: &Value) -> Result<(), ApiError> {
    let wrong = |param: &str, what: &str| Err(invalid("invalid_type", format!("{param} must be {what}"), param));
    match input {
        Value::String(s) if s.is_empty() => Err(invalid("invalid_value", "'input' must not be empty", "input")),
        Value::String(_) => Ok(()),
        Value::Array(items) if items.is_empty() => {
            Err(invalid("invalid_value", "'input' must not be an empty array", "input"))
        }
        Value::Array(items) => {
            // The first item decides the shape; every other must follow it.
            let shape = Shape::of(&items[0]);
            for (i, item) in items.iter().enumerate() {
                let param = format!("input[{i}]");
                match (shape, item) {
                    (Some(Shape::Text), Value::String(s)) if !s.is_empty() => {}
                    (Some(Shape::Text), Value::String(_)) => {
                        return Err(invalid("invalid_value", format!("{param} must not be empty"), &param));
                    }
                    (Some(Shape::Id), v) if token_id(v) => {}
                    (Some(Shape::Ids), Value::Array(ids)) if !ids.is_empty() && ids.iter().all(token_id) => {}
                    (Some(Shape::Text), _) => return wrong(&param, "a string, as input[0] is"),
                    (Some(Shape::Id), _) => return wrong(&param, "a token id, as input[0] is"),
                    (Some(Shape::Ids), _) => return wrong(&param, "a non-empty array of token ids"),
                    (None, _) => return wrong(&param, "a string, a token id or an array of token ids"),
                }
            }
            Ok(())
        }
        _ => wrong(
            "input",
            "a string, an array of strings, an array of token ids or an array of arrays of token ids",
        ),
    }
}

/// The shape of an array's items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Text,
    Id,
    Ids,
}

impl Shape {
    fn of(v: &Value) -> Option<Self> {
        match v {
            Value::String(_) => Some(Self::Text),
            Value::Number(_) => Some(Self::Id),
            Value::Array(_) => Some(Self::Ids),
            _ => None,
        }
    }
}

fn token_id(v: &Value) -> bool {
    crate::law::request::is_token_id(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(s: &str) -> Map<String, Value> {
        serde_json::from_str(s).unwrap()
    }

    /// Every shape OpenAI's `input` takes passes; anything else is a 400
    /// naming the first field at fault.
    #[rustfmt::skip]
    #[test]
    fn embeddings_bodies() {
        let rows: &[(&str, Option<&str>)] = &[
            // why: OpenAI's four shapes
            (r#"{"input": "a cat"}"#, None),
            (r#"{"input": ["a cat", "a dog"]}"#, None),
            (r#"{"input": [101, 2000, 102]}"#, None),
            (r#"{"input": [[101, 102], [101, 2000, 102]]}"#, None),
            // why: unknown fields pass, the two formats the child has pass
            (r#"{"input": "a", "dimensions": 3, "encoding_format": "base64"}"#, None),
            (r#"{"input": "a", "encoding_format": "float"}"#, None),
            // why: the child would throw in its JSON conversion, or refuse after a load
            (r#"{}"#, Some("input")),
            (r#"{"input": null}"#, Some("input")),
            (r#"{"input": 5.5}"#, Some("input")),
            (r#"{"input": {"text": "a"}}"#, Some("input")),
            (r#"{"input": ""}"#, Some("input")),
            (r#"{"input": []}"#, Some("input")),
            (r#"{"input": ["a", ""]}"#, Some("input[1]")),
            (r#"{"input": ["a", 5]}"#, Some("input[1]")),
            (r#"{"input": [5, "a"]}"#, Some("input[1]")),
            (r#"{"input": [-1]}"#, Some("input[0]")),
            (r#"{"input": [3000000000]}"#, Some("input[0]")),
            (r#"{"input": [[1], []]}"#, Some("input[1]")),
            (r#"{"input": [[1], [1.5]]}"#, Some("input[1]")),
            (r#"{"input": [true]}"#, Some("input[0]")),
            (r#"{"input": "a", "encoding_format": "int8"}"#, Some("encoding_format")),
        ];
        for (i, (body, param)) in rows.iter().enumerate() {
            let got = embeddings(&obj(body)).err().and_then(|e| e.param);
            assert_eq!(got.as_deref(), *param, "row {i}: {body}");
        }
    }

    /// A rerank needs its query and documents as strings.
    #[rustfmt::skip]
    #[test]
    fn rerank_bodies() {
        let rows: &[(&str, Option<&str>)] = &[
            (r#"{"query": "q", "documents": ["a", "b"]}"#, None),
            (r#"{"query": "q", "documents": ["a"], "top_n": 1}"#, None),
            (r#"{"documents": ["a"]}"#, Some("query")),
            (r#"{"query": "", "documents": ["a"]}"#, Some("query")),
            (r#"{"query": "q"}"#, Some("documents")),
            (r#"{"query": "q", "documents": []}"#, Some("documents")),
            (r#"{"query": "q", "documents": ["a", 1]}"#, Some("documents[1]")),
            (r#"{"query": "q", "documents": ["a"], "top_n": -1}"#, Some("top_n")),
        ];
        for (i, (body, param)) in rows.iter().enumerate() {
            let got = rerank(&obj(body)).err().and_then(|e| e.param);
            assert_eq!(got.as_deref(), *param, "row {i}: {body}");
        }
    }
}
