//! What a request body may hold, field by field, on every route that relays
//! a body to the child, and the one token bound every generation gets.
//! Pure: `serde_json` values in, a `Violation` (the field, what was
//! expected) or a bound out.
//!
//! Why the warden checks what the child would check anyway: llama-server
//! b10883 answers many client mistakes with a 500 (a `json` type error
//! inside its own parsing, a `runtime_error` for an image sent to a model
//! without a projector), silently falls back to a default on others (a
//! wrong-typed `n_predict` is dropped, so `max_tokens` is ignored too and
//! the answer runs to the window's end), and wraps integers past `i32`
//! (`max_tokens: 4294967300` became 4, `2^64 - 1` became -1: unbounded).
//! A client must get a 400 naming the field instead, before any turn or
//! load, and no field may buy unbounded work.
//!
//! The rule for ranges: where OpenAI and llama.cpp both define a field, the
//! warden accepts what either server would honour and refuses only what
//! neither would (llama.cpp's soft limits clamp, its hard limits refuse:
//! `tools/server/server-schema.cpp`). Counts are integers below 2^31 (the
//! child's `int32`), never wrapped. Unknown fields pass untouched: they are
//! extensions this table does not know, and the child ignores what it does
//! not read. The nested shapes of chat (`messages`, `tools`, `tool_choice`,
//! `response_format`) are read by chat's typed request (`http::chat_request`).

use serde_json::{Map, Value};

use super::route::Route;

/// The largest count a field may hold: the child reads counts as `int32`.
pub const MAX_COUNT: i64 = i32::MAX as i64;
/// The bound of a generation whose window the warden does not know (a
/// child whose `/props` failed): the spec's window floor, the least any
/// llama.cpp child is given.
pub const UNKNOWN_WINDOW_BOUND: u32 = 4096;
/// The fields that bound a generation, in the order llama-server reads them
/// (the first present wins there; the warden folds them into one instead).
pub const TOKEN_FIELDS: [&str; 3] = ["n_predict", "max_completion_tokens", "max_tokens"];

/// What a field must hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Expect {
    /// `true` or `false`.
    Bool,
    /// An integer in `[min, max]`.
    Int(i64, i64),
    /// A finite number in `[min, max]`.
    Num(f64, f64),
    /// A string.
    Str,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A string, or an array of strings.
    StrOrStrs,
    /// An array of strings.
    Strs,
    /// A JSON object.
    Object,
    /// An object or an array (`logit_bias` in either of llama.cpp's forms).
    ObjectOrArray,
    /// A boolean or an integer in `[0, max]` (`logprobs` of a completion).
    BoolOrInt(i64),
    /// A string or an array (`samplers`: letters, or names).
    StrOrArray,
    /// An array (`lora`: its objects are the child's to read).
    Array,
    /// Exactly 1 (`n`): the child runs one sequence; anything else is
    /// `unsupported_value`.
    One,
}

/// Which routes a rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every route that generates (chat, completions, infill): they share
    /// llama-server's sampling schema.
    Generating,
    /// Chat only.
    Chat,
    /// Raw completions and infill.
    Text,
}

impl Scope {
    /// Whether the rule applies to `route`.
    pub fn covers(self, route: Route) -> bool {
        match self {
            Self::Generating => route.generates(),
            Self::Chat => route == Route::Chat,
            Self::Text => matches!(route, Route::Completions | Route::Infill),
        }
    }
}

/// One field's rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// The top-level field.
    pub field: &'static str,
    /// What it must hold (null always counts as absent, as in the child).
    pub expect: Expect,
    /// Where it applies.
    pub scope: Scope,
    /// Why the rule is what it is.
    pub why: &'static str,
}

const fn rule(field: &'static str, expect: Expect, scope: Scope, why: &'static str) -> Rule {
    Rule {
        field,
        expect,
        scope,
        why,
    }
}

use Expect::*;
use Scope::*;

const INF: f64 = f64::MAX;

/// The table: every scalar field of OpenAI's chat and completions requests
/// and of llama-server's sampling schema (b10883).
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    // The bound: one of three names, folded by `requested_bound`.
    rule("n_predict", Int(0, MAX_COUNT), Generating, "int32 in the child; -1 (unbounded) is refused: no request buys unbounded work"),
    rule("max_tokens", Int(0, MAX_COUNT), Generating, "OpenAI's bound; wrapped past i32 in the child"),
    rule("max_completion_tokens", Int(0, MAX_COUNT), Generating, "OpenAI's newer bound; wrapped past i32 in the child"),
    rule("n", One, Generating, "the child runs one slot: more than one choice is refused by it, zero is meaningless"),
    rule("n_cmpl", One, Generating, "llama.cpp's name for n"),
    rule("stream", Bool, Generating, "a wrong type is a json error (500) in the child"),
    rule("stream_options", Object, Generating, "only include_usage is read"),
    rule("seed", Int(-1, u32::MAX as i64), Generating, "uint32 in the child, -1 means a random seed; larger wraps"),
    rule("temperature", Num(0.0, INF), Generating, "llama.cpp clamps below 0; OpenAI refuses it"),
    rule("top_p", Num(0.0, 1.0), Generating, "a probability"),
    rule("min_p", Num(0.0, 1.0), Generating, "a probability"),
    rule("typical_p", Num(-INF, INF), Generating, "any number; 1 disables it"),
    rule("top_k", Int(0, MAX_COUNT), Generating, "a count; 0 disables it"),
    rule("top_n_sigma", Num(-INF, INF), Generating, "any number; below 0 disables it"),
    rule("xtc_probability", Num(0.0, 1.0), Generating, "a probability"),
    rule("xtc_threshold", Num(0.0, 1.0), Generating, "a probability"),
    rule("presence_penalty", Num(-INF, INF), Generating, "OpenAI's range is [-2, 2]; llama.cpp takes any number"),
    rule("frequency_penalty", Num(-INF, INF), Generating, "OpenAI's range is [-2, 2]; llama.cpp takes any number"),
    rule("repeat_penalty", Num(-INF, INF), Generating, "llama.cpp's; 1 disables it"),
    rule("repetition_penalty", Num(-INF, INF), Generating, "the Hugging Face name, translated to repeat_penalty"),
    rule("repeat_last_n", Int(0, MAX_COUNT), Generating, "a count (hard limit in the child)"),
    rule("dynatemp_range", Num(-INF, INF), Generating, "any number"),
    rule("dynatemp_exponent", Num(-INF, INF), Generating, "any number"),
    rule("dry_multiplier", Num(-INF, INF), Generating, "any number"),
    rule("dry_base", Num(-INF, INF), Generating, "below 1 the child uses its default"),
    rule("dry_allowed_length", Int(0, MAX_COUNT), Generating, "a count (hard limit in the child)"),
    rule("dry_penalty_last_n", Int(-1, MAX_COUNT), Generating, "a count, -1 for the whole window"),
    rule("dry_sequence_breakers", Strs, Generating, "the child requires strings"),
    rule("mirostat", Int(0, 2), Generating, "0, 1 or 2"),
    rule("mirostat_tau", Num(-INF, INF), Generating, "any number"),
    rule("mirostat_eta", Num(-INF, INF), Generating, "any number"),
    rule("adaptive_target", Num(-INF, 1.0), Generating, "at most 1"),
    rule("adaptive_decay", Num(0.0, 0.99), Generating, "hard limit in the child"),
    rule("n_probs", Int(0, MAX_COUNT), Generating, "a count"),
    rule("min_keep", Int(0, MAX_COUNT), Generating, "a count"),
    rule("n_keep", Int(-1, MAX_COUNT), Generating, "a count, -1 keeps the whole prompt"),
    rule("n_discard", Int(0, MAX_COUNT), Generating, "a count"),
    rule("n_indent", Int(0, MAX_COUNT), Generating, "a count"),
    rule("n_cache_reuse", Int(0, MAX_COUNT), Generating, "a count"),
    rule("t_max_predict_ms", Int(-1, MAX_COUNT), Generating, "milliseconds; the warden's own watchdogs bound the turn anyway"),
    rule("sse_ping_interval", Int(-1, MAX_COUNT), Generating, "seconds, -1 disables"),
    rule("id_slot", Int(-1, 0), Generating, "the child has one slot, 0; -1 lets it choose"),
    rule("cache_prompt", Bool, Generating, "a boolean in the child"),
    rule("ignore_eos", Bool, Generating, "a boolean in the child"),
    rule("return_tokens", Bool, Generating, "a boolean in the child"),
    rule("return_progress", Bool, Generating, "a boolean in the child"),
    rule("timings_per_token", Bool, Generating, "a boolean in the child"),
    rule("post_sampling_probs", Bool, Generating, "a boolean in the child"),
    rule("backend_sampling", Bool, Generating, "a boolean in the child"),
    rule("verbose", Bool, Generating, "a boolean in the child"),
    rule("echo", Bool, Generating, "a boolean in the child"),
    rule("grammar_lazy", Bool, Generating, "a boolean in the child"),
    rule("parse_tool_calls", Bool, Generating, "a boolean in the child"),
    rule("reasoning_control", Bool, Generating, "a boolean in the child"),
    rule("stop", StrOrStrs, Generating, "a string or strings; anything else is a json error in the child"),
    rule("samplers", StrOrArray, Generating, "letters as a string, or names as an array"),
    rule("grammar", Str, Generating, "GBNF text"),
    rule("json_schema", Object, Generating, "a JSON schema is an object"),
    rule("logit_bias", ObjectOrArray, Generating, "{token: bias} (OpenAI) or [[token, bias]] (llama.cpp)"),
    rule("lora", Array, Generating, "the child refuses anything but an array"),
    rule("response_fields", Strs, Generating, "field names"),
    rule("reasoning_format", OneOf(&["none", "auto", "deepseek", "deepseek-legacy"]), Generating, "an unknown name is a runtime error (500) in the child"),
    rule("reasoning_budget_tokens", Int(-1, MAX_COUNT), Generating, "a count, -1 unbounded (the answer's bound still holds)"),
    rule("reasoning_budget_message", Str, Generating, "text"),
    rule("reasoning_budget_start_tag", Str, Generating, "text"),
    rule("reasoning_budget_end_tag", Str, Generating, "text"),
    rule("reasoning_budget_end_tags", Strs, Generating, "texts"),
    rule("generation_prompt", Str, Generating, "text"),
    rule("chat_parser", Str, Generating, "text"),
    rule("preserved_tokens", Strs, Generating, "the child reads strings"),
    rule("user", Str, Generating, "OpenAI: an end-user id"),
    // Chat only.
    rule("logprobs", Bool, Chat, "OpenAI chat: a switch (a count on completions)"),
    rule("top_logprobs", Int(0, 20), Chat, "OpenAI's range"),
    rule("parallel_tool_calls", Bool, Chat, "a boolean in the child"),
    rule("add_generation_prompt", Bool, Chat, "a boolean in the child"),
    rule("chat_template_kwargs", Object, Chat, "keyword arguments are an object"),
    rule("chat_template", Str, Chat, "template text"),
    rule("reasoning_effort", Str, Chat, "a level name"),
    rule("thinking_budget_tokens", Int(-1, MAX_COUNT), Chat, "a count"),
    rule("enable_thinking", Bool, Chat, "a boolean"),
    rule("metadata", Object, Chat, "OpenAI: string pairs"),
    rule("store", Bool, Chat, "OpenAI: a switch"),
    // Completions and infill.
    rule("logprobs", BoolOrInt(20), Text, "OpenAI completions: a count up to 5 (20 in llama.cpp)"),
    rule("suffix", Str, Text, "text"),
    rule("best_of", One, Text, "one sequence runs"),
];

/// A field that breaks its rule: the 400 the client gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The field, with its path (`messages[2].content[0].text`).
    pub param: String,
    /// `invalid_type`, `invalid_value`, `missing_required_parameter`,
    /// `unsupported_value`.
    pub code: &'static str,
    /// What was expected, for a person.
    pub message: String,
}

impl Violation {
    /// A violation of `param` with `code` and a whole sentence `message`.
    pub fn new(code: &'static str, message: impl Into<String>, param: impl Into<String>) -> Self {
        Self {
            param: param.into(),
            code,
            message: message.into(),
        }
    }

    /// A wrong type or shape.
    pub fn ty(param: impl Into<String>, expected: impl std::fmt::Display) -> Self {
        let param = param.into();
        Self {
            message: format!("'{param}' must be {expected}"),
            param,
            code: "invalid_type",
        }
    }

    /// A value of the right type out of its range or set.
    pub fn value(param: impl Into<String>, expected: impl std::fmt::Display) -> Self {
        let param = param.into();
        Self {
            message: format!("'{param}' must be {expected}"),
            param,
            code: "invalid_value",
        }
    }

    /// A required field that is absent (or null).
    pub fn required(param: impl Into<String>) -> Self {
        let param = param.into();
        Self {
            message: format!("'{param}' is required"),
            param,
            code: "missing_required_parameter",
        }
    }

    /// A value the child could take but the warden does not run (several
    /// prompts, several choices).
    pub fn unsupported(param: impl Into<String>, expected: impl std::fmt::Display) -> Self {
        let param = param.into();
        Self {
            message: format!("'{param}' must be {expected}"),
            param,
            code: "unsupported_value",
        }
    }

    /// An item of an array (`param` is its path, `input[2]`) of the wrong
    /// type or shape.
    pub fn item(param: impl Into<String>, expected: impl std::fmt::Display) -> Self {
        let param = param.into();
        Self {
            message: format!("{param} must be {expected}"),
            param,
            code: "invalid_type",
        }
    }

    /// An empty string or array where something is needed.
    pub fn empty(param: impl Into<String>) -> Self {
        let param = param.into();
        Self {
            message: format!("'{param}' must not be empty"),
            param,
            code: "invalid_value",
        }
    }

    /// A required part that is missing.
    pub fn missing(param: impl Into<String>, what: impl std::fmt::Display) -> Self {
        let param = param.into();
        Self {
            message: format!("'{param}' is required: {what}"),
            param,
            code: "missing_required_parameter",
        }
    }
}

/// Checks every rule that covers `route` against `body`.
pub fn check_fields(route: Route, body: &Map<String, Value>) -> Result<(), Violation> {
    for r in RULES.iter().filter(|r| r.scope.covers(route)) {
        match body.get(r.field) {
            None | Some(Value::Null) => {}
            Some(v) => check_value(r.field, r.expect, v)?,
        }
    }
    Ok(())
}

/// Checks one value against what it must hold.
pub fn check_value(param: &str, expect: Expect, v: &Value) -> Result<(), Violation> {
    let int = |min: i64, max: i64| -> Result<(), Violation> {
        let what = || format!("an integer from {min} to {max}");
        match v {
            Value::Number(n) => match n.as_i64() {
                Some(i) if (min..=max).contains(&i) => Ok(()),
                // A float with no fraction is still not an integer to the
                // child's int32 conversion of a JSON float: refuse it too.
                _ if n.is_f64() => Err(Violation::ty(param, what())),
                _ => Err(Violation::value(param, what())),
            },
            _ => Err(Violation::ty(param, what())),
        }
    };
    match expect {
        Bool if v.is_boolean() => Ok(()),
        Bool => Err(Violation::ty(param, "a boolean")),
        Int(min, max) => int(min, max),
        Num(min, max) => {
            let what = || range_text(min, max);
            match v.as_f64() {
                Some(x) if x.is_finite() && x >= min && x <= max => Ok(()),
                Some(_) => Err(Violation::value(param, what())),
                None => Err(Violation::ty(param, what())),
            }
        }
        Str if v.is_string() => Ok(()),
        Str => Err(Violation::ty(param, "a string")),
        OneOf(names) => match v.as_str() {
            Some(s) if names.contains(&s) => Ok(()),
            Some(_) => Err(Violation::value(param, format!("one of {}", names.join(", ")))),
            None => Err(Violation::ty(param, format!("one of {}", names.join(", ")))),
        },
        StrOrStrs if v.is_string() => Ok(()),
        StrOrStrs | Strs => strings(param, v, expect == StrOrStrs),
        Object if v.is_object() => Ok(()),
        Object => Err(Violation::ty(param, "an object")),
        ObjectOrArray if v.is_object() || v.is_array() => Ok(()),
        ObjectOrArray => Err(Violation::ty(param, "an object or an array")),
        BoolOrInt(_) if v.is_boolean() => Ok(()),
        BoolOrInt(max) => int(0, max),
        StrOrArray if v.is_string() || v.is_array() => Ok(()),
        StrOrArray => Err(Violation::ty(param, "a string or an array")),
        Array if v.is_array() => Ok(()),
        Array => Err(Violation::ty(param, "an array")),
        One => match v.as_u64() {
            Some(1) => Ok(()),
            Some(_) => Err(Violation {
                param: param.to_string(),
                code: "unsupported_value",
                message: format!("'{param}' must be 1: the model server runs one sequence"),
            }),
            None => Err(Violation::ty(param, "the integer 1")),
        },
    }
}

/// An array of strings (or, when `or_one`, a single string).
fn strings(param: &str, v: &Value, or_one: bool) -> Result<(), Violation> {
    let what = if or_one {
        "a string or an array of strings"
    } else {
        "an array of strings"
    };
    let Value::Array(items) = v else {
        return Err(Violation::ty(param, what));
    };
    match items.iter().position(|s| !s.is_string()) {
        Some(i) => Err(Violation::ty(format!("{param}[{i}]"), "a string")),
        None => Ok(()),
    }
}

fn range_text(min: f64, max: f64) -> String {
    match (min == -INF, max == INF) {
        (true, true) => "a finite number".into(),
        (false, true) => format!("a number of at least {min}"),
        (true, false) => format!("a number of at most {max}"),
        (false, false) => format!("a number from {min} to {max}"),
    }
}

/// The bound a request asks for: the smallest of `n_predict`,
/// `max_completion_tokens` and `max_tokens` present (a client that sends
/// two means the tighter one; llama-server would take the first present in
/// its own order, whatever the others say). HTTP requests reach here
/// checked (`check_fields` refused every value that is not a count); in an
/// embedder's unchecked turn a value that is not a count is ignored and one
/// past `MAX_COUNT` is `MAX_COUNT`, never wrapped.
pub fn requested_bound(body: &Map<String, Value>) -> Option<u32> {
    TOKEN_FIELDS
        .iter()
        .filter_map(|f| body.get(*f).and_then(Value::as_u64))
        .min()
        // check_fields bounded each to MAX_COUNT < u32::MAX.
        .map(|n| n.min(MAX_COUNT as u64) as u32)
}

/// Whether `v` is a token id a request may name: an integer in
/// `[0, MAX_COUNT]` (llama.cpp's ids are `int32`; a larger one would wrap
/// in the child). The one rule for every route that takes ids (embeddings'
/// `input`, `/detokenize`'s `tokens`).
pub fn is_token_id(v: &Value) -> bool {
    v.as_u64().is_some_and(|id| id <= MAX_COUNT as u64)
}

/// The bound a generation runs under: what it asked for, capped by the
/// window; absent, the whole window (llama-server's own default, n_predict
/// -1, stops where the window is full, so this changes no answer, but the
/// warden no longer depends on the child to stop).
pub fn token_bound(requested: Option<u32>, window: Option<u32>) -> u32 {
    let cap = window.unwrap_or(UNKNOWN_WINDOW_BOUND);
    requested.map_or(cap, |r| r.min(cap))
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
