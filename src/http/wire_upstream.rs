//! The child's own 4xx/5xx (`GenerationError::Upstream`) as the wire error,
//! for `GenerationError::to_api`: one the request caused
//! (`law::upstream::fault`) is the client's 400 with the child's text in
//! `raw`; a real fault of the server keeps its status and code.

use crate::error::ApiError;

/// The child's own 4xx/5xx, kept in OpenAI's shape: llama-server's
/// `exceed_context_size_error` becomes OpenAI's `context_length_exceeded`.
pub(super) fn upstream_error(status: u16, body: Option<&serde_json::Value>) -> ApiError {
    let err = body.and_then(|b| b.get("error")).unwrap_or(&serde_json::Value::Null);
    let message = err
        .get("message")
        .and_then(|m| m.as_str())
        .or_else(|| body.and_then(|b| b.get("detail")).and_then(|d| d.as_str()))
        .unwrap_or("the model server refused the request")
        .to_string();
    let upstream_type = err.get("type").and_then(|t| t.as_str()).unwrap_or("");
    // llama-server answers an id beyond its tables (a `/detokenize` token
    // past the vocabulary, measured on b10883) with a 500 carrying the C++
    // `vector::_M_range_check` text: the request was wrong, not the server.
    if status == 500 && message.contains("_M_range_check") {
        return ApiError {
            status: 400,
            message: format!("an id in the request is out of range for this model ({message})"),
            kind: "invalid_request_error",
            code: "invalid_value".into(),
            param: None,
            raw: None,
        };
    }
    if crate::law::upstream::fault(status, &message) == crate::law::upstream::Fault::Request {
        return ApiError {
            status: 400,
            message: if upstream_type == "exceed_context_size_error" {
                message.clone()
            } else {
                format!("the model server could not read the request: {}", first_line(&message))
            },
            kind: "invalid_request_error",
            code: match upstream_type {
                "exceed_context_size_error" => "context_length_exceeded".into(),
                _ => "invalid_request".into(),
            },
            param: None,
            raw: Some(message),
        };
    }
    let code = match upstream_type {
        "exceed_context_size_error" => "context_length_exceeded".to_string(),
        "" => format!("upstream_{status}"),
        t => t.to_string(),
    };
    let kind = if (400..500).contains(&status) {
        "invalid_request_error"
    } else {
        "server_error"
    };
    ApiError {
        status: if status == 401 || status == 403 { 502 } else { status },
        message,
        kind,
        code,
        param: None,
        raw: None,
    }
}

/// The first line of a child's message, at most 300 characters (a tools
/// parse error dumps the whole tools array after it; `raw` keeps it all).
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or("");
    match line.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_string(),
    }
}
