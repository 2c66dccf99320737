//! Carrying out `law::kv_save`: slot 0 of the live llama-server child is
//! saved before the warden stops that child for its own reasons (idle
//! reap, brake respawn or unload, manual unload, a model swap) and before
//! another conversation's turn takes the slot; a conversation's save is
//! restored before its next turn on a child whose slot does not hold it,
//! so llama-server's prompt cache reuses it and only the new message is
//! processed. Part of `EngineCore`, inside the atomic handlers.
//!
//! Never a failed turn because of the cache: a save or restore that fails,
//! times out (`SLOT_IO_TIMEOUT_S`) or does not fit is logged and the turn
//! or the stop goes on as if there were none. The brake's memory
//! accounting is untouched: a save costs disk, not RAM (the restored KV
//! lives in the window the child already allocated).

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::core::EngineCore;
use crate::config::WardenConfig;
use crate::engines::Backend;
use crate::kv_store::{self, KvStore, SaveRecord};
use crate::law::kv_save::{self, SLOT_IO_TIMEOUT_S};

/// The store for this engine, `None` when saves are off or the engine's
/// child has no slot files (mlx_vlm.server).
pub(crate) fn open_store(cfg: &WardenConfig, backend: &Backend) -> Option<KvStore> {
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

impl EngineCore {
    /// One slot action on the live child, bounded; its JSON answer.
    async fn slot_action(&self, action: &str, file: &str) -> Result<Value, String> {
        let child = self.child.as_ref().ok_or("no child")?;
        let body = Bytes::from(json!({ "filename": file }).to_string());
        let send = async {
            let r = child
                .client
                .post_json(&format!("/slots/0?action={action}"), body)
                .await
                .map_err(|e| e.without_url().to_string())?;
            let status = r.status();
            let v: Value = r.json().await.map_err(|e| e.without_url().to_string())?;
            if status.is_success() {
                Ok(v)
            } else {
                Err(v["error"]["message"].as_str().unwrap_or("refused").to_string())
            }
        };
        tokio::time::timeout(Duration::from_secs(SLOT_IO_TIMEOUT_S), send)
            .await
            .map_err(|_| format!("no answer within {SLOT_IO_TIMEOUT_S} s"))?
    }

    /// The store's name for `conversation` on the live child's model.
    fn save_name(&self, conversation: &str) -> Option<(String, String)> {
        let c = self.child.as_ref()?;
        let identity = kv_store::model_identity(&c.plan.entry.path)?;
        Some((KvStore::name(&identity, conversation), identity))
    }

    /// Saves the live child's slot for the conversation it holds, when
    /// there is one worth saving; `why` names the interruption in the log.
    pub(crate) async fn save_slot(&mut self, why: &'static str) {
        let Some(store) = self.kv.clone() else { return };
        let Some(c) = self.child.as_mut() else { return };
        let Some((conversation, tokens)) = c.slot.take() else {
            return;
        };
        if !kv_save::worth_saving(tokens) {
            return;
        }
        let Some((name, identity)) = self.save_name(&conversation) else {
            return;
        };
        let c = self.child.as_ref().expect("checked above");
        let (model, model_path) = (c.model_id().to_string(), c.plan.entry.path.clone());
        match self.slot_action("save", &KvStore::temp_file(&name)).await {
            Ok(v) => {
                let record = SaveRecord {
                    name: name.clone(),
                    model,
                    model_path,
                    model_identity: identity,
                    conversation,
                    tokens: v["n_saved"].as_u64().unwrap_or(0) as u32,
                    bytes: 0,
                    saved_at_ms: 0,
                };
                match store.commit(record) {
                    Ok(r) => tracing::info!(
                        tokens = r.tokens,
                        bytes = r.bytes,
                        ms = v["timings"]["save_ms"].as_f64().unwrap_or(0.0),
                        "kv: saved the conversation's cache before the {why}"
                    ),
                    Err(e) => {
                        tracing::warn!("kv: the save before the {why} could not be kept ({e})");
                        store.remove(&name);
                    }
                }
            }
            Err(e) => {
                tracing::warn!("kv: the save before the {why} failed ({e}); the conversation will be re-read");
                store.remove(&name);
            }
        }
        self.kv_view = Some(store.view());
    }

    /// Before a generating turn: the slot changes hands to `conversation`
    /// (`None`: a turn with no conversation, a raw completion). The
    /// previous owner's KV is saved, and `conversation`'s save restored.
    pub(crate) async fn claim_slot(&mut self, conversation: Option<&str>, tokens: u32) {
        let Some(c) = self.child.as_ref() else { return };
        let owner = c.slot.as_ref().map(|(o, _)| o.as_str());
        if owner.is_some() && owner == conversation {
            self.set_slot(conversation, tokens);
            return;
        }
        if owner.is_some() {
            self.save_slot("switch to another conversation").await;
        }
        if let Some(conv) = conversation {
            self.restore_slot(conv).await;
            // A restore may have dropped a save (truncated, refused, too big).
            self.kv_view = self.kv.as_ref().map(|s| s.view());
        }
        self.set_slot(conversation, tokens);
    }

    /// The slot's size as the child counted it at the turn's end (reused,
    /// processed and generated tokens), replacing the estimate.
    pub(crate) fn slot_counted(&mut self, tokens: u32) {
        if let Some((_, t)) = self.child.as_mut().and_then(|c| c.slot.as_mut()) {
            *t = tokens;
        }
    }

    /// Records who the slot holds after this turn.
    fn set_slot(&mut self, conversation: Option<&str>, tokens: u32) {
        if let Some(c) = self.child.as_mut() {
            c.slot = conversation.map(|k| (k.to_string(), tokens));
        }
    }

    /// Restores `conversation`'s save into the live child's slot when it
    /// fits the window.
    async fn restore_slot(&mut self, conversation: &str) {
        let Some(store) = self.kv.clone() else { return };
        let Some((name, _)) = self.save_name(conversation) else {
            return;
        };
        let Some(record) = store.find(&name) else {
            return;
        };
        let window = self.child.as_ref().and_then(|c| c.allocated);
        if !kv_save::fits(record.tokens, window) {
            tracing::info!(
                tokens = record.tokens,
                window,
                "kv: the conversation's saved cache does not fit the window any more; it is dropped and the conversation re-read"
            );
            store.remove(&name);
            return;
        }
        match self.slot_action("restore", &KvStore::data_file(&name)).await {
            Ok(v) => tracing::info!(
                tokens = v["n_restored"].as_u64().unwrap_or(0),
                ms = v["timings"]["restore_ms"].as_f64().unwrap_or(0.0),
                "kv: restored the conversation's cache"
            ),
            Err(e) => {
                tracing::warn!("kv: the saved cache was refused ({e}); it is removed and the conversation re-read");
                store.remove(&name);
            }
        }
    }
}
