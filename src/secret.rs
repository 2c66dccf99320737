//! The crate's secret type: the per-spawn API key (256 bits from the OS RNG,
//! minted for every child, handed over in the child's environment, never
//! argv, so `ps` cannot show it), the warden's own `WARDEN_API_KEY` and the
//! RPC workers' key. Impossible to print by accident: it has no `Display`,
//! and its `Debug` is redacted. Compared in constant time (`subtle`), so a
//! client guessing a key learns nothing from how long a refusal takes.

use subtle::ConstantTimeEq;

/// A bearer token.
#[derive(Clone)]
pub struct ApiKey(String);

/// Key length in bytes: 256 bits.
const KEY_BYTES: usize = 32;

impl ApiKey {
    /// A fresh random key.
    pub fn mint() -> Self {
        let mut bytes = [0u8; KEY_BYTES];
        // The OS RNG failing means the platform cannot give randomness at all;
        // there is no safe fallback for a secret, so refuse loudly.
        getrandom::fill(&mut bytes).expect("the OS random number generator is unavailable");
        Self(hex::encode(bytes))
    }

    /// A key given from outside (the RPC worker's `WARDEN_WORKER_KEY` or its
    /// key file), wrapped so it prints as redacted like a minted one.
    pub fn from_secret(secret: String) -> Self {
        Self(secret)
    }

    /// The secret itself, for the places that must send or keep it: the
    /// child's environment, the `Authorization` header, the RPC worker's key
    /// file.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `Bearer <key>`.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Whether `presented` is this key, in time independent of where the two
    /// differ (only a length mismatch returns early, and the length of a key
    /// is no secret worth guarding).
    pub fn matches(&self, presented: &str) -> bool {
        self.0.as_bytes().ct_eq(presented.as_bytes()).into()
    }
}

/// Constant-time too: no comparison of two keys may leak where they differ.
impl PartialEq for ApiKey {
    fn eq(&self, other: &Self) -> bool {
        self.matches(&other.0)
    }
}

impl Eq for ApiKey {}

/// A key written into a configuration by hand (an embedder, a test).
impl From<&str> for ApiKey {
    fn from(secret: &str) -> Self {
        Self(secret.to_string())
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_256_bit_unique_and_redacted() {
        let a = ApiKey::mint();
        let b = ApiKey::mint();
        assert_eq!(a.expose().len(), 64);
        assert_ne!(a, b);
        assert!(!format!("{a:?}").contains(a.expose()));
    }

    /// A key matches itself only: not a prefix, not an extension, not empty.
    #[test]
    fn matches_only_the_whole_key() {
        let k = ApiKey::from("sesame");
        let rows = [
            ("sesame", true),
            ("sesam", false),
            ("sesame!", false),
            ("", false),
            ("Sesame", false),
        ];
        for (i, (given, want)) in rows.into_iter().enumerate() {
            assert_eq!(k.matches(given), want, "row {i}: {given:?}");
        }
    }
}
