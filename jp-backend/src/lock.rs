//! JP's conversation locks over the store.
//!
//! On a file system: `jp/locks/<conversation>.lock` taken exclusive through
//! the store's own locks (`flock`, which the kernel releases when the
//! holder dies), beside `jp/locks/<conversation>.info` holding JP's
//! [`LockInfo`] (the holder's pid, session and time), removed when the lock
//! is released.
//!
//! On an object store, whose store locks exclude the threads of one process
//! only: a lease, `jp/locks/<conversation>.lease`, made with a conditional
//! create and renewed by a thread with conditional replaces; it holds JP's
//! lock information and the holder's name. A lease not renewed for the
//! lease duration (this process watching it unchanged, or its own renewal
//! time older than twice that) is taken over with a replace conditional on
//! the version seen. A writer whose lease was lost is still ordered by the
//! log's conditional appends, and a write over another writer's events is
//! refused ([`crate::error::BackendError::Conflict`]). format-spec.md 4.11.

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jp_conversation::ConversationId;
use jp_storage::backend::ConversationLockGuard;
use jp_storage::lock::LockInfo;
use jpstore_blobstore::backend::{Backend, Expect, ListedEntry, LockGuard, LockKind, Put, Version};

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
    BackendError::Store(jpstore_engine::internal::error_from_backend(backend, e))
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
    if !backend.locks_span_writers() {
        return try_lease(b, conversation, session);
    }
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
    if !b.store.backend().locks_span_writers() {
        let body = read_lease(&**b.store.backend(), &lease_key(conversation).ok()?)?;
        return Some(LockInfo {
            pid: body.pid,
            session: body.session,
            acquired_at: body.acquired_at,
        });
    }
    let (_, info) = paths(conversation).ok()?;
    let file = b.store.backend().open(&info).ok()?;
    let bytes = jpstore_blobstore::backend::read_all(&*file, 1 << 16).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The conversations whose lock info is there but whose lock no one holds
/// (the holder died before it removed its info; on an object store, a
/// lease not renewed for twice the lease duration by its own clock).
pub(crate) fn orphaned(b: &JpStoreBackend) -> Vec<ConversationId> {
    let backend = b.store.backend();
    let Ok(listed) = backend.list(Path::new(LOCKS)) else {
        return Vec::new();
    };
    if !backend.locks_span_writers() {
        let mut out: Vec<ConversationId> = listed
            .iter()
            .filter(|l| matches!(l.entry, ListedEntry::Object(_)))
            .filter_map(|l| {
                let name = l.name.strip_suffix(".lease")?;
                let body = read_lease(&**backend, &lease_key(name).ok()?)?;
                expired(&body, b.lease).then(|| name.parse().ok())?
            })
            .collect();
        out.sort();
        return out;
    }
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

/// The lease of conversation `conversation` on an object store.
fn lease_key(conversation: &str) -> Result<PathBuf, BackendError> {
    let name = names::plain("conversation", conversation)?;
    Ok(Path::new(LOCKS).join(format!("{name}.lease")))
}

/// What a lease holds (JSON): JP's lock information, the holder's name,
/// and its last renewal.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct LeaseBody {
    /// JP's: the holder's process id.
    pid: u32,
    /// JP's: the holder's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    /// JP's: when the lock was taken (RFC 3339).
    acquired_at: String,
    /// The holder: `<host>:<pid>:<nanoseconds since the epoch, hex>`.
    holder: String,
    /// The holder's clock at its last renewal, in milliseconds since the
    /// epoch.
    renewed_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Whether `body` was last renewed longer ago than twice `lease`, by this
/// machine's clock (twice: a margin for clocks that disagree).
fn expired(body: &LeaseBody, lease: Duration) -> bool {
    let limit = u64::try_from(lease.as_millis().saturating_mul(2)).unwrap_or(u64::MAX);
    now_ms().saturating_sub(body.renewed_ms) > limit
}

/// This machine's name, for a lease's holder.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// The lease at `key`, if it is there and reads.
fn read_lease(backend: &dyn Backend, key: &Path) -> Option<LeaseBody> {
    let object = backend.open(key).ok()?;
    let bytes = jpstore_blobstore::backend::read_all(&*object, 1 << 16).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Leases seen held, with their version and when this process first saw
/// that version: one unchanged for the lease duration is taken over.
pub(crate) type Watched = Mutex<std::collections::HashMap<String, (Version, Instant)>>;

/// [`try_lock`] on an object store: the lease.
fn try_lease(
    b: &JpStoreBackend,
    conversation: &str,
    session: Option<&str>,
) -> Result<Option<Box<dyn ConversationLockGuard>>, BackendError> {
    let key = lease_key(conversation)?;
    let backend = b.store.backend().clone();
    let scratch = Path::new(LOCKS).join(format!("tmp.{}.{conversation}", std::process::id()));
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let body = LeaseBody {
        pid: std::process::id(),
        session: session.map(str::to_owned),
        acquired_at: chrono::Utc::now().to_rfc3339(),
        holder: format!("{}:{}:{nanos:x}", host(), std::process::id()),
        renewed_ms: now_ms(),
    };
    let bytes = encode(conversation, &body)?;
    let taken = match backend.put_if_absent(&key, &bytes, &scratch) {
        Ok(Put::Created) => true,
        Ok(Put::Existed) => {
            let seen = match backend.head(&key) {
                Ok(m) => m.version,
                // Released meanwhile: the next try takes it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io_error(&*backend, "inspect", &key, e)),
            };
            let unrenewed = {
                let mut watched = b.watched.lock().unwrap_or_else(|e| e.into_inner());
                match watched.get(conversation) {
                    Some((v, since)) if *v == seen => since.elapsed() >= b.lease,
                    _ => {
                        watched.insert(conversation.to_owned(), (seen.clone(), Instant::now()));
                        false
                    }
                }
            };
            let stale =
                unrenewed || read_lease(&*backend, &key).is_some_and(|h| expired(&h, b.lease));
            if !stale {
                return Ok(None);
            }
            match backend.replace(&key, &bytes, &scratch, Expect::Version(seen), true) {
                Ok(()) => true,
                // Renewed or taken by another meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(store_error(&*backend, e)),
            }
        }
        Err(e) => return Err(store_error(&*backend, e)),
    };
    debug_assert!(taken);
    if let Ok(mut watched) = b.watched.lock() {
        watched.remove(conversation);
    }
    let version = backend
        .head(&key)
        .map_err(|e| io_error(&*backend, "inspect", &key, e))?
        .version;
    Ok(Some(Box::new(Lease::start(
        backend,
        key,
        scratch,
        conversation.to_owned(),
        body,
        version,
        b.lease,
    ))))
}

fn encode(conversation: &str, body: &LeaseBody) -> Result<Vec<u8>, BackendError> {
    serde_json::to_vec(body).map_err(|source| BackendError::Json {
        id: conversation.to_owned(),
        what: "a lock's lease",
        source,
    })
}

/// A lease held: renewed by a thread until dropped, then deleted if it is
/// still this holder's.
struct Lease {
    backend: Arc<dyn Backend>,
    key: PathBuf,
    holder: String,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl ConversationLockGuard for Lease {}

impl Lease {
    /// Starts renewing the lease just taken at `version`, every sixth of
    /// `lease`.
    fn start(
        backend: Arc<dyn Backend>,
        key: PathBuf,
        scratch: PathBuf,
        conversation: String,
        body: LeaseBody,
        version: Version,
        lease: Duration,
    ) -> Lease {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let holder = body.holder.clone();
        let thread = {
            let (backend, key, stop) = (Arc::clone(&backend), key.clone(), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("jpstore-jp-lease".into())
                .spawn(move || {
                    renew(
                        &*backend,
                        &key,
                        &scratch,
                        &conversation,
                        body,
                        version,
                        lease,
                        &stop,
                    )
                })
                .ok()
        };
        Lease {
            backend,
            key,
            holder,
            stop,
            thread,
        }
    }
}

/// Renews the lease at `key` until told to stop, or until it is lost
/// (replaced or removed by another: a renewal answered 412 or 404). A
/// renewal that fails otherwise is tried again at the next beat.
#[allow(clippy::too_many_arguments)]
fn renew(
    backend: &dyn Backend,
    key: &Path,
    scratch: &Path,
    conversation: &str,
    mut body: LeaseBody,
    mut version: Version,
    lease: Duration,
    stop: &(Mutex<bool>, Condvar),
) {
    let interval = (lease / 6).max(Duration::from_millis(20));
    loop {
        {
            let guard = stop.0.lock().unwrap_or_else(|e| e.into_inner());
            let (guard, _) = stop
                .1
                .wait_timeout_while(guard, interval, |stopped| !*stopped)
                .unwrap_or_else(|e| e.into_inner());
            if *guard {
                return;
            }
        }
        body.renewed_ms = now_ms();
        let Ok(bytes) = encode(conversation, &body) else {
            continue;
        };
        match backend.replace(key, &bytes, scratch, Expect::Version(version.clone()), true) {
            Ok(()) => {
                if let Ok(m) = backend.head(key) {
                    version = m.version;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotFound
                ) =>
            {
                // Still ours (a replica answered the HEAD with an older
                // version): read it again; else lost.
                match read_lease(backend, key) {
                    Some(now) if now.holder == body.holder && now.renewed_ms == body.renewed_ms => {
                        if let Ok(m) = backend.head(key) {
                            version = m.version;
                        }
                    }
                    _ => return,
                }
            }
            Err(_) => {}
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.stop.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Deleted if it still names this holder (one taken over, after a
        // lease duration without renewal, is the new holder's).
        if read_lease(&*self.backend, &self.key).is_some_and(|b| b.holder == self.holder) {
            let _ = self.backend.delete(std::slice::from_ref(&self.key));
        }
    }
}
