//! Incremental Server-Sent Events parser for a chat stream: the child's,
//! as the engine relays it, and the warden's, as a client reads it.
//!
//! Fed the response body chunk by chunk (`push`), it yields whole events as
//! they complete, whatever the chunking: an event, a line or a UTF-8 sequence
//! may be split at any byte. It follows the WHATWG event-stream rules: LF, CR
//! and CRLF all end a line (a CRLF split across two chunks counts once),
//! lines starting with `:` are comments, `data` lines of one event join with
//! LF, one space after the colon is dropped, an event is dispatched at a
//! blank line and only when it has data.
//!
//! Why our own parser rather than `sse-stream`/`russe`: the hot path forwards
//! every chunk to the client, and this parser hands back the event's *raw
//! bytes* (a zero-copy slice of the receive buffer) next to its data, so the
//! warden relays llama-server's exact framing without re-encoding a byte or
//! allocating per chunk. It is ~150 lines and property-tested against a
//! reference split (`tests/formats/sse_parser.rs`).

use bytes::{Bytes, BytesMut};

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The event's bytes as received, from its first line through the blank
    /// line that ended it (comments included): what the relay writes out.
    pub raw: Bytes,
    /// The joined `data` field (without the trailing LF).
    pub data: Bytes,
    /// The `event` field, when the event named one.
    pub event: Option<String>,
}

impl SseEvent {
    /// Whether this is the OpenAI stream terminator `[DONE]`.
    pub fn is_done(&self) -> bool {
        self.data.as_ref() == b"[DONE]"
    }

    /// Whether the data is an error object (`{"error": ...}`), the shape
    /// llama-server and mlx-vlm use for a failure after the stream started.
    pub fn is_error(&self) -> bool {
        let d = self.data.as_ref();
        let trimmed = d
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .map_or(&d[..0], |i| &d[i..]);
        trimmed.starts_with(b"{\"error\"") || self.event.as_deref() == Some("error")
    }
}

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, not yet dispatched event.
    buf: BytesMut,
    /// How far into `buf` lines have been processed.
    cursor: usize,
    /// Data of the current event when it spans several lines (else `None`
    /// and the single data line is sliced from `raw` at dispatch).
    data_lines: Vec<(usize, usize)>,
    /// The current event's `event` field.
    event: Option<String>,
    /// The previous chunk ended in CR: a LF at the start of the next one is
    /// the second half of a CRLF, not a blank line.
    skip_lf: bool,
}

/// A cap on one pending event: a child that streams megabytes without a blank
/// line is broken, and the warden must not buffer it forever.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// The stream carried an event larger than [`MAX_EVENT_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an SSE event exceeded {MAX_EVENT_BYTES} bytes without ending")]
pub struct EventTooLarge;

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one chunk; completed events are appended to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
        // The cursor sits at the end of the buffer whenever `skip_lf` is set
        // (the CR was the last byte seen), so the LF, kept in `raw`, is
        // stepped over right where it lands.
        self.buf.extend_from_slice(chunk);
        if self.skip_lf && !chunk.is_empty() {
            if self.buf.get(self.cursor) == Some(&b'\n') {
                self.cursor += 1;
            }
            self.skip_lf = false;
        }
        self.scan(out);
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(EventTooLarge);
        }
        Ok(())
    }

    /// Processes every complete line from `cursor`.
    fn scan(&mut self, out: &mut Vec<SseEvent>) {
        loop {
            let rest = &self.buf[self.cursor..];
            let Some(end) = memchr::memchr2(b'\n', b'\r', rest) else {
                return;
            };
            let line_start = self.cursor;
            let line_end = line_start + end;
            let term_len = if rest[end] == b'\r' {
                match rest.get(end + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    None => {
                        // CR at the very end: the line is complete, and a LF
                        // opening the next chunk belongs to it.
                        self.skip_lf = true;
                        1
                    }
                }
            } else {
                1
            };
            self.cursor = line_end + term_len;
            if line_end == line_start {
                self.dispatch(out);
            } else {
                self.field(line_start, line_end);
            }
        }
    }

    /// Handles one non-blank line `buf[start..end]`.
    fn field(&mut self, start: usize, end: usize) {
        let line = &self.buf[start..end];
        if line[0] == b':' {
            return; // comment
        }
        let (name, value_start) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let mut v = start + colon + 1;
                if self.buf.get(v) == Some(&b' ') && v < end {
                    v += 1;
                }
                (&line[..colon], v)
            }
            None => (line, end),
        };
        match name {
            b"data" => self.data_lines.push((value_start, end)),
            b"event" => self.event = Some(String::from_utf8_lossy(&self.buf[value_start..end]).into_owned()),
            _ => {} // id, retry and unknown fields do not matter to a relay
        }
    }

    /// Ends the current event at a blank line.
    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let raw = self.buf.split_to(self.cursor).freeze();
        self.cursor = 0;
        let event = self.event.take();
        let data = match self.data_lines.as_slice() {
            [] => return, // no data: nothing to dispatch (comments, keep-alives)
            [(s, e)] => raw.slice(*s..*e),
            many => {
                let mut joined = BytesMut::with_capacity(raw.len());
                for (i, (s, e)) in many.iter().enumerate() {
                    if i > 0 {
                        joined.extend_from_slice(b"\n");
                    }
                    joined.extend_from_slice(&raw[*s..*e]);
                }
                joined.freeze()
            }
        };
        self.data_lines.clear();
        out.push(SseEvent { raw, data, event });
    }

    /// Bytes received but not yet part of a dispatched event.
    #[cfg(any(test, feature = "testing"))]
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn one_event_per_blank_line_with_raw_bytes_kept() {
        let ev = parse_all(&[b"data: {\"a\":1}\n\ndata: [DONE]\n\n"]);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].data.as_ref(), b"{\"a\":1}");
        assert_eq!(ev[0].raw.as_ref(), b"data: {\"a\":1}\n\n");
        assert!(ev[1].is_done());
    }

    #[test]
    fn line_endings_comments_and_multiline_data() {
        let rows: &[(&[&[u8]], &[&str])] = &[
            // why: CRLF is a line end
            (&[b"data: x\r\n\r\n"], &["x"]),
            // why: a lone CR is a line end too
            (&[b"data: x\r\r"], &["x"]),
            // why: a CRLF split across chunks counts once, not as a blank line
            (&[b"data: x\r", b"\ndata: y\r\n\r\n"], &["x\ny"]),
            // why: comments (llama-server's ":" ping) dispatch nothing
            (&[b":\n\n: hi\ndata: z\n\n"], &["z"]),
            // why: no space after the colon is allowed, and only one is dropped
            (&[b"data:a\ndata:  b\n\n"], &["a\n b"]),
            // why: a field without a colon is a name with an empty value
            (&[b"data\n\n"], &[""]),
            // why: an event without a terminating blank line is not dispatched
            (&[b"data: partial\n"], &[]),
        ];
        for (i, (chunks, want)) in rows.iter().enumerate() {
            let got: Vec<String> = parse_all(chunks)
                .iter()
                .map(|e| String::from_utf8(e.data.to_vec()).unwrap())
                .collect();
            assert_eq!(got, *want, "row {i}");
        }
    }

    #[test]
    fn error_events_are_recognised() {
        let ev = parse_all(&[b"data: {\"error\":{\"code\":500}}\n\nevent: error\ndata: {}\n\n"]);
        assert!(ev[0].is_error());
        assert!(ev[1].is_error());
    }
}
