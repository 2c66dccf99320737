//! `Prefer: wait=N` (RFC 7240): a client that would rather be told to come
//! back than wait long. It bounds how long a turn waits for another model's
//! memory (`law::schedule`); past it the turn is refused, 503
//! `model_does_not_fit`, with a `Retry-After` of the scheduler's estimate.
//! Other preferences in the header are ignored, as the RFC asks.

use std::time::Duration;

/// The wait a request prefers, from its `Prefer` headers (`None`: none
/// said, or not a count of seconds).
pub fn wait(http: &actix_web::HttpRequest) -> Option<Duration> {
    http.headers()
        .get_all("prefer")
        .filter_map(|v| v.to_str().ok())
        .find_map(parse_wait)
}

/// `wait=N` among one header's comma-separated preferences (each possibly
/// with `;` parameters); the token is case-insensitive, the value may be
/// quoted.
pub fn parse_wait(header: &str) -> Option<Duration> {
    header.split(',').find_map(|pref| {
        let head = pref.split(';').next()?.trim();
        let (name, value) = head.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("wait") {
            return None;
        }
        let secs: u64 = value.trim().trim_matches('"').parse().ok()?;
        Some(Duration::from_secs(secs))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_read_from_among_the_preferences() {
        let rows = [
            ("wait=10", Some(10)),
            ("respond-async, wait=5", Some(5)),
            ("Wait = \"7\"", Some(7)),
            ("wait=0", Some(0)),
            ("handling=lenient; x=1, wait=3; y", Some(3)),
            // why: not a count of seconds, or not the wait: no bound
            ("wait=soon", None),
            ("wait=-1", None),
            ("return=minimal", None),
            ("", None),
        ];
        for (h, want) in rows {
            assert_eq!(parse_wait(h), want.map(Duration::from_secs), "{h:?}");
        }
    }
}
