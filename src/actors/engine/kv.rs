//! Carrying out `law::kv_save`: every slot of the live llama-server child
//! that holds a conversation is saved before the warden stops that child
//! for its own reasons (idle reap, brake respawn or unload, manual unload,
//! a model swap); a slot's conversation is saved before another
//! conversation's turn takes that slot, or before it is cleared to make
//! room in the shared KV pool (`law::slots`); a conversation's save is
//! restored into the slot its next turn takes when that slot does not
//! hold it, so llama-server's prompt cache reuses it and only the new
//! message is processed. The order of those steps, and what the slot
//! table holds after each, is the slots' protocol (`moves`, no I/O); the
//! KV controller (`Kv`) carries its steps out (`carry`) and alone owns
//! the store and its view; the core calls it inside the atomic handlers.
//!
//! Never a failed turn because of the cache: a save or restore that fails,
//! times out (`SLOT_IO_TIMEOUT_S`) or does not fit is logged and the turn
//! or the stop goes on as if there were none. The brake's memory
//! accounting is untouched: a save costs disk, not RAM (the restored KV
//! lives in the window the child already allocated).
//!
//! A model whose saved cache cannot be used again (`law::kv_keep`:
//! recurrent or hybrid memory) is neither saved nor restored; `kv_check`
//! says so and judges every restore by the next turn's timings.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::child_holder::LiveChild;
use super::moves::{Dropped, Found, Moves, Outcome, Restore, Step};
use super::slots::SlotHeld;
use crate::config::WardenConfig;
use crate::engines::Backend;
use crate::kv_store::{self, KvStore, SaveRecord};
use crate::law::kv_keep::{self, Keep};
use crate::law::kv_save::SLOT_IO_TIMEOUT_S;
use crate::status::WardenEvent;

/// The KV store's view, shared by every resident's engine and the warden.
pub type SharedStoreView = std::sync::Arc<std::sync::RwLock<Option<crate::kv_store::StoreView>>>;

/// One model's pool as the KV controller measures and compacts it.
#[derive(Debug, Clone)]
pub struct PoolMeter {
    /// Its child's rates as shown so far.
    pub meter: crate::law::compact_meter::Meter,
    /// Conversations the law moved to disk.
    pub moved: u64,
    /// Cells those held.
    pub moved_cells: u64,
    /// Conversations whose cells left their slot without their save
    /// written (the write failed and the cells had to go).
    pub unsaved: u64,
    /// Saves removed because they no longer fit the window or the child
    /// refused them (their conversations re-read).
    pub dropped: u64,
}

/// Why a slot action did not happen. The two are kept apart because they
/// mean opposite things for the file: a refusal is the child's word that
/// the file is of no use (it goes), while an unanswered call says nothing
/// about the file (it stays, for the next restore).
#[derive(Debug)]
enum SlotFailure {
    /// The child answered with an error.
    Refused(String),
    /// No answer: transport, or `SLOT_IO_TIMEOUT_S`.
    Unanswered(String),
}

impl std::fmt::Display for SlotFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(m) => write!(f, "refused: {m}"),
            Self::Unanswered(m) => write!(f, "unanswered: {m}"),
        }
    }
}


/// The KV controller: the store (`None` when saves are off or the engine's
/// child has no slot files, mlx_vlm.server) and the view of it the status
/// shows, which nothing else writes; and what keeps the shared pool
/// compact (`compact`): the rates each model's child has shown and what
/// the law moved to disk.
#[derive(Debug)]
pub struct Kv {
    store: Option<KvStore>,
    /// Per model: its rates as measured, and what compaction moved.
    pub(super) pools: std::collections::HashMap<String, PoolMeter>,
    /// The store as status shows it, refreshed after each change of the
    /// store (not derived at each publish: reading it is a directory scan
    /// and a JSON parse per save, and every handler publishes). One cell
    /// for every resident's engine: they share the store's directory, and
    /// the warden's status reads the cell, not a snapshot that may predate
    /// another engine's save.
    view: SharedStoreView,
}

impl Kv {
    /// The store for this engine, publishing its view in `view`.
    pub(crate) fn open(cfg: &WardenConfig, backend: &Backend, view: SharedStoreView) -> Self {
        let kv = Self {
            store: open_store(cfg, backend),
            pools: Default::default(),
            view,
        };
        kv.refresh();
        kv
    }

    /// Whether conversations are saved at all.
    pub(crate) fn is_on(&self) -> bool {
        self.store.is_some()
    }

    /// Where the child writes and reads its slot files, when saves are on.
    pub(crate) fn dir(&self) -> Option<&std::path::Path> {
        self.store.as_ref().map(KvStore::dir)
    }

    /// The store's view as status shows it.
    pub(crate) fn view(&self) -> Option<crate::kv_store::StoreView> {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the store's view into the shared cell (after a change of the
    /// store; `None` without one).
    fn refresh(&self) {
        let view = self.store.as_ref().map(|s| s.view());
        // A poisoned cell still holds a view; this write replaces it.
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = view;
    }

    /// The slots' protocol for `child` (`moves`), on this store.
    pub(crate) fn moves(&self, child: &LiveChild) -> Moves {
        Moves::new(self.is_on(), kept(child), child.allocated)
    }

    /// Saves every slot of `child` that holds a conversation (the child is
    /// about to stop); `why` names the interruption in the log.
    pub(crate) async fn save_all(&mut self, child: &mut LiveChild, why: &'static str) {
        let moves = self.moves(child).stop_all(child.slots.len(), why);
        self.carry(child, moves).await;
    }

    /// Carries `moves` out on `child`: each step the machine asks, against
    /// the child's slot actions and the store, its outcome handed back.
    /// What the pool's law moved, as events to publish.
    pub(crate) async fn carry(&mut self, child: &mut LiveChild, mut moves: Moves) -> Vec<WardenEvent> {
        let mut said = Vec::new();
        while let Some(step) = moves.next(&mut child.slots) {
            let outcome = match step {
                Step::Confirm { conversation, why } => {
                    let held = self.holds(child, &conversation);
                    if held {
                        tracing::debug!(
                            conversation = %conversation,
                            "kv: the conversation's cache was saved ahead; nothing to write before the {}",
                            why.says()
                        );
                    }
                    Outcome::Confirmed(held)
                }
                Step::Write { slot, held, why } => {
                    let kept = self.write(child, slot, held, why.says()).await;
                    self.refresh();
                    Outcome::Written(kept)
                }
                Step::Erase { slot } => Outcome::Erased(erase(child, slot).await),
                Step::Find { conversation } => {
                    let found = self.find(child, &conversation);
                    // A truncated save found is removed on the way.
                    self.refresh();
                    Outcome::Found(found)
                }
                Step::Restore { slot, conversation } => Outcome::Restored(self.restore(child, slot, &conversation).await),
                Step::Drop { conversation, why } => {
                    self.drop_save(child, &conversation, why);
                    Outcome::Said
                }
                Step::Moved { slot, held, weighed } => {
                    said.push(self.moved(child, slot, held, weighed));
                    Outcome::Said
                }
                Step::Unsaved { slot, held, why } => {
                    tracing::warn!(
                        slot,
                        conversation = %held.conversation,
                        cells = held.tokens,
                        "kv: the conversation's {} cells left its slot for the {} without their save; what its last save, if any, did not hold will be re-read",
                        held.tokens,
                        why.says()
                    );
                    self.pool(child).unsaved += 1;
                    Outcome::Said
                }
            };
            moves.took(&mut child.slots, outcome);
        }
        said
    }

    /// Whether the store holds `conversation`'s save for `child`'s model.
    fn holds(&self, child: &LiveChild, conversation: &str) -> bool {
        let Some(store) = self.store.as_ref() else {
            return false;
        };
        save_name(child, conversation).is_some_and(|(name, _)| store.find(&name).is_some())
    }

    /// Writes `held`, the conversation of `child`'s slot `slot`, to the
    /// store.
    async fn write(&mut self, child: &LiveChild, slot: usize, held: SlotHeld, why: &'static str) -> bool {
        let Some(store) = self.store.as_ref() else {
            return false;
        };
        let SlotHeld {
            conversation,
            answer_tokens,
            ..
        } = held;
        let Some((name, identity)) = save_name(child, &conversation) else {
            return false;
        };
        let (model, model_path) = (child.model_id().to_string(), child.plan.entry.path.clone());
        let held_conversation = conversation.clone();
        match slot_action(child, slot, SlotAction::Save, Some(&KvStore::temp_file(&name))).await {
            Ok(v) => {
                let n_saved = v["n_saved"].as_u64().unwrap_or(0) as u32;
                let ms = v["timings"]["save_ms"].as_f64().unwrap_or(0.0);
                let record = SaveRecord {
                    name: name.clone(),
                    model,
                    model_path,
                    model_identity: identity,
                    conversation,
                    tokens: n_saved,
                    answer_tokens,
                    bytes: 0,
                    saved_at_ms: 0,
                };
                match store.commit(record) {
                    Ok(r) => {
                        tracing::info!(
                            tokens = r.tokens,
                            bytes = r.bytes,
                            ms,
                            "kv: saved the conversation's cache before the {why}"
                        );
                        self.meter(child).saved(n_saved, ms);
                        true
                    }
                    Err(e) => {
                        tracing::warn!("kv: the save before the {why} could not be kept ({e})");
                        store.remove(&name);
                        false
                    }
                }
            }
            Err(e) => {
                // Only the unfinished file goes: an earlier complete save of
                // this conversation is still a prefix of it, and restores.
                tracing::warn!(
                    conversation = %held_conversation,
                    "kv: the save before the {why} failed ({e}); what it held past the conversation's earlier save, if any, will be re-read"
                );
                store.remove_temp(&name);
                false
            }
        }
    }

    /// What the store holds of `conversation`'s save for `child`'s model
    /// (a truncated one is removed on the way, `KvStore::find`). `moves`
    /// asks none of a child that cannot use it (`kept`): a recurrent
    /// model's save from an older warden, or a sliding model the plan gave
    /// the small cache this time, stays for a child that can, and the
    /// store's cap ages it out otherwise.
    fn find(&self, child: &LiveChild, conversation: &str) -> Option<Found> {
        let store = self.store.as_ref()?;
        let (name, _) = save_name(child, conversation)?;
        let r = store.find(&name)?;
        Some(Found {
            tokens: r.tokens,
            answer_tokens: r.answer_tokens,
        })
    }

    /// Reads `conversation`'s save into `child`'s slot `slot`.
    async fn restore(&mut self, child: &LiveChild, slot: usize, conversation: &str) -> Restore {
        let Some((name, _)) = save_name(child, conversation) else {
            return Restore::Unanswered;
        };
        match slot_action(child, slot, SlotAction::Restore, Some(&KvStore::data_file(&name))).await {
            Ok(v) => {
                let n = v["n_restored"].as_u64().unwrap_or(0) as u32;
                let ms = v["timings"]["restore_ms"].as_f64().unwrap_or(0.0);
                tracing::info!(tokens = n, ms, "kv: restored the conversation's cache");
                self.meter(child).restored(n, ms);
                Restore::Done { tokens: n }
            }
            Err(SlotFailure::Refused(e)) => {
                tracing::warn!(
                    conversation,
                    "kv: the saved cache of conversation {conversation:?} was refused by the model server ({e}); it is removed and the conversation re-read"
                );
                Restore::Refused
            }
            Err(e @ SlotFailure::Unanswered(_)) => {
                tracing::warn!(
                    conversation,
                    "kv: the saved cache of conversation {conversation:?} could not be restored ({e}); this turn re-reads the conversation and the save stays for the next one"
                );
                Restore::Unanswered
            }
        }
    }

    /// Removes `conversation`'s save for `why` (`moves` decided it): said
    /// and counted.
    fn drop_save(&mut self, child: &LiveChild, conversation: &str, why: Dropped) {
        if let Dropped::DoesNotFit { tokens, window } = why {
            tracing::warn!(
                conversation,
                saved_tokens = tokens,
                window,
                "kv: the saved cache of conversation {conversation:?} ({tokens} tokens) does not fit the window of {} any more; it is dropped and the conversation re-read",
                window.unwrap_or(0)
            );
        }
        if let (Some(store), Some((name, _))) = (self.store.as_ref(), save_name(child, conversation)) {
            store.remove(&name);
        }
        self.pool(child).dropped += 1;
        self.refresh();
    }
}

/// The store for this engine, `None` when saves are off or the engine's
/// child has no slot files (mlx_vlm.server).
fn open_store(cfg: &WardenConfig, backend: &Backend) -> Option<KvStore> {
    if !cfg.kv_save || !backend.slot_files() {
        return None;
    }
    let dir = cfg
        .kv_save_dir
        .clone()
        .unwrap_or_else(|| cfg.cache_dir.join("kv-saves"));
    match KvStore::open(&dir, cfg.kv_save_max_bytes) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(
                "kv: cannot open the store at {} ({e}); conversations are not kept across reloads",
                dir.display()
            );
            None
        }
    }
}

/// What llama-server's `/slots/N?action=` does to a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotAction {
    /// Writes its cells to a file in `--slot-save-path`.
    Save,
    /// Reads a file's cells into it.
    Restore,
    /// Frees its cells (`seq_rm`: the allocator's head moves down to the
    /// lowest cell freed, so the next cells placed land there).
    Erase,
}

impl SlotAction {
    fn as_str(self) -> &'static str {
        match self {
            Self::Save => "save",
            Self::Restore => "restore",
            Self::Erase => "erase",
        }
    }
}

/// Clears `child`'s slot `slot` (its conversation saved first, or not
/// worth keeping; `moves` writes the table). One that fails is said: the
/// pool then holds more than the law counted. Whether it was cleared.
async fn erase(child: &LiveChild, slot: usize) -> bool {
    match slot_action(child, slot, SlotAction::Erase, None).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(slot, "kv: slot {slot} could not be cleared ({e}); the next turns may find the pool fuller than counted");
            false
        }
    }
}

/// One slot action on slot `slot` of `child`, bounded; its JSON answer.
/// Sent as a turn is (`send_retrying`): a pooled connection the child had
/// just closed is tried once more on a fresh one, so a save or a restore
/// is never lost to the connection it happened to get.
async fn slot_action(child: &LiveChild, slot: usize, action: SlotAction, file: Option<&str>) -> Result<Value, SlotFailure> {
    let action = action.as_str();
    let body = Bytes::from(file.map_or_else(|| "{}".to_string(), |f| json!({ "filename": f }).to_string()));
    let unanswered = |e: reqwest::Error| SlotFailure::Unanswered(e.without_url().to_string());
    let send = async {
        let r = child
            .client
            .send_retrying(&format!("/slots/{slot}?action={action}"), body, false)
            .await
            .map_err(unanswered)?;
        let status = r.status();
        let v: Value = r.json().await.map_err(unanswered)?;
        if status.is_success() {
            Ok(v)
        } else {
            Err(SlotFailure::Refused(
                v["error"]["message"].as_str().unwrap_or("refused").to_string(),
            ))
        }
    };
    tokio::time::timeout(Duration::from_secs(SLOT_IO_TIMEOUT_S), send)
        .await
        .map_err(|_| SlotFailure::Unanswered(format!("no answer within {SLOT_IO_TIMEOUT_S} s")))?
}

/// The store's name for `conversation` on `child`'s model.
fn save_name(child: &LiveChild, conversation: &str) -> Option<(String, String)> {
    let identity = kv_store::model_identity(&child.plan.entry.path)?;
    Some((KvStore::name(&identity, conversation), identity))
}

/// How `child`'s model keeps its cache (`law::kv_keep`).
pub(crate) fn keep(child: &LiveChild) -> Keep {
    kv_keep::keep_at(child.plan.facts.as_deref(), child.plan.swa)
}

/// Whether `child`'s saves can be used again.
pub(super) fn kept(child: &LiveChild) -> bool {
    !matches!(keep(child), Keep::Not(_))
}
