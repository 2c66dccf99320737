//! Property tests of the SSE parser: any stream of events, written with any
//! line endings and comments and cut at any byte positions, parses to the
//! same events as when fed whole; arbitrary bytes never panic it. Inputs that
//! once broke it are kept under `tests/data/sse/` and replayed.

use llm_warden::sse::{SseEvent, SseParser};
use proptest::prelude::*;

/// One logical event: data lines, an optional name, comments before it.
#[derive(Debug, Clone)]
struct Ev {
    comments: Vec<String>,
    name: Option<String>,
    data: Vec<String>,
}

fn line_text() -> impl Strategy<Value = String> {
    // Any text without line terminators, multi-byte characters included.
    proptest::string::string_regex("[a-zA-Z0-9 {}\":,.é漢🙂\\[\\]]{0,40}").unwrap()
}

fn event() -> impl Strategy<Value = Ev> {
    (
        proptest::collection::vec(line_text(), 0..2),
        proptest::option::of("[a-z]{1,8}"),
        proptest::collection::vec(line_text(), 1..4),
    )
        .prop_map(|(comments, name, data)| Ev { comments, name, data })
}

fn serialize(events: &[Ev], eol: &str) -> Vec<u8> {
    let mut out = String::new();
    for e in events {
        for c in &e.comments {
            out.push_str(&format!(":{c}{eol}"));
        }
        if let Some(n) = &e.name {
            out.push_str(&format!("event: {n}{eol}"));
        }
        for d in &e.data {
            out.push_str(&format!("data: {d}{eol}"));
        }
        out.push_str(eol);
    }
    out.into_bytes()
}

fn feed(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut start = 0;
    for c in points.into_iter().chain(std::iter::once(bytes.len())) {
        p.push(&bytes[start..c], &mut out).unwrap();
        start = c;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Any chunking of any well-formed stream yields exactly its events.
    #[test]
    fn chunking_never_changes_the_events(
        events in proptest::collection::vec(event(), 1..6),
        eol in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let bytes = serialize(&events, eol);
        let got = feed(&bytes, &cuts);
        prop_assert_eq!(got.len(), events.len());
        for (g, want) in got.iter().zip(&events) {
            prop_assert_eq!(String::from_utf8(g.data.to_vec()).unwrap(), want.data.join("\n"));
            prop_assert_eq!(&g.event, &want.name);
        }
        // The raw slices, concatenated, are the whole stream: a relay that
        // writes them out reproduces the child's bytes exactly. The one
        // exception is the LF of a CRLF whose CR ended a chunk and the
        // event: the event is dispatched at the CR, and the LF opens the
        // next event's raw (or, at the very end, stays pending: the CR
        // alone already ended the event for any reader).
        let raw: Vec<u8> = got.iter().flat_map(|e| e.raw.to_vec()).collect();
        prop_assert!(bytes.starts_with(&raw));
        prop_assert!(bytes.len() - raw.len() <= 1 && bytes[raw.len()..].iter().all(|&b| b == b'\n'));
    }

    /// Arbitrary bytes, cut anywhere, never panic the parser.
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        let _ = feed(&bytes, &cuts);
    }
}

/// Every regression input replays without a panic, whole and byte by byte,
/// with the same events both ways (data and name; where a split CRLF's LF
/// lands in `raw` may differ, see above).
#[test]
fn regression_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sse");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/data/sse exists") {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let whole = feed(&bytes, &[]);
        let every: Vec<usize> = (0..bytes.len()).collect();
        let split = feed(&bytes, &every);
        let view = |v: &[SseEvent]| v.iter().map(|e| (e.data.clone(), e.event.clone())).collect::<Vec<_>>();
        assert_eq!(view(&whole), view(&split), "{}", path.display());
        n += 1;
    }
    assert!(n > 0, "the corpus is empty");
}
