//! A conversation's identity, and every name the warden derives from it
//! that must not change between builds: the key of a conversation whose
//! client names none (a hash of its opening), the KV store's file names,
//! Ollama's model digests. The hash is FNV-1a over 64 bits (a published
//! algorithm: offset basis `0xcbf29ce484222325`, prime `0x100000001b3`),
//! written here so that no library's choice can change it: the key names
//! saved files on disk, and a key that changed between two builds would
//! orphan every save made before (`std`'s `DefaultHasher`, used here until
//! December 2026, is free to change its algorithm in any Rust release).
//!
//! What became of the saves made under the old keys: a conversation that
//! named itself (`X-Warden-Conversation`) keeps its key and its saves; one
//! keyed by its opening gets a new key once, so its old save is never read
//! again and leaves the store under its byte cap (`WARDEN_KV_SAVE_MAX_GB`:
//! the oldest goes first), as any save nobody returns to.

use serde_json::Value;

/// FNV-1a over `parts`, each followed by the byte `0xff` (no UTF-8 text
/// holds it), so that `["ab", "c"]` and `["a", "bc"]` differ.
pub fn fnv1a64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The messages of `messages` up to and including the first whose role is
/// `user` (a conversation's opening: what every later turn of the same
/// conversation repeats, its system prompt and first question).
pub fn opening(messages: &[Value]) -> impl Iterator<Item = &Value> {
    let end = messages
        .iter()
        .position(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map_or(messages.len(), |i| i + 1);
    messages[..end].iter()
}

/// The key of a conversation that names none: the hash of its opening's
/// JSON, as 16 hex digits.
pub fn key<'a>(opening: impl IntoIterator<Item = &'a Value>) -> String {
    let texts: Vec<String> = opening.into_iter().map(Value::to_string).collect();
    let parts: Vec<&str> = texts.iter().map(String::as_str).collect();
    format!("{:016x}", fnv1a64(&parts))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The published FNV-1a 64 vectors (one part, without the separator,
    /// is the plain hash; so these pin the algorithm itself), and the
    /// separator's effect.
    #[test]
    fn the_hash_is_fnv1a_and_cannot_drift() {
        fn plain(s: &str) -> u64 {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in s.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            h
        }
        for (text, want) in [
            ("", 0xcbf2_9ce4_8422_2325_u64),
            ("a", 0xaf63_dc4c_8601_ec8c),
            ("foobar", 0x8594_4171_f739_67e8),
        ] {
            assert_eq!(plain(text), want, "{text:?}");
        }
        assert_ne!(fnv1a64(&["ab", "c"]), fnv1a64(&["a", "bc"]));
        assert_ne!(fnv1a64(&["a"]), fnv1a64(&["a", ""]));
        // Computed apart (Python, the same bytes): a change here orphans
        // every save on disk.
        assert_eq!(fnv1a64(&["model-1", "conversation"]), 0x49c1_f3b8_c2df_f927);
    }

    /// The key covers the opening and nothing after it: a later turn of
    /// the same conversation has the same key, another opening another.
    #[test]
    fn the_key_is_the_opening_s() {
        let first = [json!({"role": "system", "content": "s"}), json!({"role": "user", "content": "hi"})];
        let mut later = first.to_vec();
        later.push(json!({"role": "assistant", "content": "hello"}));
        later.push(json!({"role": "user", "content": "more"}));
        assert_eq!(key(opening(&first)), key(opening(&later)));
        let other = [json!({"role": "system", "content": "s"}), json!({"role": "user", "content": "bye"})];
        assert_ne!(key(opening(&first)), key(opening(&other)));
        assert_eq!(opening(&later).count(), 2);
        assert_eq!(key(opening(&first)).len(), 16);
    }
}
