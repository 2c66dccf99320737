//! Reading a request body under the size limit, with the limit's error in
//! OpenAI's shape (actix's own extractor answers in plain text).

use actix_web::web;
use bytes::BytesMut;
use futures::StreamExt;

use crate::error::ApiError;

/// The body, or 413 `request_too_large` past `max` bytes.
pub async fn read_body(mut payload: web::Payload, max: usize) -> Result<bytes::Bytes, ApiError> {
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
