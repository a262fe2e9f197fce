//! JP's session mappings: one object per session key,
//! `jp/sessions/<key as hex>.json` in the store, holding the JSON JP saves
//! (format-spec.md 4.11).

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};

use jpstore_blobstore::backend::{Expect, ListedEntry};
use jpstore_engine::Store;
use serde_json::Value;

use crate::error::BackendError;
use crate::names;

/// The prefix of the session mappings.
const SESSIONS: &str = "jp/sessions";

fn path_of(key: &str) -> Result<PathBuf, BackendError> {
    Ok(Path::new(SESSIONS).join(format!("{}.json", names::encoded("session key", key)?)))
}

fn io(store: &Store, op: &'static str, path: &Path, source: std::io::Error) -> BackendError {
    BackendError::Store(jpstore_engine::error::Error::Io {
        op,
        path: store.backend().display(path),
        source,
    })
}

/// The mapping saved for `key`, if any.
pub(crate) fn load(store: &Store, key: &str) -> Result<Option<Value>, BackendError> {
    let path = path_of(key)?;
    let backend = store.backend();
    let bytes = match backend
        .open(&path)
        .and_then(|f| jpstore_blobstore::backend::read_all(&*f, 1 << 20))
    {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(store, "read", &path, e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| BackendError::Json {
            id: key.to_owned(),
            what: "a session mapping",
            source,
        })
}

/// Saves `data` as the mapping of `key`, durably, over any before.
pub(crate) fn save(store: &Store, key: &str, data: &Value) -> Result<(), BackendError> {
    let path = path_of(key)?;
    let backend = store.backend();
    let bytes = serde_json::to_vec(data).map_err(|source| BackendError::Json {
        id: key.to_owned(),
        what: "a session mapping",
        source,
    })?;
    backend.create_prefix(Path::new(SESSIONS)).map_err(|e| {
        BackendError::Store(jpstore_engine::internal::error_from_backend(&**backend, e))
    })?;
    let scratch = Path::new(SESSIONS).join(format!(
        "tmp.{}.{}",
        std::process::id(),
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    backend
        .replace(&path, &bytes, &scratch, Expect::Any, true)
        .map_err(|e| {
            BackendError::Store(jpstore_engine::internal::error_from_backend(&**backend, e))
        })
}

/// Every key a mapping is saved for.
pub(crate) fn keys(store: &Store) -> Vec<String> {
    let Ok(listed) = store.backend().list(Path::new(SESSIONS)) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = listed
        .into_iter()
        .filter(|l| matches!(l.entry, ListedEntry::Object(_)))
        .filter_map(|l| names::decoded(l.name.strip_suffix(".json")?))
        .collect();
    keys.sort();
    keys
}
