//! JP's conversation locks over the store: `jp/locks/<conversation>.lock`
//! taken exclusive through the store's own locks (a file system's `flock`,
//! which the kernel releases when the holder dies), beside
//! `jp/locks/<conversation>.info` holding JP's [`LockInfo`] (the holder's
//! pid, session and time), removed when the lock is released
//! (format-spec.md 4.11).
//!
//! On an object store the store's locks exclude the threads of one process
//! only; there the writes themselves are ordered (an append is a
//! conditional create: another writer's append first refuses this one, and
//! the backend says so), so a conversation is never overwritten silently.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jp_conversation::ConversationId;
use jp_storage::backend::ConversationLockGuard;
use jp_storage::lock::LockInfo;
use jpstore_blobstore::backend::{Backend, Expect, ListedEntry, LockGuard, LockKind};

use crate::backend::JpStoreBackend;
use crate::error::BackendError;
use crate::names;

/// The prefix of the locks.
const LOCKS: &str = "jp/locks";

/// A conversation lock held: the store's lock and the info beside it.
struct Guard {
    _lock: Box<dyn LockGuard>,
    info: PathBuf,
    backend: Arc<dyn Backend>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // The info goes first, while the lock is still held; it is only
        // diagnostic, so a failure leaves a stale note, never a held lock.
        let _ = self.backend.delete(std::slice::from_ref(&self.info));
    }
}

impl ConversationLockGuard for Guard {}

fn paths(conversation: &str) -> Result<(PathBuf, PathBuf), BackendError> {
    let name = names::plain("conversation", conversation)?;
    Ok((
        Path::new(LOCKS).join(format!("{name}.lock")),
        Path::new(LOCKS).join(format!("{name}.info")),
    ))
}

fn store_error(backend: &dyn Backend, e: jpstore_blobstore::backend::BackendError) -> BackendError {
    BackendError::Store(jpstore_engine::error::Error::from_backend(backend, e))
}

fn io_error(
    backend: &dyn Backend,
    op: &'static str,
    path: &Path,
    source: std::io::Error,
) -> BackendError {
    BackendError::Store(jpstore_engine::error::Error::Io {
        op,
        path: backend.display(path),
        source,
    })
}

/// Takes conversation `conversation`'s lock if no one holds it.
pub(crate) fn try_lock(
    b: &JpStoreBackend,
    conversation: &str,
    session: Option<&str>,
) -> Result<Option<Box<dyn ConversationLockGuard>>, BackendError> {
    let (lock, info) = paths(conversation)?;
    let backend = b.store.backend().clone();
    backend
        .create_prefix(Path::new(LOCKS))
        .map_err(|e| store_error(&*backend, e))?;
    let Some(guard) = backend
        .lock(&lock, LockKind::Exclusive, false)
        .map_err(|e| io_error(&*backend, "lock", &lock, e))?
    else {
        return Ok(None);
    };
    let note = LockInfo {
        pid: std::process::id(),
        session: session.map(str::to_owned),
        acquired_at: chrono::Utc::now().to_rfc3339(),
    };
    let bytes = serde_json::to_vec(&note).map_err(|source| BackendError::Json {
        id: conversation.to_owned(),
        what: "a lock's info",
        source,
    })?;
    let scratch = Path::new(LOCKS).join(format!("tmp.{}.{conversation}", std::process::id()));
    backend
        .replace(&info, &bytes, &scratch, Expect::Any, false)
        .map_err(|e| store_error(&*backend, e))?;
    Ok(Some(Box::new(Guard {
        _lock: guard,
        info,
        backend,
    })))
}

/// The info of the holder of conversation `conversation`'s lock, if a
/// holder left one.
pub(crate) fn lock_info(b: &JpStoreBackend, conversation: &str) -> Option<LockInfo> {
    let (_, info) = paths(conversation).ok()?;
    let file = b.store.backend().open(&info).ok()?;
    let bytes = jpstore_blobstore::backend::read_all(&*file, 1 << 16).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The conversations whose lock info is there but whose lock no one holds
/// (the holder died before it removed its info).
pub(crate) fn orphaned(b: &JpStoreBackend) -> Vec<ConversationId> {
    let backend = b.store.backend();
    let Ok(listed) = backend.list(Path::new(LOCKS)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for l in listed {
        if !matches!(l.entry, ListedEntry::Object(_)) {
            continue;
        }
        let Some(name) = l.name.strip_suffix(".info") else {
            continue;
        };
        let Ok((lock, _)) = paths(name) else {
            continue;
        };
        // Held by no one when it can be taken now (and is let go at once).
        if let Ok(Some(_free)) = backend.lock(&lock, LockKind::Exclusive, false) {
            if let Ok(id) = name.parse::<ConversationId>() {
                out.push(id);
            }
        }
    }
    out.sort();
    out
}
