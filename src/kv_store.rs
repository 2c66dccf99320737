//! The on-disk store of saved KV caches (`law::kv_save`): one file per
//! (model, conversation), written by llama-server itself into the directory
//! it was given as `--slot-save-path`, beside a small JSON record of what it
//! holds. Under `<cache>/kv-saves` by default, the directory 0700 and every
//! file 0600 (a KV cache is the conversation, readable as such).
//!
//! A save is written under a temporary name and renamed once llama-server
//! answered, so an abandoned or interrupted save never looks complete; a
//! file whose size differs from its record (truncated) is refused before it
//! reaches the child. The key holds the model file's size and modification
//! time, so a replaced model never meets an old cache; records of a model
//! file that changed or vanished are removed when the store opens. The cap
//! is enforced after every save, oldest first. Several wardens may share
//! the directory: a file another one removed is simply not there.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::law::kv_save;

pub use crate::status::{SaveRecord, StoreView};

/// The store.
#[derive(Debug, Clone)]
pub struct KvStore {
    dir: PathBuf,
    cap: u64,
}

/// A model file's identity: its size and modification time.
pub fn model_identity(path: &Path) -> Option<String> {
    let m = std::fs::metadata(path).ok()?;
    let mtime = m.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos();
    Some(format!("{}-{mtime}", m.len()))
}


fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(unix)]
fn private(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

#[cfg(not(unix))]
fn private(_: &Path, _: u32) {}

/// The free bytes of the disk holding `dir`.
#[cfg(unix)]
fn free_disk(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs only writes the struct we pass, for a valid C path.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut s) == 0).then(|| s.f_bavail as u64 * s.f_frsize as u64)
    }
}

#[cfg(not(unix))]
fn free_disk(_: &Path) -> Option<u64> {
    None
}

impl KvStore {
    /// Opens (creating) the store in `dir`; `cap` in bytes, else the
    /// default share of the free disk. Drops records of changed models.
    pub fn open(dir: &Path, cap: Option<u64>) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        private(dir, 0o700);
        let store = Self {
            dir: dir.to_path_buf(),
            cap: cap.unwrap_or_else(|| kv_save::default_cap(free_disk(dir))),
        };
        for r in store.records() {
            if model_identity(&r.model_path).as_deref() != Some(r.model_identity.as_str()) {
                tracing::info!(
                    model = r.model,
                    "kv: the model file changed or is gone; its saved cache is removed"
                );
                store.remove(&r.name);
            }
        }
        Ok(store)
    }

    /// The directory llama-server writes into.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The save's stem for a model identity and a conversation.
    pub fn name(model_identity: &str, conversation: &str) -> String {
        format!(
            "kv-{:016x}",
            crate::law::conversation::fnv1a64(&[model_identity, conversation])
        )
    }

    /// The file name llama-server writes a save in progress to.
    pub fn temp_file(name: &str) -> String {
        format!("{name}.tmp")
    }

    /// The file name of a complete save.
    pub fn data_file(name: &str) -> String {
        format!("{name}.bin")
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The complete save for `name`, if its file is whole.
    pub fn find(&self, name: &str) -> Option<SaveRecord> {
        let text = std::fs::read_to_string(self.path(&format!("{name}.json"))).ok()?;
        let r: SaveRecord = serde_json::from_str(&text).ok()?;
        let len = std::fs::metadata(self.path(&Self::data_file(name))).ok()?.len();
        if len != r.bytes {
            tracing::warn!(
                name,
                expected = r.bytes,
                found = len,
                "kv: a saved cache is truncated; it is removed"
            );
            self.remove(name);
            return None;
        }
        Some(r)
    }

    /// Makes a finished save (written to `temp_file(name)`) the complete
    /// one, records it and enforces the cap; the record on success.
    pub fn commit(&self, mut r: SaveRecord) -> std::io::Result<SaveRecord> {
        let tmp = self.path(&Self::temp_file(&r.name));
        let bin = self.path(&Self::data_file(&r.name));
        private(&tmp, 0o600);
        r.bytes = std::fs::metadata(&tmp)?.len();
        r.saved_at_ms = now_ms();
        std::fs::rename(&tmp, &bin)?;
        let meta = self.path(&format!("{}.json", r.name));
        std::fs::write(&meta, serde_json::to_vec(&r).expect("a record serializes"))?;
        private(&meta, 0o600);
        self.enforce_cap(&r.name);
        Ok(r)
    }

    /// Drops an unfinished save's file, leaving an earlier complete save of
    /// the same name as it was.
    pub fn remove_temp(&self, name: &str) {
        let _ = std::fs::remove_file(self.path(&Self::temp_file(name)));
    }

    /// Forgets a save (its files, whichever exist).
    pub fn remove(&self, name: &str) {
        for f in [Self::data_file(name), Self::temp_file(name), format!("{name}.json")] {
            let _ = std::fs::remove_file(self.path(&f));
        }
    }

    /// Every record in the directory.
    pub fn records(&self) -> Vec<SaveRecord> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "json")
                .then(|| std::fs::read_to_string(&p).ok())
                .flatten()
                .and_then(|t| serde_json::from_str(&t).ok())
        })
        .collect()
    }

    /// Evicts the oldest saves over the cap; `newest` (the save just
    /// committed) goes last whatever the wall clock says of it.
    fn enforce_cap(&self, newest: &str) {
        let records = self.records();
        let saves: Vec<_> = records
            .iter()
            .map(|r| (r.name.as_str(), r.bytes, r.saved_at_ms))
            .collect();
        for name in kv_save::evict(&saves, self.cap, newest) {
            let r = records.iter().find(|r| r.name == name);
            tracing::info!(
                name,
                conversation = r.map(|r| r.conversation.as_str()),
                tokens = r.map(|r| r.tokens),
                cap_bytes = self.cap,
                "kv: the store is over its cap; the oldest save is evicted (its conversation will be re-read)"
            );
            self.remove(name);
        }
    }

    /// The store as status shows it.
    pub fn view(&self) -> StoreView {
        let mut saves = self.records();
        saves.sort_by_key(|r| std::cmp::Reverse(r.saved_at_ms));
        StoreView {
            count: saves.len(),
            bytes: saves.iter().map(|r| r.bytes).sum(),
            cap_bytes: self.cap,
            saves,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, model_path: &Path) -> SaveRecord {
        SaveRecord {
            name: name.into(),
            model: "m".into(),
            model_path: model_path.into(),
            model_identity: model_identity(model_path).unwrap(),
            conversation: "c".into(),
            tokens: 300,
            answer_tokens: 0,
            bytes: 0,
            saved_at_ms: 0,
        }
    }

    /// A store capped at `cap` bytes beside a model file (the directory
    /// lives as long as the first value).
    fn store_with_cap(cap: u64) -> (tempfile::TempDir, PathBuf, KvStore) {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"weights").unwrap();
        let store = KvStore::open(&dir.path().join("kv"), Some(cap)).unwrap();
        (dir, model, store)
    }

    /// A finished save of `len` bytes under `name`, committed.
    fn put(store: &KvStore, model: &Path, name: &str, len: usize) -> SaveRecord {
        std::fs::write(store.dir().join(KvStore::temp_file(name)), vec![7u8; len]).unwrap();
        store.commit(record(name, model)).unwrap()
    }

    /// Dates `name`'s save at `ms` (Unix ms) in its record: two saves made
    /// within the same millisecond tie, and which is older is the test's.
    fn saved_at(store: &KvStore, name: &str, ms: u64) {
        let meta = store.path(&format!("{name}.json"));
        let mut r: SaveRecord = serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
        r.saved_at_ms = ms;
        std::fs::write(&meta, serde_json::to_vec(&r).unwrap()).unwrap();
    }

    /// A save is found whole and private, the cap evicts the oldest, a
    /// truncated file is refused and removed, and a changed model drops its saves.
    #[test]
    fn commit_find_truncate_evict_and_changed_models() {
        let (_dir, model, store) = store_with_cap(25);
        let put = |name: &str, len: usize| put(&store, &model, name, len);
        let a = put("a", 10);
        assert_eq!(store.find("a").map(|r| r.bytes), Some(10));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(store.dir().join(KvStore::data_file("a"))), 0o600);
            assert_eq!(mode(store.dir().to_path_buf()), 0o700);
        }
        // why: the cap (25) holds two of 10 bytes; a third evicts the oldest
        put("b", 10);
        saved_at(&store, "a", 1);
        saved_at(&store, "b", 2);
        put("c", 10);
        assert!(store.find("a").is_none() && store.find("b").is_some() && store.find("c").is_some());
        assert_eq!(store.view().count, 2);
        // why: a truncated file is refused and removed
        std::fs::write(store.dir().join(KvStore::data_file("b")), b"xx").unwrap();
        assert!(store.find("b").is_none());
        assert!(!store.dir().join("b.json").exists());
        // why: a changed model file drops its saves when the store opens
        std::fs::write(&model, b"other weights").unwrap();
        let reopened = KvStore::open(store.dir(), Some(25)).unwrap();
        assert_eq!(reopened.view().count, 0);
        assert_ne!(
            KvStore::name(&a.model_identity, "c"),
            KvStore::name(&a.model_identity, "d")
        );
    }

    /// A failed save leaves the conversation's earlier save whole, and a
    /// wall clock stepped back never makes the save just made the oldest.
    #[test]
    fn a_failed_save_keeps_the_earlier_one_and_a_clock_step_keeps_the_newest() {
        let (_dir, model, store) = store_with_cap(15);
        let put = |name: &str, len: usize| put(&store, &model, name, len);
        put("a", 10);
        // why: the next save of "a" was abandoned half written
        std::fs::write(store.dir().join(KvStore::temp_file("a")), b"half").unwrap();
        store.remove_temp("a");
        assert_eq!(store.find("a").map(|r| r.bytes), Some(10));
        assert!(!store.dir().join(KvStore::temp_file("a")).exists());
        // why: "a" is dated in the future (the clock then stepped back);
        // "b", made now, is the newest although its date is older
        saved_at(&store, "a", u64::MAX / 2);
        put("b", 10);
        assert!(store.find("b").is_some(), "the save just made is kept");
        assert!(store.find("a").is_none());
    }
}
