//! Who owns the MLX child's prefix cache, and what a claim by a turn must do
//! about it before any I/O: reset for another conversation (or for an Arena
//! or compaction turn), with a barrier first after an abandoned turn (the
//! spec's double-push hazard). `actors::prefix_cache` carries it out.

use crate::messages::prefix::TurnKind;

/// Who owns the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Nobody: the cache is empty (a new child, or just released).
    Empty,
    /// One conversation.
    Conversation(String),
    /// Unknown: a reset or barrier failed; the next claim resets.
    Dirty,
}

/// What a claim must do, decided before any I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimPlan {
    /// Send a barrier first.
    pub barrier: bool,
    /// Reset, with this reason.
    pub reset: Option<&'static str>,
}

/// The plan for a claim by `conversation` of `kind`, given the owner.
pub fn plan_claim(owner: &Owner, abandoned: bool, conversation: &str, kind: TurnKind) -> ClaimPlan {
    let reset = match kind {
        TurnKind::Arena => Some("arena"),
        TurnKind::Compaction => Some("compaction"),
        TurnKind::Chat => match owner {
            Owner::Conversation(c) if c == conversation => None,
            Owner::Empty => None,
            _ => Some("conversation_change"),
        },
    };
    ClaimPlan {
        // A barrier only matters before a reset (the spec's double-push hazard).
        barrier: abandoned && reset.is_some(),
        reset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (owner, abandoned, conversation, kind, the plan)
    type Row<'a> = (&'a Owner, bool, &'a str, TurnKind, ClaimPlan);

    fn check(rows: &[Row]) {
        for (i, (owner, abandoned, conv, kind, want)) in rows.iter().enumerate() {
            assert_eq!(plan_claim(owner, *abandoned, conv, *kind), *want, "row {i}");
        }
    }

    /// A chat claim resets only for another (or an unknown) owner, a barrier first after an abandoned turn.
    #[test]
    fn a_chat_claim_resets_only_for_another_owner() {
        let a = Owner::Conversation("a".into());
        let rows: &[Row] = &[
            // why: the owner's own next turn: nothing to do
            (
                &a,
                false,
                "a",
                TurnKind::Chat,
                ClaimPlan {
                    barrier: false,
                    reset: None,
                },
            ),
            // why: another conversation: reset
            (
                &a,
                false,
                "b",
                TurnKind::Chat,
                ClaimPlan {
                    barrier: false,
                    reset: Some("conversation_change"),
                },
            ),
            // why: after an abandoned turn, the barrier precedes the reset
            (
                &a,
                true,
                "b",
                TurnKind::Chat,
                ClaimPlan {
                    barrier: true,
                    reset: Some("conversation_change"),
                },
            ),
            // why: an empty cache (new child) needs no reset
            (
                &Owner::Empty,
                false,
                "b",
                TurnKind::Chat,
                ClaimPlan {
                    barrier: false,
                    reset: None,
                },
            ),
            // why: a dirty owner (failed reset) is retried
            (
                &Owner::Dirty,
                false,
                "a",
                TurnKind::Chat,
                ClaimPlan {
                    barrier: false,
                    reset: Some("conversation_change"),
                },
            ),
        ];
        check(rows);
    }

    /// Arena and compaction turns always reset, even in the owner's own conversation.
    #[test]
    fn arena_and_compaction_claims_always_reset() {
        let a = Owner::Conversation("a".into());
        let rows: &[Row] = &[
            // why: Arena and compaction always reset
            (
                &a,
                false,
                "a",
                TurnKind::Arena,
                ClaimPlan {
                    barrier: false,
                    reset: Some("arena"),
                },
            ),
            (
                &a,
                false,
                "a",
                TurnKind::Compaction,
                ClaimPlan {
                    barrier: false,
                    reset: Some("compaction"),
                },
            ),
        ];
        check(rows);
    }
}
