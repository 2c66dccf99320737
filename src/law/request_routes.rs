//! What the body of each route beside chat must hold, as rule rows: raw
//! completions, infill, the tokenizer pair, embeddings and rerank (chat's
//! fields are `request`'s table and `request_chat`'s shapes; the sampling
//! fields every generating route shares are `request`'s too). Each row
//! names its route, its field, whether the field is required, what it must
//! hold and why. Pure: a body in, the first `Violation` in row order out.
//!
//! Null counts as absent, as in the child. Unknown fields pass (`user`,
//! `dimensions`): the child ignores what it does not read.

use serde_json::{Map, Value};

use super::request::{Violation, is_token_id};
use super::route::Route;

/// What a field must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// A string.
    Str,
    /// A string with something in it.
    NonEmptyStr,
    /// One string; an array (several prompts) is `unsupported_value`.
    OnePrompt,
    /// `true` or `false`.
    Bool,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A non-negative integer.
    Count,
    /// An array of `{"text": string, "filename"?: string}` chunks.
    Chunks,
    /// An array of token ids (`is_token_id`).
    TokenIds,
    /// Embeddings' `input`: a string, an array of strings, an array of token
    /// ids, or an array of such arrays; nothing empty.
    EmbedInput,
    /// A non-empty array of strings.
    Strings,
}

/// One field's rule on one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyRule {
    /// The route.
    pub route: Route,
    /// The top-level field.
    pub field: &'static str,
    /// Absent (or null) is `missing_required_parameter`.
    pub required: bool,
    /// What it must hold.
    pub holds: Holds,
    /// Why.
    pub why: &'static str,
}

const fn row(route: Route, field: &'static str, required: bool, holds: Holds, why: &'static str) -> BodyRule {
    BodyRule {
        route,
        field,
        required,
        holds,
        why,
    }
}

use Holds::*;
use Route::{Completions, Detokenize, Embeddings, Infill, Rerank, Tokenize};

/// Required.
const REQ: bool = true;
/// Optional.
const OPT: bool = false;

/// The table, in the order a body is checked (the first violation is the
/// one said).
#[rustfmt::skip]
pub const BODY_RULES: &[BodyRule] = &[
    row(Completions, "prompt", REQ, OnePrompt, "what to continue; one string: the child runs one sequence, so several prompts would be several answers"),
    row(Infill, "input_prefix", REQ, Str, "the text before the cursor: llama-server's infill reads both halves"),
    row(Infill, "input_suffix", REQ, Str, "the text after the cursor"),
    row(Infill, "prompt", OPT, Str, "what was typed at the cursor"),
    row(Infill, "input_extra", OPT, Chunks, "other files as context; a chunk of another shape is a 500 inside the child"),
    row(Tokenize, "content", REQ, Str, "the text to tokenize"),
    row(Tokenize, "add_special", OPT, Bool, "a switch the child reads as a boolean (another type is a 500 there)"),
    row(Tokenize, "parse_special", OPT, Bool, "as add_special"),
    row(Tokenize, "with_pieces", OPT, Bool, "as add_special"),
    row(Detokenize, "tokens", REQ, TokenIds, "int32 ids in the child: a larger one would wrap"),
    row(Embeddings, "input", REQ, EmbedInput, "OpenAI's four shapes, what b10883 tokenizes; nothing empty (the child refuses each after tokenizing, OpenAI before)"),
    row(Embeddings, "encoding_format", OPT, OneOf(&["float", "base64"]), "OpenAI's two encodings"),
    row(Rerank, "query", REQ, NonEmptyStr, "what the documents are ranked against"),
    row(Rerank, "documents", REQ, Strings, "what is ranked: strings, as Jina's and Cohere's clients send them"),
    row(Rerank, "top_n", OPT, Count, "how many to return"),
];

/// Checks every row of `route` against `body`.
pub fn check_body(route: Route, body: &Map<String, Value>) -> Result<(), Violation> {
    for r in BODY_RULES.iter().filter(|r| r.route == route) {
        match body.get(r.field) {
            None | Some(Value::Null) if r.required => return Err(Violation::required(r.field)),
            None | Some(Value::Null) => {}
            Some(v) => check(r.field, r.holds, v)?,
        }
    }
    Ok(())
}

/// Checks one present value.
fn check(field: &str, holds: Holds, v: &Value) -> Result<(), Violation> {
    let ty = |what: &str| Err(Violation::ty(field, what));
    match (holds, v) {
        (Str, Value::String(_)) | (Bool, Value::Bool(_)) => Ok(()),
        (Str, _) => ty("a string"),
        (Bool, _) => ty("a boolean"),
        (NonEmptyStr, Value::String(s)) if !s.is_empty() => Ok(()),
        (NonEmptyStr, _) => ty("a non-empty string"),
        (OnePrompt, Value::String(_)) => Ok(()),
        (OnePrompt, Value::Array(_)) => Err(Violation::unsupported(
            field,
            "one string: the model server runs one sequence",
        )),
        (OnePrompt, _) => ty("a string"),
        (OneOf(set), Value::String(s)) if set.contains(&s.as_str()) => Ok(()),
        (OneOf(set), _) => Err(Violation::value(field, one_of(set))),
        (Count, v) if v.as_u64().is_some() => Ok(()),
        (Count, _) => ty("a non-negative integer"),
        (Chunks, Value::Array(chunks)) => chunks.iter().enumerate().try_for_each(|(i, c)| {
            let ok = c.get("text").is_some_and(Value::is_string)
                && c.get("filename").is_none_or(|f| f.is_string() || f.is_null());
            if ok {
                Ok(())
            } else {
                Err(Violation::item(
                    format!("{field}[{i}]"),
                    "{\"text\": string, \"filename\"?: string}",
                ))
            }
        }),
        (Chunks, _) => ty("an array"),
        (TokenIds, Value::Array(ids)) => match ids.iter().position(|t| !is_token_id(t)) {
            None => Ok(()),
            Some(i) => Err(Violation::item(format!("{field}[{i}]"), "a non-negative integer token id")),
        },
        (TokenIds, _) => ty("an array of token ids"),
        (EmbedInput, v) => embed_input(field, v),
        (Strings, Value::Array(items)) if !items.is_empty() => match items.iter().position(|d| !d.is_string()) {
            None => Ok(()),
            Some(i) => Err(Violation::item(format!("{field}[{i}]"), "a string")),
        },
        (Strings, _) => ty("a non-empty array of strings"),
    }
}

/// `"a" or "b"`.
fn one_of(set: &[&str]) -> String {
    set.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(" or ")
}

/// The shape of an embedding input's items: the first item decides it.
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

/// One of `input`'s four shapes, nothing empty.
fn embed_input(field: &str, input: &Value) -> Result<(), Violation> {
    let items = match input {
        Value::String(s) if s.is_empty() => return Err(Violation::empty(field)),
        Value::String(_) => return Ok(()),
        Value::Array(items) if items.is_empty() => return Err(Violation::empty(field)),
        Value::Array(items) => items,
        _ => {
            return Err(Violation::ty(
                field,
                "a string, an array of strings, an array of token ids or an array of arrays of token ids",
            ));
        }
    };
    let shape = Shape::of(&items[0]);
    for (i, item) in items.iter().enumerate() {
        let param = format!("{field}[{i}]");
        match (shape, item) {
            (Some(Shape::Text), Value::String(s)) if !s.is_empty() => {}
            (Some(Shape::Text), Value::String(_)) => return Err(Violation::empty(param)),
            (Some(Shape::Id), v) if is_token_id(v) => {}
            (Some(Shape::Ids), Value::Array(ids)) if !ids.is_empty() && ids.iter().all(is_token_id) => {}
            (Some(Shape::Text), _) => return Err(Violation::item(param, "a string, as input[0] is")),
            (Some(Shape::Id), _) => return Err(Violation::item(param, "a token id, as input[0] is")),
            (Some(Shape::Ids), _) => return Err(Violation::item(param, "a non-empty array of token ids")),
            (None, _) => {
                return Err(Violation::item(
                    param,
                    "a string, a token id or an array of token ids",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A route, a body, and the code and field refused (`None`: accepted).
    type Row = (Route, Value, Option<(&'static str, &'static str)>);

    fn check_json(route: Route, v: Value) -> Result<(), (&'static str, String)> {
        check_body(route, v.as_object().unwrap()).map_err(|v| (v.code, v.param))
    }

    /// Every row's table: a body, the code and the field refused (`None`:
    /// accepted).
    #[test]
    fn each_route_s_body_is_checked_by_its_rows() {
        let rows: &[Row] = &[
            (Completions, json!({"prompt": "a"}), None),
            (Completions, json!({}), Some(("missing_required_parameter", "prompt"))),
            (Completions, json!({"prompt": null}), Some(("missing_required_parameter", "prompt"))),
            (Completions, json!({"prompt": ["a", "b"]}), Some(("unsupported_value", "prompt"))),
            (Completions, json!({"prompt": 3}), Some(("invalid_type", "prompt"))),
            (Infill, json!({"input_prefix": "a", "input_suffix": "b"}), None),
            (Infill, json!({"input_suffix": "b"}), Some(("missing_required_parameter", "input_prefix"))),
            (Infill, json!({"input_prefix": "a", "input_suffix": 1}), Some(("invalid_type", "input_suffix"))),
            (Infill, json!({"input_prefix": "a", "input_suffix": "b", "prompt": 1}), Some(("invalid_type", "prompt"))),
            (Infill, json!({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "x", "filename": "f"}, {"text": "y"}]}), None),
            (Infill, json!({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "x"}, {"filename": "f"}]}), Some(("invalid_type", "input_extra[1]"))),
            (Infill, json!({"input_prefix": "a", "input_suffix": "b", "input_extra": "x"}), Some(("invalid_type", "input_extra"))),
            (Tokenize, json!({"content": "a", "add_special": true}), None),
            (Tokenize, json!({"content": "a", "with_pieces": "yes"}), Some(("invalid_type", "with_pieces"))),
            (Tokenize, json!({"add_special": true}), Some(("missing_required_parameter", "content"))),
            (Detokenize, json!({"tokens": [1, 2, 3]}), None),
            (Detokenize, json!({"tokens": [1, -2]}), Some(("invalid_type", "tokens[1]"))),
            (Detokenize, json!({"tokens": [2147483648_u64]}), Some(("invalid_type", "tokens[0]"))),
            (Detokenize, json!({"tokens": [2147483647_u64]}), None),
            (Detokenize, json!({"tokens": "1 2"}), Some(("invalid_type", "tokens"))),
            (Embeddings, json!({"input": "a"}), None),
            (Embeddings, json!({"input": ["a", "b"]}), None),
            (Embeddings, json!({"input": [1, 2]}), None),
            (Embeddings, json!({"input": [[1, 2], [3]]}), None),
            (Embeddings, json!({"input": ""}), Some(("invalid_value", "input"))),
            (Embeddings, json!({"input": []}), Some(("invalid_value", "input"))),
            (Embeddings, json!({"input": ["a", ""]}), Some(("invalid_value", "input[1]"))),
            (Embeddings, json!({"input": ["a", 1]}), Some(("invalid_type", "input[1]"))),
            (Embeddings, json!({"input": [[1], []]}), Some(("invalid_type", "input[1]"))),
            (Embeddings, json!({"input": [{"a": 1}]}), Some(("invalid_type", "input[0]"))),
            (Embeddings, json!({"input": 1.5}), Some(("invalid_type", "input"))),
            (Embeddings, json!({"input": {"text": "a"}}), Some(("invalid_type", "input"))),
            (Embeddings, json!({"input": null}), Some(("missing_required_parameter", "input"))),
            (Embeddings, json!({"input": [5, "a"]}), Some(("invalid_type", "input[1]"))),
            (Embeddings, json!({"input": [-1]}), Some(("invalid_type", "input[0]"))),
            (Embeddings, json!({"input": [3000000000_u64]}), Some(("invalid_type", "input[0]"))),
            (Embeddings, json!({"input": [[1], [1.5]]}), Some(("invalid_type", "input[1]"))),
            (Embeddings, json!({"input": [true]}), Some(("invalid_type", "input[0]"))),
            (Embeddings, json!({"input": "a", "dimensions": 3, "encoding_format": "float"}), None),
            (Embeddings, json!({"input": "a", "encoding_format": "base64"}), None),
            (Embeddings, json!({"input": "a", "encoding_format": "int8"}), Some(("invalid_value", "encoding_format"))),
            (Embeddings, json!({}), Some(("missing_required_parameter", "input"))),
            (Rerank, json!({"query": "q", "documents": ["a"], "top_n": 1}), None),
            (Rerank, json!({"query": "", "documents": ["a"]}), Some(("invalid_type", "query"))),
            (Rerank, json!({"query": "q", "documents": []}), Some(("invalid_type", "documents"))),
            (Rerank, json!({"query": "q", "documents": ["a", 2]}), Some(("invalid_type", "documents[1]"))),
            (Rerank, json!({"query": "q", "documents": ["a"], "top_n": -1}), Some(("invalid_type", "top_n"))),
            (Rerank, json!({"documents": ["a"]}), Some(("missing_required_parameter", "query"))),
            (Rerank, json!({"query": "q"}), Some(("missing_required_parameter", "documents"))),
        ];
        for (route, body, want) in rows {
            let got = check_json(*route, body.clone());
            let want = want.map(|(c, p)| (c, p.to_string()));
            assert_eq!(got.err(), want, "{route:?} {body}");
        }
    }

    /// Every row says why, and no route repeats a field.
    #[test]
    fn every_row_has_a_reason_and_one_field_one_row() {
        for (i, r) in BODY_RULES.iter().enumerate() {
            assert!(!r.why.is_empty(), "{r:?}");
            assert!(
                !BODY_RULES[..i].iter().any(|o| o.route == r.route && o.field == r.field),
                "{r:?} repeated"
            );
        }
    }
}
