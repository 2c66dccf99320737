//! Closed sets of names: outcomes, reasons and actions the warden says in
//! its log, its events, its status and its metrics' labels. Each is an enum
//! whose variants have one spelling (`as_str`, `Display`, and serde's
//! string), so a name cannot drift between the four, and a new variant is
//! spelled once.

/// Declares an enum of names: `Variant => "spelling"`.
macro_rules! named {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $v),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v),+];

            /// The one spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$v => $s),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        // A name compares equal to its spelling (tests and readers of the
        // wire compare with the word they see).
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}
pub(crate) use named;

named! {
    /// What a memory brake sample did (the spec's `action=` word).
    BrakeDid {
        /// llama.cpp: a smaller window, the child respawned.
        ShrinkRespawn => "shrink+respawn",
        /// llama.cpp: a shrink waits for the turn's end.
        ShrinkDeferred => "shrink-deferred",
        /// llama.cpp: a larger window, the child respawned.
        GrowRespawn => "grow+respawn",
        /// The unload is armed: the next critical idle sample unloads.
        ArmUnload => "arm-unload",
        /// The child was unloaded.
        Unload => "unload",
        /// MLX: the prefix cache was released.
        Release => "release",
        /// MLX: a smaller bound.
        Shrink => "shrink",
        /// MLX: a larger bound.
        Grow => "grow",
        /// A respawn that did not come up: the model reloads at the next
        /// message.
        RespawnFailed => "respawn-failed",
        /// Several residents: an idle one was evicted instead of shrinking
        /// the one in use (`law::residents::brake_over`).
        Evict => "evict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each spelling names one variant, and serde writes the same spelling.
    #[test]
    fn every_spelling_is_unique_and_serialized_as_said() {
        let mut seen = std::collections::HashSet::new();
        for d in BrakeDid::ALL {
            assert!(seen.insert(d.as_str()), "{d:?} repeats a spelling");
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str(), "{d:?}");
            assert_eq!(d.to_string(), d.as_str(), "{d:?}");
        }
    }
}
