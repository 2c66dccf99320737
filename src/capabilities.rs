//! What a catalog entry's files let a request send it: images and audio
//! (its projector's encoders), fill-in-the-middle (its FIM tokens). Read
//! from the headers once per entry and kept, so a request is checked
//! against its model before any turn or load (`Warden::submit`, on what
//! each dialect says the request needs: `law::request_chat::Needs`), and the
//! child never answers a capability it lacks with a 500.
//!
//! - GGUF: a `mmproj` projector beside the model reads images unless its
//!   header says `clip.has_vision_encoder = false`, and audio when it says
//!   `clip.has_audio_encoder = true` (llama.cpp's own reading of both keys;
//!   a projector without the keys predates audio and is a vision one). FIM
//!   is `ModelFacts::fill_in_middle`.
//! - MLX: a `config.json` with a `vision_config` reads images, with an
//!   `audio_config` audio; mlx_vlm.server has no infill route.
//! - A chat template: a generating GGUF without `tokenizer.chat_template`
//!   lacks one (`Warden::capabilities` folds in a template its settings
//!   name, and the model then serves chat).
//!
//! A header that cannot be read gives no capability beyond text: the load
//! itself reports the broken file with its own code.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::catalog::{ModelEntry, ModelFormat};
use crate::gguf::{read_header, read_model_facts};
pub use crate::law::request_chat::Capabilities;
use crate::gguf::Pooling;
use crate::law::types::ModelKind;

/// Capabilities by the entry's file, read on first use (by file, not id:
/// a reload may give an id another file).
#[derive(Debug, Default)]
pub struct CapabilityCache(Mutex<HashMap<std::path::PathBuf, Capabilities>>);

impl CapabilityCache {
    /// `entry`'s capabilities, read once.
    pub fn of(&self, entry: &Arc<ModelEntry>) -> Capabilities {
        let cached = self.lock().get(&entry.path).copied();
        cached.unwrap_or_else(|| {
            // Read outside the lock: a header read is disk I/O.
            let caps = read(entry);
            self.lock().insert(entry.path.clone(), caps);
            caps
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<std::path::PathBuf, Capabilities>> {
        // A poisoned map still holds valid entries.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reads `entry`'s capabilities from its files.
pub fn read(entry: &ModelEntry) -> Capabilities {
    match entry.format {
        ModelFormat::Gguf => {
            let (vision, audio) = entry.mmproj.as_deref().map_or((false, false), projector);
            let facts = read_model_facts(&entry.path).ok();
            let kind = ModelKind::of(facts.as_ref());
            let embeds = kind == ModelKind::Embedding;
            Capabilities {
                vision,
                audio,
                fim: facts.as_ref().is_some_and(|f| f.fill_in_middle),
                kind,
                reranks: embeds && facts.as_ref().is_some_and(|f| f.pooling == Some(Pooling::Rank)),
                // An unreadable header is not read as "no template": the
                // load reports the file.
                lacks_chat_template: !embeds && facts.as_ref().is_some_and(|f| !f.has_chat_template),
            }
        }
        ModelFormat::Mlx => {
            let config = std::fs::read(entry.path.join("config.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
            let has = |k: &str| config.as_ref().is_some_and(|c| c.get(k).is_some());
            Capabilities {
                vision: has("vision_config"),
                audio: has("audio_config"),
                ..Capabilities::default()
            }
        }
    }
}

/// A projector's (vision, audio) encoders.
fn projector(path: &Path) -> (bool, bool) {
    let Ok(h) = read_header(path) else {
        return (false, false);
    };
    let flag = |k: &str| match h.metadata.get(k) {
        Some(crate::gguf::value::Value::Bool(b)) => Some(*b),
        _ => None,
    };
    (
        flag("clip.has_vision_encoder").unwrap_or(true),
        flag("clip.has_audio_encoder").unwrap_or(false),
    )
}
