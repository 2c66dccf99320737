//! The MLX child's prefix cache (one conversation's KV at a time), decided
//! in two places that each know their half:
//!
//! - `plan_claim`, by the `PrefixCacheActor`, which sees every turn in
//!   arrival order: does this turn's conversation take the cache over from
//!   its owner (another conversation, an Arena or compaction turn, an owner
//!   unknown since a failed reset)? Then a `Reset` goes ahead of the turn.
//! - `plan_reset`, by the engine, which knows its child: is there anything
//!   to reset (no child, a turn that switches models, or a cache no turn
//!   has used since its spawn, reset or release: nothing), and was the last
//!   turn abandoned (then a barrier first: a one-token request whose
//!   completion proves, with `MLX_VLM_MAX_NUM_SEQS=1`, that the cancelled
//!   request left the batch, so the reset cannot race its late release of
//!   its blocks: the spec's double-push hazard)?

/// Why a turn needs the cache reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TurnKind {
    /// A conversation's turn: reset only when the owner changes.
    #[default]
    Chat,
    /// An Arena turn: always reset (two models, one conversation each).
    Arena,
    /// A compaction turn: always reset (the history was rewritten).
    Compaction,
}

/// Who owns the cache, as the claims have gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Nobody yet: no turn has claimed it.
    Empty,
    /// One conversation.
    Conversation(String),
    /// Unknown: a reset or release failed; the next claim resets.
    Dirty,
}

/// The reset a claim by `conversation` of `kind` needs, given the owner.
pub fn plan_claim(owner: &Owner, conversation: &str, kind: TurnKind) -> Option<&'static str> {
    match kind {
        TurnKind::Arena => Some("arena"),
        TurnKind::Compaction => Some("compaction"),
        TurnKind::Chat => match owner {
            Owner::Conversation(c) if c == conversation => None,
            Owner::Empty => None,
            _ => Some("conversation_change"),
        },
    }
}

/// What the engine knows of its child's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildCache {
    /// No generating turn has used it since the child's spawn, or since
    /// the last reset or release.
    pub fresh: bool,
    /// The last turn was abandoned mid-request.
    pub abandoned: bool,
}

impl ChildCache {
    /// A new child's cache.
    pub const FRESH: Self = Self {
        fresh: true,
        abandoned: false,
    };
}

impl Default for ChildCache {
    fn default() -> Self {
        Self::FRESH
    }
}

/// What a `Reset` comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetPlan {
    /// Nothing to reset, and why.
    Skip(&'static str),
    /// Reset, after a barrier when asked.
    Reset {
        /// Send the barrier first.
        barrier: bool,
    },
}

/// The plan for a `Reset` before a turn of the model the engine runs when
/// `same_model`; `cache` is `None` without a child.
pub fn plan_reset(cache: Option<ChildCache>, same_model: bool) -> ResetPlan {
    match cache {
        None => ResetPlan::Skip("no child"),
        Some(_) if !same_model => ResetPlan::Skip("the turn starts another model"),
        Some(c) if c.fresh => ResetPlan::Skip("the cache holds no conversation"),
        Some(c) => ResetPlan::Reset { barrier: c.abandoned },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chat claim resets only for another (or an unknown) owner; Arena and
    /// compaction claims always reset.
    #[test]
    fn claim_rows() {
        let a = Owner::Conversation("a".into());
        let rows: &[(&Owner, &str, TurnKind, Option<&str>)] = &[
            // why: the owner's own next turn: nothing to do
            (&a, "a", TurnKind::Chat, None),
            // why: another conversation: reset
            (&a, "b", TurnKind::Chat, Some("conversation_change")),
            // why: the first turn ever finds nobody's KV
            (&Owner::Empty, "b", TurnKind::Chat, None),
            // why: a dirty owner (failed reset) is retried, even by the same conversation
            (&Owner::Dirty, "a", TurnKind::Chat, Some("conversation_change")),
            // why: Arena and compaction always reset, even in the owner's own conversation
            (&a, "a", TurnKind::Arena, Some("arena")),
            (&a, "a", TurnKind::Compaction, Some("compaction")),
            (&Owner::Empty, "a", TurnKind::Arena, Some("arena")),
        ];
        for (i, (owner, conv, kind, want)) in rows.iter().enumerate() {
            assert_eq!(plan_claim(owner, conv, *kind), *want, "row {i}");
        }
    }

    /// The engine resets only a used cache of the model the turn runs,
    /// with a barrier first after an abandoned turn.
    #[test]
    fn reset_rows() {
        let used = ChildCache {
            fresh: false,
            abandoned: false,
        };
        let abandoned = ChildCache {
            fresh: false,
            abandoned: true,
        };
        let rows = [
            // why: no child, nothing cached
            (None, true, ResetPlan::Skip("no child")),
            // why: a switch starts a fresh child
            (Some(used), false, ResetPlan::Skip("the turn starts another model")),
            // why: a fresh, reset or released cache holds nobody's KV
            (
                Some(ChildCache::FRESH),
                true,
                ResetPlan::Skip("the cache holds no conversation"),
            ),
            // why: a used cache is reset
            (Some(used), true, ResetPlan::Reset { barrier: false }),
            // why: after an abandoned turn, the barrier precedes the reset
            (Some(abandoned), true, ResetPlan::Reset { barrier: true }),
        ];
        for (i, (cache, same, want)) in rows.into_iter().enumerate() {
            assert_eq!(plan_reset(cache, same), want, "row {i}");
        }
    }
}
