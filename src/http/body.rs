//! Reading a request body under the size and time limits, with the limit's error in
//! OpenAI's shape (actix's own extractor answers in plain text).

use std::time::Duration;

use actix_web::web;
use bytes::BytesMut;
use futures::StreamExt;

use crate::error::ApiError;

/// The body, or 413 `request_too_large` past `max` bytes, or 408
/// `body_timeout` when the whole of it takes longer than `within` (a body
/// trickled in byte by byte must not hold a worker, and never reaches the
/// engine).
pub async fn read_body(payload: web::Payload, max: usize, within: Duration) -> Result<bytes::Bytes, ApiError> {
    match tokio::time::timeout(within, read_all(payload, max)).await {
        Ok(r) => r,
        Err(_) => Err(ApiError {
            status: 408,
            message: format!(
                "the request body did not arrive within {within:?} (WARDEN_BODY_TIMEOUT_S); send it at once"
            ),
            kind: "invalid_request_error",
            code: "body_timeout".into(),
            param: None,
            raw: None,
        }),
    }
}

async fn read_all(mut payload: web::Payload, max: usize) -> Result<bytes::Bytes, ApiError> {
    let too_large = || ApiError {
        status: 413,
        message: format!("the request body is larger than {max} bytes (WARDEN_MAX_BODY_BYTES)"),
        kind: "invalid_request_error",
        code: "request_too_large".into(),
        param: None,
        raw: None,
    };
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::invalid("invalid_body", format!("could not read the request body: {e}"), None))?;
        if buf.len() + chunk.len() > max {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}
