//! The models people already have: other tools' stores, found
//! where each tool keeps them, each honouring that tool's own variable, on
//! by default when the store exists, each turned off by its
//! `WARDEN_STORE_*=0`. Read-only: the warden never writes, moves or deletes
//! a file in another tool's store.
//!
//! | source | where | id |
//! |---|---|---|
//! | Ollama | `$OLLAMA_MODELS`, else `~/.ollama/models`: `manifests/HOST/NAMESPACE/NAME/TAG` name the model blob (`application/vnd.ollama.image.model`) and its projector under `blobs/sha256-HEX` | `name:tag` (`namespace/name:tag` outside `library`, `host/...` outside `registry.ollama.ai`) |
//! | Hugging Face | `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`: `models--ORG--NAME/snapshots/REV/` (the revision `refs/main` names, else the newest), GGUF files and split families there, an `mmproj` sidecar loaded with it | `ORG/NAME` |
//! | LM Studio | `~/.lmstudio/models/PUBLISHER/MODEL/` (else the older `~/.cache/lm-studio/models`) | `PUBLISHER/MODEL` |
//! | llama.cpp | `$LLAMA_CACHE`, else `~/.cache/llama.cpp`: its downloads, one file or family each | the file's name without `.gguf` |
//!
//! An Ollama manifest's other layers are the model's own settings, under
//! the settings file's (`Layers`): its system prompt and its parameters
//! (`num_ctx` as the model's window ceiling; `temperature`, `top_p`,
//! `top_k`, `min_p`, `repeat_penalty`, `presence_penalty`,
//! `frequency_penalty`, `seed` and `stop` as sampling defaults) apply as
//! the settings file's would; its template (a Go template, which
//! llama-server cannot render) is what Ollama's `/api/show` returns, while
//! the child renders chats with the GGUF's own Jinja template.
//!
//! A store entry whose file cannot run (not GGUF, truncated, a header the
//! warden refuses) is listed as unusable with the reason, never served. An
//! id already taken (the warden's own models directory is read first)
//! keeps the first; the later one is said once.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{ModelEntry, ModelFormat};

/// Where an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The warden's models directory, or a path given to `--model`.
    #[default]
    Warden,
    /// Ollama's store.
    Ollama,
    /// The Hugging Face hub cache.
    HuggingFace,
    /// LM Studio's models directory.
    LmStudio,
    /// llama.cpp's download cache.
    LlamaCache,
}

/// A store entry that cannot run, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unusable {
    /// Its id.
    pub id: String,
    /// Its store.
    pub source: Source,
    /// Its file.
    pub path: PathBuf,
    /// Why it cannot run.
    pub reason: String,
}

/// What a store says of a model beside its file (Ollama's layers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layers {
    /// Ollama's template (Go template syntax), shown by `/api/show`.
    pub template: Option<String>,
    /// The settings the layers give: `system`, `ctx`, `sampling`.
    pub settings: crate::config::ModelSettings,
}

/// Which stores are read, and where (from the environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stores {
    /// Ollama's models directory, when read.
    pub ollama: Option<PathBuf>,
    /// The hub cache, when read.
    pub hugging_face: Option<PathBuf>,
    /// LM Studio's models directory, when read.
    pub lm_studio: Option<PathBuf>,
    /// llama.cpp's cache, when read.
    pub llama_cache: Option<PathBuf>,
}

/// The Hugging Face hub cache, by the hub's own variables: `$HF_HUB_CACHE`,
/// else `$HF_HOME/hub`, else `~/.cache/huggingface/hub` (where `pull`
/// writes, and the store reads).
pub fn hub_cache(var: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| var(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
    set("HF_HUB_CACHE")
        .or_else(|| set("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| set("HOME").map(|h| h.join(".cache/huggingface/hub")))
}

impl Stores {
    /// Where each store is, by its tool's own variables (`var`), `None`
    /// when `switches` turns it off (`WARDEN_STORE_OLLAMA=0`, `_HF`,
    /// `_LMSTUDIO`, `_LLAMA_CACHE`).
    pub fn locate(switches: &crate::config::StoreSwitches, var: impl Fn(&str) -> Option<String>) -> Self {
        let on = |k: &str| match k {
            "WARDEN_STORE_OLLAMA" => switches.ollama,
            "WARDEN_STORE_HF" => switches.hugging_face,
            "WARDEN_STORE_LMSTUDIO" => switches.lm_studio,
            _ => switches.llama_cache,
        };
        let home = var("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let set = |k: &str| var(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
        let under = |rel: &str| home.as_ref().map(|h| h.join(rel));
        Self {
            ollama: on("WARDEN_STORE_OLLAMA")
                .then(|| set("OLLAMA_MODELS").or_else(|| under(".ollama/models")))
                .flatten(),
            hugging_face: on("WARDEN_STORE_HF").then(|| hub_cache(&var)).flatten(),
            lm_studio: on("WARDEN_STORE_LMSTUDIO")
                .then(|| {
                    let new = under(".lmstudio/models");
                    match &new {
                        Some(p) if p.is_dir() => new,
                        _ => under(".cache/lm-studio/models").filter(|p| p.is_dir()).or(new),
                    }
                })
                .flatten(),
            llama_cache: on("WARDEN_STORE_LLAMA_CACHE")
                .then(|| set("LLAMA_CACHE").or_else(|| under(".cache/llama.cpp")))
                .flatten(),
        }
    }

    /// No store at all.
    pub fn none() -> Self {
        Self {
            ollama: None,
            hugging_face: None,
            lm_studio: None,
            llama_cache: None,
        }
    }

    /// Every entry of every store that exists, with its source and what
    /// its store says beside the file.
    pub fn entries(&self) -> Vec<(ModelEntry, Source, Layers)> {
        let mut out = Vec::new();
        if let Some(d) = &self.ollama {
            out.extend(ollama_layered(d).into_iter().map(|(e, l)| (e, Source::Ollama, l)));
        }
        let plain = |s: Source| move |e: ModelEntry| (e, s, Layers::default());
        if let Some(d) = &self.hugging_face {
            out.extend(hugging_face(d).into_iter().map(plain(Source::HuggingFace)));
        }
        if let Some(d) = &self.lm_studio {
            out.extend(two_levels(d).into_iter().map(plain(Source::LmStudio)));
        }
        if let Some(d) = &self.llama_cache {
            out.extend(
                super::Catalog::scan(d)
                    .entries()
                    .iter()
                    .map(|e| (**e).clone())
                    .map(plain(Source::LlamaCache)),
            );
        }
        out
    }
}

/// Sorted directory entries (an unreadable directory has none).
fn listed(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Ollama's store: every manifest under `manifests/`, four levels down
/// (host, namespace, name, tag), that names a model layer.
pub fn ollama(root: &Path) -> Vec<ModelEntry> {
    ollama_layered(root).into_iter().map(|(e, _)| e).collect()
}

/// As `ollama`, each entry with its manifest's other layers.
fn ollama_layered(root: &Path) -> Vec<(ModelEntry, Layers)> {
    let mut out = Vec::new();
    for host in listed(&root.join("manifests")) {
        for ns in listed(&host) {
            for name in listed(&ns) {
                for tag in listed(&name).into_iter().filter(|t| t.is_file()) {
                    let id = ollama_id(&host, &ns, &name, &tag);
                    if let Some(e) = ollama_entry(root, &tag, id) {
                        out.push(e);
                    }
                }
            }
        }
    }
    out
}

/// `name:tag`, with the namespace outside `library` and the host outside
/// Ollama's own registry, as Ollama's users write them.
fn ollama_id(host: &Path, ns: &Path, name: &Path, tag: &Path) -> String {
    let part = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let (host, ns, name, tag) = (part(host), part(ns), part(name), part(tag));
    let mut id = format!("{name}:{tag}");
    if ns != "library" {
        id = format!("{ns}/{id}");
    }
    if host != "registry.ollama.ai" {
        id = format!("{host}/{id}");
    }
    id
}

/// The entry a manifest names (its model blob, and its projector's), with
/// its template, system and params layers. A layer that cannot be read is
/// left out (the model still runs on its GGUF's own).
fn ollama_entry(root: &Path, manifest: &Path, id: String) -> Option<(ModelEntry, Layers)> {
    let text = std::fs::read_to_string(manifest).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let blob = |media: &str| {
        v["layers"]
            .as_array()?
            .iter()
            .find(|l| l["mediaType"] == media)
            .and_then(|l| l["digest"].as_str())
            .map(|d| root.join("blobs").join(d.replace(':', "-")))
    };
    // Layers are small text; a huge one is not a layer worth reading.
    let small = |media: &str| {
        let p = blob(media)?;
        (std::fs::metadata(&p).ok()?.len() <= LAYER_MAX_BYTES)
            .then(|| std::fs::read_to_string(p).ok())
            .flatten()
    };
    let params = small("application/vnd.ollama.image.params")
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .unwrap_or_default();
    let mut settings = ollama_params(&params);
    settings.system = small("application/vnd.ollama.image.system").filter(|s| !s.trim().is_empty());
    let entry = ModelEntry {
        id,
        format: ModelFormat::Gguf,
        path: blob("application/vnd.ollama.image.model")?,
        mmproj: blob("application/vnd.ollama.image.projector"),
    };
    let layers = Layers {
        template: small("application/vnd.ollama.image.template"),
        settings,
    };
    Some((entry, layers))
}

/// The most of a text layer read (Ollama's are a few KiB).
const LAYER_MAX_BYTES: u64 = 1 << 20;

/// The settings an Ollama params layer gives: `num_ctx` as the window
/// ceiling, the sampling knobs by the names requests use; the rest
/// (`num_predict`, `mirostat`, ...) has no warden setting and is left out.
pub fn ollama_params(p: &serde_json::Value) -> crate::config::ModelSettings {
    let f = |k: &str| p[k].as_f64();
    let u = |k: &str| p[k].as_u64();
    // Ollama writes `stop` as a list; a single string is one stop.
    let stop = match &p["stop"] {
        serde_json::Value::String(s) => Some(vec![s.clone()]),
        serde_json::Value::Array(a) => Some(a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()),
        _ => None,
    };
    crate::config::ModelSettings {
        ctx: u("num_ctx").and_then(|n| u32::try_from(n).ok()),
        sampling: crate::config::file::Sampling {
            temperature: f("temperature"),
            top_p: f("top_p"),
            top_k: u("top_k").and_then(|n| u32::try_from(n).ok()),
            min_p: f("min_p"),
            repeat_penalty: f("repeat_penalty"),
            presence_penalty: f("presence_penalty"),
            frequency_penalty: f("frequency_penalty"),
            seed: u("seed"),
            stop,
        },
        ..Default::default()
    }
}

/// The hub cache: each `models--ORG--NAME` whose chosen snapshot holds a
/// GGUF model, as `ORG/NAME`.
pub fn hugging_face(root: &Path) -> Vec<ModelEntry> {
    let mut out = Vec::new();
    for repo in listed(root) {
        let Some(name) = repo.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(rest) = name.strip_prefix("models--") else {
            continue;
        };
        let id = rest.replacen("--", "/", 1);
        let Some(snapshot) = snapshot(&repo) else { continue };
        if let Some(e) = super::entry_for(&snapshot).filter(|e| e.format == ModelFormat::Gguf) {
            out.push(ModelEntry { id, ..e });
        }
    }
    out
}

/// The snapshot `refs/main` names, else the most recently changed one.
fn snapshot(repo: &Path) -> Option<PathBuf> {
    if let Ok(rev) = std::fs::read_to_string(repo.join("refs/main")) {
        let p = repo.join("snapshots").join(rev.trim());
        if p.is_dir() {
            return Some(p);
        }
    }
    listed(&repo.join("snapshots"))
        .into_iter()
        .filter(|p| p.is_dir())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

/// `PUBLISHER/MODEL/` directories (LM Studio's layout), as `PUBLISHER/MODEL`.
pub fn two_levels(root: &Path) -> Vec<ModelEntry> {
    let mut out = Vec::new();
    for publisher in listed(root).into_iter().filter(|p| p.is_dir()) {
        for model in listed(&publisher).into_iter().filter(|p| p.is_dir()) {
            let (Some(p), Some(m)) = (publisher.file_name(), model.file_name()) else {
                continue;
            };
            let id = format!("{}/{}", p.to_string_lossy(), m.to_string_lossy());
            if let Some(e) = super::entry_for(&model).filter(|e| e.format == ModelFormat::Gguf) {
                out.push(ModelEntry { id, ..e });
            }
        }
    }
    out
}

/// Why a store entry's file cannot run (`None`: it can, as far as its
/// header tells): a header the warden refuses (not GGUF, truncated).
///
/// A verdict is kept per file (its path, length and modification time):
/// the warden reads the stores again every 2 s (`warden::reload`), and a
/// header with its tokenizer is up to a millisecond to read, so a store of
/// fifty models would otherwise cost a core a few percent for nothing. A
/// file that changes is read again.
pub fn unusable_reason(e: &ModelEntry) -> Option<String> {
    type Verdicts = std::collections::HashMap<PathBuf, (u64, Option<std::time::SystemTime>, Option<String>)>;
    static KEPT: std::sync::LazyLock<std::sync::Mutex<Verdicts>> = std::sync::LazyLock::new(Default::default);
    let meta = std::fs::metadata(&e.path).ok();
    let id = (
        meta.as_ref().map_or(0, |m| m.len()),
        meta.and_then(|m| m.modified().ok()),
    );
    // A poisoned map still holds whole verdicts.
    let kept = |k: &std::sync::Mutex<Verdicts>| k.lock().unwrap_or_else(|p| p.into_inner()).get(&e.path).cloned();
    if let Some((len, modified, reason)) = kept(&KEPT)
        && (len, modified) == id
    {
        return reason;
    }
    let reason = match crate::gguf::read_model_facts(&e.path) {
        Ok(_) => None,
        Err(err) if crate::law::header::is_fatal(&err) => Some(format!("{} ({err})", err.code())),
        Err(_) => None,
    };
    KEPT.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(e.path.clone(), (id.0, id.1, reason.clone()));
    reason
}

#[cfg(test)]
#[path = "stores_tests.rs"]
mod tests;
