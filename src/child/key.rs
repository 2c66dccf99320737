//! The per-spawn API key: 256 bits from the OS RNG, minted for every child,
//! handed over in the child's environment (never argv, so `ps` cannot show
//! it), and impossible to print by accident: it has no `Display`, and its
//! `Debug` is redacted.

/// A child's bearer token.
#[derive(Clone, PartialEq, Eq)]
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
}
