//! The model catalog: what `/v1/models` lists and what a request's `model`
//! names. Built once at start from a models directory (and any model path the
//! user passed), read by the HTTP layer and the engine.
//!
//! An entry is one of:
//! - a `.gguf` file (id: its name without `.gguf`);
//! - a split family `NAME-00001-of-0000N.gguf` (id: `NAME`; the other parts
//!   are not entries of their own);
//! - a directory of GGUF files (id: the directory's name; the file is chosen
//!   by `law::quant::pick`, and an `mmproj` sidecar in it is loaded with it);
//! - an MLX / Hugging Face directory (`config.json` and `*.safetensors`).
//!
//! A directory holding no model itself but model directories (such as
//! build-llama.sh's `models/mlx`) contributes those, one level down.
//! `mmproj` files are never entries. A name taken twice keeps the first entry
//! (directory order is sorted, so the choice is stable) with one WARNING.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::law::quant::{self, Candidate};

pub mod pull;
pub mod stores;

pub use stores::{Layers, Source, Unusable};

/// The format of a model, which decides the engines that can run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelFormat {
    /// A GGUF file or family: llama-server (CPU and CUDA engines).
    Gguf,
    /// A Hugging Face style directory: mlx_vlm.server (MLX engine).
    Mlx,
}

/// One model the warden can load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelEntry {
    /// The id requests name it by.
    pub id: String,
    /// Its format.
    pub format: ModelFormat,
    /// What the child is given: the GGUF file (a split family's first part),
    /// or the MLX directory.
    pub path: PathBuf,
    /// A vision projector loaded with it (`--mmproj`), when its directory has one.
    pub mmproj: Option<PathBuf>,
}

/// The models the warden knows, in a stable order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    /// Entries sorted by id.
    entries: Vec<Arc<ModelEntry>>,
    /// The id a request without `model` gets.
    default_id: Option<String>,
    /// Other names of entries (the settings file's `aliases`), to their id.
    aliases: std::collections::BTreeMap<String, String>,
    /// Where each entry from another tool's store came from (absent: the
    /// warden's own directory or a path given).
    sources: std::collections::BTreeMap<String, Source>,
    /// Store entries that cannot run, with the reason.
    unusable: Vec<Unusable>,
    /// What a store says of an entry beside its file (Ollama's layers).
    layers: std::collections::BTreeMap<String, Layers>,
    /// What the scan skipped or refused, for the log: kept, not logged
    /// here, so a reload every 2 s says only what is new (`notes`).
    notes: Vec<String>,
}

/// A split family's part: `(base, index, count)` from `BASE-00001-of-00003.gguf`.
pub fn split_part(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (base, index) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || !digits(count) {
        return None;
    }
    Some((base, index.parse().ok()?, count.parse().ok()?))
}

impl Catalog {
    /// Scans `dir` (not recursively past one level of model directories).
    /// A missing directory is an empty catalog, not an error: the user may
    /// name a model by path instead.
    pub fn scan(dir: &Path) -> Self {
        let mut cat = Self::default();
        let Ok(read) = std::fs::read_dir(dir) else {
            return cat;
        };
        let mut paths: Vec<PathBuf> = read.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            match entry_for(&path) {
                Some(entry) => cat.insert(entry),
                // A folder of model folders (build-llama.sh's `models/mlx`)
                // contributes its models, one level down.
                None if path.is_dir() => {
                    let Ok(inner) = std::fs::read_dir(&path) else { continue };
                    let mut inner: Vec<PathBuf> = inner
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.is_dir())
                        .collect();
                    inner.sort();
                    for p in inner {
                        if let Some(entry) = entry_for(&p) {
                            cat.insert(entry);
                        }
                    }
                }
                None => {}
            }
        }
        cat
    }

    /// Adds the model at `path` (a file, family part or directory) and makes
    /// it the default. Returns its id, or `None` when `path` holds no model.
    pub fn add_path(&mut self, path: &Path) -> Option<String> {
        let entry = entry_for(path)?;
        let id = entry.id.clone();
        match self.get(&id) {
            Some(existing) if existing.path != entry.path => {
                // A different file under a taken name: the path the user
                // named wins, since they asked for it explicitly.
                self.entries.retain(|e| e.id != id);
                self.insert(entry);
            }
            Some(_) => {}
            None => self.insert(entry),
        }
        self.default_id = Some(id.clone());
        Some(id)
    }

    fn insert(&mut self, entry: ModelEntry) {
        if self.get(&entry.id).is_some() {
            self.note(format!(
                "model id {:?} already taken; {} is skipped",
                entry.id,
                entry.path.display()
            ));
            return;
        }
        let pos = self.entries.partition_point(|e| e.id < entry.id);
        self.entries.insert(pos, Arc::new(entry));
    }

    /// Keeps only the models `keep` accepts (the engine's formats); a default
    /// that goes falls back to the first entry left.
    pub fn retain(&mut self, keep: impl Fn(&ModelEntry) -> bool) {
        self.entries.retain(|e| keep(e));
        if self.default_id.as_ref().is_some_and(|d| self.get(d).is_none()) {
            self.default_id = None;
        }
    }

    /// Makes `id` the default when it is in the catalog.
    pub fn set_default(&mut self, id: &str) -> bool {
        let known = self.get(id).is_some();
        if known {
            self.default_id = Some(id.to_string());
        }
        known
    }

    /// The entry named `id`, or whose alias `id` is.
    pub fn get(&self, id: &str) -> Option<Arc<ModelEntry>> {
        let id = self.aliases.get(id).map_or(id, String::as_str);
        self.entries.iter().find(|e| e.id == id).cloned()
    }

    /// Lets `alias` name the entry `id`. Refused (`false`, said once) when
    /// `id` is not in the catalog or `alias` is an entry's own id, which
    /// always names that entry.
    pub fn add_alias(&mut self, alias: &str, id: &str) -> bool {
        if self.aliases.get(alias).is_some_and(|t| t == id) {
            return true; // already so
        }
        if self.entries.iter().any(|e| e.id == alias) {
            self.note(format!(
                "the alias {alias:?} (of {id:?}) is a model's own id; it keeps naming that model"
            ));
            return false;
        }
        if self.get(id).is_none() {
            self.note(format!("the alias {alias:?} names no model: there is no {id:?}"));
            return false;
        }
        self.aliases.insert(alias.to_string(), id.to_string());
        true
    }

    /// Adds every entry of the other tools' stores (`stores`) whose id is
    /// free; one that cannot run is listed as unusable instead.
    pub fn add_stores(&mut self, stores: &stores::Stores) {
        for (entry, source, layers) in stores.entries() {
            if let Some(reason) = stores::unusable_reason(&entry) {
                self.note(format!(
                    "{:?} in {source:?}'s store cannot run ({reason}); listed, not served",
                    entry.id
                ));
                self.unusable.push(Unusable {
                    id: entry.id,
                    source,
                    path: entry.path,
                    reason,
                });
                continue;
            }
            if self.get(&entry.id).is_some() {
                self.note(format!(
                    "model id {:?} already taken; {} from {source:?}'s store is skipped",
                    entry.id,
                    entry.path.display()
                ));
                continue;
            }
            self.sources.insert(entry.id.clone(), source);
            if layers != Layers::default() {
                self.layers.insert(entry.id.clone(), layers);
            }
            self.insert(entry);
        }
    }

    /// Where the entry `id` came from.
    pub fn source_of(&self, id: &str) -> Source {
        self.sources.get(id).copied().unwrap_or_default()
    }

    /// What `id`'s store says of it beside its file (Ollama's layers).
    pub fn layers_of(&self, id: &str) -> Option<&Layers> {
        self.layers.get(id)
    }

    /// Every entry's store layers, by id.
    pub fn layers(&self) -> &std::collections::BTreeMap<String, Layers> {
        &self.layers
    }

    /// Keeps `note` for the log, once.
    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// What the scan skipped or refused (an id taken twice, an alias that
    /// names nothing, a store model that cannot run), each said once, for
    /// the log.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Store entries that cannot run, with why.
    pub fn unusable(&self) -> &[Unusable] {
        &self.unusable
    }

    /// Every alias the settings give (`config.models`), each once.
    pub fn add_aliases(&mut self, models: &std::collections::BTreeMap<String, crate::config::ModelSettings>) {
        for (id, m) in models {
            for alias in &m.aliases {
                self.add_alias(alias, id);
            }
        }
    }

    /// The aliases of the entry `id`.
    pub fn aliases_of(&self, id: &str) -> Vec<String> {
        self.aliases
            .iter()
            .filter(|(_, t)| *t == id)
            .map(|(a, _)| a.clone())
            .collect()
    }

    /// Every alias the catalog knows.
    pub fn alias_names(&self) -> impl Iterator<Item = String> + '_ {
        self.aliases.keys().cloned()
    }

    /// The default entry: the one set, else the first entry.
    pub fn default_entry(&self) -> Option<Arc<ModelEntry>> {
        match &self.default_id {
            Some(id) => self.get(id),
            None => self.entries.first().cloned(),
        }
    }

    /// The default id, if any.
    pub fn default_id(&self) -> Option<String> {
        self.default_entry().map(|e| e.id.clone())
    }

    /// Every entry, sorted by id.
    pub fn entries(&self) -> &[Arc<ModelEntry>] {
        &self.entries
    }

    /// The entries of one format.
    pub fn of_format(&self, format: ModelFormat) -> impl Iterator<Item = &Arc<ModelEntry>> {
        self.entries.iter().filter(move |e| e.format == format)
    }
}

/// The entry `path` stands for, if it is a model.
pub fn entry_for(path: &Path) -> Option<ModelEntry> {
    let name = path.file_name()?.to_str()?;
    if path.is_dir() {
        return dir_entry(path, name);
    }
    if !name.ends_with(".gguf") || quant::is_mmproj(name) {
        return None;
    }
    let id = match split_part(name) {
        Some((base, 1, _)) => base.to_string(),
        Some(_) => return None, // a later part: its family's first part stands for it
        None => name.trim_end_matches(".gguf").to_string(),
    };
    Some(ModelEntry {
        id,
        format: ModelFormat::Gguf,
        path: path.to_path_buf(),
        mmproj: None,
    })
}

/// A model directory's entry: MLX when it has config.json and safetensors,
/// else the GGUF the quant picker chooses.
fn dir_entry(dir: &Path, name: &str) -> Option<ModelEntry> {
    let files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .filter_map(|e| {
            let size = e.metadata().map(|m| m.len()).unwrap_or(0);
            Some((e.file_name().into_string().ok()?, size))
        })
        .collect();
    let has = |pred: &dyn Fn(&str) -> bool| files.iter().any(|(n, _)| pred(n));
    if has(&|n| n == "config.json") && has(&|n| n.ends_with(".safetensors")) {
        return Some(ModelEntry {
            id: name.to_string(),
            format: ModelFormat::Mlx,
            path: dir.to_path_buf(),
            mmproj: None,
        });
    }
    // Candidates: single files and first parts; a family counts its total size.
    let mut candidates: Vec<Candidate> = Vec::new();
    for (n, size) in &files {
        if !n.ends_with(".gguf") {
            continue;
        }
        match split_part(n) {
            Some((base, 1, _)) => {
                let total = files
                    .iter()
                    .filter(|(m, _)| split_part(m).is_some_and(|(b, _, _)| b == base))
                    .map(|(_, s)| s)
                    .sum();
                candidates.push(Candidate {
                    name: n.clone(),
                    size: total,
                });
            }
            Some(_) => {}
            None => candidates.push(Candidate {
                name: n.clone(),
                size: *size,
            }),
        }
    }
    let pick = quant::pick(&candidates)?;
    let mmproj = candidates
        .iter()
        .filter(|c| quant::is_mmproj(&c.name))
        .min_by_key(|c| c.size)
        .map(|c| dir.join(&c.name));
    Some(ModelEntry {
        id: name.to_string(),
        format: ModelFormat::Gguf,
        path: dir.join(&candidates[pick].name),
        mmproj,
    })
}

#[cfg(test)]
mod alias_tests {
    use super::*;

    /// An alias names its model; it never takes another model's own id,
    /// and one naming no model is refused.
    #[test]
    fn an_alias_names_its_model_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["a.gguf", "b.gguf"] {
            std::fs::write(dir.path().join(n), b"GGUF").unwrap();
        }
        let mut cat = Catalog::scan(dir.path());
        assert!(cat.add_alias("gpt-4o-mini", "a"));
        assert_eq!(cat.get("gpt-4o-mini").map(|e| e.id.clone()), Some("a".into()));
        assert!(!cat.add_alias("b", "a"), "b is a model's own id");
        assert_eq!(cat.get("b").map(|e| e.id.clone()), Some("b".into()));
        assert!(!cat.add_alias("x", "nope"));
        assert!(cat.get("x").is_none());
        assert_eq!(cat.aliases_of("a"), ["gpt-4o-mini"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names_parse() {
        assert_eq!(split_part("big-00001-of-00003.gguf"), Some(("big", 1, 3)));
        assert_eq!(split_part("big-Q4_K_M-00002-of-00003.gguf"), Some(("big-Q4_K_M", 2, 3)));
        assert_eq!(split_part("big.gguf"), None);
        assert_eq!(split_part("big-1-of-3.gguf"), None);
    }

    #[test]
    fn scans_files_families_and_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("a.gguf"), b"x").unwrap();
        std::fs::write(d.join("mmproj-a.gguf"), b"x").unwrap();
        std::fs::write(d.join("fam-00001-of-00002.gguf"), b"x").unwrap();
        std::fs::write(d.join("fam-00002-of-00002.gguf"), b"x").unwrap();
        std::fs::write(d.join("notes.txt"), b"x").unwrap();
        std::fs::create_dir(d.join("picked")).unwrap();
        std::fs::write(d.join("picked/m-Q8_0.gguf"), b"x").unwrap();
        std::fs::write(d.join("picked/m-Q4_K_M.gguf"), b"xx").unwrap();
        std::fs::write(d.join("picked/mmproj-m-f16.gguf"), b"x").unwrap();
        std::fs::create_dir(d.join("hf")).unwrap();
        std::fs::write(d.join("hf/config.json"), b"{}").unwrap();
        std::fs::write(d.join("hf/model.safetensors"), b"x").unwrap();
        std::fs::create_dir(d.join("empty")).unwrap();
        std::fs::create_dir_all(d.join("mlx/inner-hf")).unwrap();
        std::fs::write(d.join("mlx/inner-hf/config.json"), b"{}").unwrap();
        std::fs::write(d.join("mlx/inner-hf/model.safetensors"), b"x").unwrap();
        let cat = Catalog::scan(d);
        let ids: Vec<&str> = cat.entries().iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "fam", "hf", "inner-hf", "picked"]);
        let picked = cat.get("picked").unwrap();
        assert!(picked.path.ends_with("m-Q4_K_M.gguf"));
        assert!(picked.mmproj.as_ref().unwrap().ends_with("mmproj-m-f16.gguf"));
        assert_eq!(cat.get("hf").unwrap().format, ModelFormat::Mlx);
        assert!(cat.get("fam").unwrap().path.ends_with("fam-00001-of-00002.gguf"));
    }
}
