//! The worker's key, which the warden presents as `Authorization: Bearer`:
//! `WARDEN_WORKER_KEY` when set, else the one in `<cache>/worker.key`,
//! minted there (mode 0600) on the first start and reused after, so a
//! restarted worker keeps the key its warden was given. Only the file's
//! path is ever logged; `ApiKey` cannot print the key.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::secret::ApiKey;

/// The key file's name in the cache directory.
pub const KEY_FILE: &str = "worker.key";

/// Where the key came from, for the start-up log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `WARDEN_WORKER_KEY`.
    Env,
    /// This file, minted now.
    Minted(PathBuf),
    /// This file, written by an earlier start.
    File(PathBuf),
}

/// Why the key could not be had (the messages name the file, never the key).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("could not create the worker key file {path}: {source}")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("could not read the worker key file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the worker key file {path} is empty: delete it to mint a new key, or set WARDEN_WORKER_KEY")]
    Empty { path: PathBuf },
}

/// The key: `from_env` when given (blank counts as unset), else the file's.
pub fn resolve(from_env: Option<ApiKey>, cache_dir: &Path) -> Result<(ApiKey, KeySource), KeyError> {
    if let Some(k) = from_env.filter(|k| !k.expose().trim().is_empty()) {
        return Ok((k, KeySource::Env));
    }
    let path = cache_dir.join(KEY_FILE);
    let create = |source| KeyError::Create {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(cache_dir).map_err(create)?;
    match create_private(&path) {
        Ok(mut f) => {
            let key = ApiKey::mint();
            f.write_all(format!("{}\n", key.expose()).as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(create)?;
            Ok((key, KeySource::Minted(path)))
        }
        // Another start (or an earlier one) wrote it: reuse it.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => read_existing(&path),
        Err(e) => Err(create(e)),
    }
}

/// Opens `path` for writing only if it does not exist yet, readable by its
/// owner alone from the first byte on.
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)
}

fn read_existing(path: &Path) -> Result<(ApiKey, KeySource), KeyError> {
    let read = |source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(read)?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(KeyError::Empty {
            path: path.to_path_buf(),
        });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).map_err(read)?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "the worker key file was readable by others; setting it to 0600");
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(read)?;
        }
    }
    Ok((
        ApiKey::from_secret(secret.to_string()),
        KeySource::File(path.to_path_buf()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_env_key_wins_else_the_file_is_minted_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let given = ApiKey::from_secret("given".into());
        let (k, src) = resolve(Some(given.clone()), &cache).unwrap();
        assert_eq!((k, src), (given, KeySource::Env));
        assert!(!cache.join(KEY_FILE).exists(), "an env key writes no file");

        // why: a blank variable is no key
        let (minted, src) = resolve(Some(ApiKey::from_secret(" ".into())), &cache).unwrap();
        assert_eq!(src, KeySource::Minted(cache.join(KEY_FILE)));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(cache.join(KEY_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (again, src) = resolve(None, &cache).unwrap();
        assert_eq!(src, KeySource::File(cache.join(KEY_FILE)));
        assert_eq!(again, minted, "a restart keeps the key");
    }

    #[test]
    fn an_empty_file_is_an_error_that_names_the_file_not_a_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(KEY_FILE), "\n").unwrap();
        let e = resolve(None, dir.path()).unwrap_err();
        assert!(matches!(e, KeyError::Empty { .. }), "{e}");
        assert!(e.to_string().contains(KEY_FILE));
    }
}
