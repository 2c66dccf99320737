//! Whether the warden's saved caches are of use, told rather than assumed:
//! after the first turn on a restored slot, the child's own counts say
//! whether it reused the restore (`law::kv_keep::reuse`), and one WARNING
//! names every restore it did not use; a model whose cache is not kept
//! (`law::kv_keep::Keep::Not`) is said once per load in the log and in the
//! status (`ps`, `/warden/status`, the dashboard). The KV controller's
//! (`kv`) reading of a child, through its public face.

use super::child_holder::LiveChild;
use super::kv::Kv;
use super::counts::ChildCounts;
use crate::law::kv_keep::{self, Keep, Reuse};
use crate::status::KvKeepView;

/// After a generating turn on slot `slot` of `child`: the child's own
/// counts when it completed (`None` otherwise) become the slot's size and
/// last answer, and decide on a restore this turn was the first to use.
pub(crate) fn counted(child: &mut LiveChild, slot: usize, counts: Option<ChildCounts>) {
    let s = child.slots.get_mut(slot);
    let Some(held) = s.held.as_mut() else {
        if let Some(c) = counts {
            s.anonymous_tokens = c.slot_tokens();
        }
        return;
    };
    if let Some(c) = counts {
        held.tokens = c.slot_tokens();
        held.answer_tokens = c.predicted_n;
    }
    // The turn changed it.
    held.on_disk = false;
    let Some((restored, answer)) = held.unchecked_restore.take() else {
        return;
    };
    let Some(t) = counts else {
        tracing::debug!("kv: the turn after a restore did not complete; the restore is not judged");
        return;
    };
    let conversation = held.conversation.as_str();
    match kv_keep::reuse(restored, answer, t.cache_n) {
        Reuse::Reused => tracing::debug!(
            conversation,
            restored,
            reused = t.cache_n,
            processed = t.prompt_n,
            "kv: the restored cache was reused"
        ),
        Reuse::Missed(miss) => tracing::warn!(
            conversation,
            saved_tokens = restored,
            reread_tokens = t.prompt_n,
            reused_tokens = t.cache_n,
            reason = %miss.reason(),
            "kv: the restored cache of conversation {conversation:?} was not reused: {restored} tokens restored, {} re-read by the model server; {}",
            t.prompt_n,
            miss.reason()
        ),
    }
}

impl Kv {
    /// Once per load (`child` ready): a model whose cache is not kept,
    /// said in the log.
    pub(crate) fn say_keep(&self, c: &LiveChild) {
        let (true, Keep::Not(why)) = (self.is_on(), kv_keep::keep_at(c.plan.facts.as_deref(), c.plan.swa)) else {
            return;
        };
        tracing::warn!(
            model = %c.model_id(),
            reason = why.reason(),
            "kv: conversations on this model are not kept across reloads ({}); nothing is saved for it",
            why.reason()
        );
    }

    /// The status's word on the loaded model's cache (`None`: no model);
    /// `slot_files`: whether the engine's child saves slots at all.
    pub(crate) fn keep_view(&self, c: Option<&LiveChild>, slot_files: bool) -> Option<KvKeepView> {
        let keep = super::kv::keep(c?);
        Some(if !self.is_on() {
            let (how, reason) = if slot_files {
                ("off", "WARDEN_KV_SAVE=0")
            } else {
                ("no_slot_files", "this engine's model server saves no slots")
            };
            KvKeepView {
                kept: false,
                how,
                reason: Some(reason),
            }
        } else {
            match keep {
                Keep::Plain => KvKeepView {
                    kept: true,
                    how: "plain",
                    reason: None,
                },
                Keep::FullSwa => KvKeepView {
                    kept: true,
                    how: "swa_full",
                    reason: None,
                },
                Keep::Not(why) => KvKeepView {
                    kept: false,
                    how: why.word(),
                    reason: Some(why.reason()),
                },
            }
        })
    }
}
