//! The memory brake's law (placeholder view until the brake lands).

use serde::Serialize;

/// The brake's state as status shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BrakeView {
    /// Whether the brake samples at all.
    pub enabled: bool,
    /// Why it is off, when it is.
    pub off_reason: Option<String>,
}
