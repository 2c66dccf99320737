//! Whose fault a refusal of the child's is: an error status from
//! llama-server that the request caused becomes the client's 400; one the
//! server caused stays a 5xx with its code. Pure: the status and the
//! child's message in, the verdict out.
//!
//! llama-server b10883 answers `std::invalid_argument` with a 400 and every
//! other exception with a 500 (`server.cpp`'s `ex_wrapper`). Many of those
//! others are the request's fault all the same: nlohmann's json exceptions
//! while it reads a field of the wrong type or a missing key
//! (`[json.exception.type_error.302] type must be string`,
//! `[json.exception.out_of_range.403] key 'text' not found`), and its own
//! `runtime_error`s about the body ("Failed to parse tools", "Failed to
//! parse messages", "Unknown reasoning format", "image input is not
//! supported"). The warden's own validation (`request`, `request_chat`)
//! refuses these first; this is the net under it, for whatever shape the
//! table does not know yet.

/// Texts of the child's messages that mean the request was at fault.
pub const REQUEST_FAULTS: &[&str] = &[
    "[json.exception.",
    "Failed to parse",
    "failed to parse",
    "Expected ",
    "expected ",
    "must be ",
    "Unknown reasoning format",
    "is not supported",
    "Unsupported content part",
    "Missing ",
    "Invalid ",
    "Field '",
    "Error: ",
    "\"json_schema\": ",
    // An embedding input longer than the encoder's batch (the window):
    // b10883 throws it as a runtime_error, a 500.
    "is too large to process",
];

/// The verdict on a child's error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The request's: the client gets a 400 with the child's text in `raw`.
    Request,
    /// The server's (or a status the child meant as is): kept.
    Kept,
}

/// Whose fault the child's `status` with `message` is.
pub fn fault(status: u16, message: &str) -> Fault {
    let request_text = REQUEST_FAULTS.iter().any(|t| message.contains(t));
    match status {
        // llama-server's own 400 already says it; its other 4xx (401, 404,
        // 501 for a route or feature it lacks) mean what they say.
        400 => Fault::Request,
        500 if request_text => Fault::Request,
        _ => Fault::Kept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_faults_become_400_and_server_faults_stay() {
        let rows = [
            // why: a json type error while reading a field is the body's fault
            (
                500,
                "[json.exception.type_error.302] type must be string, but is number",
                Fault::Request,
            ),
            (
                500,
                "[json.exception.out_of_range.403] key 'text' not found",
                Fault::Request,
            ),
            // why: the tools parser wraps its errors in a runtime_error
            (
                500,
                "Failed to parse tools: [json.exception.type_error.302] ...",
                Fault::Request,
            ),
            (500, "Unknown reasoning format: x", Fault::Request),
            // why: an embedding input over the window is the request's size
            (
                500,
                "input (2002 tokens) is too large to process. increase the physical batch size (current batch size: 512)",
                Fault::Request,
            ),
            (
                500,
                "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj",
                Fault::Request,
            ),
            // why: already a 400 in the child
            (400, "Field 'n_predict': Value must be between", Fault::Request),
            // why: a real fault of the server stays a 5xx
            (500, "Internal Server Error", Fault::Kept),
            (500, "failed to decode the batch, n_batch = 0, ret = -3", Fault::Kept),
            (503, "Loading model", Fault::Kept),
            // why: 501 is the child's word that it lacks a feature
            (
                501,
                "Infill is not supported by this model: prefix token is missing.",
                Fault::Kept,
            ),
            (404, "File Not Found", Fault::Kept),
        ];
        for (i, (status, message, want)) in rows.into_iter().enumerate() {
            assert_eq!(fault(status, message), want, "row {i}: {status} {message}");
        }
    }
}
