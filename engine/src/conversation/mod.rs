//! Conversations: one directory per conversation holding its log, the
//! encoding of log entries (`codec` for version 1 logs, `sections` for
//! the records of version 2 logs), metadata (`meta`), the head cache that
//! spares reading whole logs (`head`), reading (`read`), the single
//! writer with its append protocol (`writer`) and the state that
//! validates appends (`state`).
//!
//! Layout (format-spec.md section 4.1):
//!
//! ```text
//! conversations/<id>/events.log        the log (section 3 framing, section 4 entries)
//! conversations/<id>/events.log.lock   the writer lock
//! conversations/<id>/head              a cache of the folded state (section 4.6)
//! ```

pub(crate) mod codec;
pub(crate) mod head;
pub(crate) mod image;
pub(crate) mod meta;
pub(crate) mod read;
pub(crate) mod sections;
pub(crate) mod state;
pub(crate) mod writer;

pub use meta::{MetaPatch, Metadata};
pub use state::ConversationState;
pub use writer::AppendOutcome;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use jpstore_blobstore::backend::{Backend, LockGuard, LockKind};

use crate::error::Error;
use crate::timestamp::Timestamp;

/// Directory of conversations inside the store.
pub(crate) const CONVERSATIONS_DIR: &str = "conversations";
/// Directory of quarantined damage, at the store root (fsck moves damaged
/// parts there; a writer copies a tail there before it cuts it).
pub(crate) const QUARANTINE_DIR: &str = "quarantine";
/// Name of the log inside a conversation's directory.
pub(crate) const LOG_FILE: &str = "events.log";

/// The lock that orders writers and gc (format-spec.md 4.7): writers hold it
/// shared from the moment they check or store a blob until the record that
/// references it is durable; gc holds it exclusive while it marks and
/// sweeps.
pub(crate) const GC_LOCK: &str = "gc.lock";

/// Waits for the writer lock of conversation `id` (the sidecar lock of its
/// log), proven to be the lock at the log's name: a conversation removed
/// while we waited (and perhaps created again) is
/// [`Error::ConversationRemoved`].
/// The temp name a whole new log of conversation `id` is written to before
/// it replaces the log (`import --force`, `upgrade`):
/// `events.log.tmp.<pid>.<secs><nanos>.<purpose>`, a leftover gc knows
/// (format-spec.md 4.7).
pub(crate) fn log_scratch(id: &ConversationId, purpose: &str) -> PathBuf {
    let now = crate::timestamp::Timestamp::now();
    id.file(&format!(
        "{LOG_FILE}.tmp.{}.{}{:09}.{purpose}",
        std::process::id(),
        now.unix_secs(),
        now.subsec_nanos()
    ))
}

/// Keeps `log`, the bytes of a log of conversation `id` about to be
/// replaced whole, as `quarantine/conversations/<id>.<secs>-<nanos>/events.log`
/// beside a `NOTE` saying `why` and how to restore it, each published
/// durably (create-if-absent); returns the directory. What is kept there
/// is read by gc (its blobs stay) and listed by fsck, never deleted by
/// either (format-spec.md 4.8).
pub(crate) fn keep_log(
    backend: &dyn Backend,
    id: &ConversationId,
    log: &[u8],
    why: &str,
) -> Result<PathBuf, Error> {
    let now = Timestamp::now();
    let parent = Path::new(QUARANTINE_DIR).join(CONVERSATIONS_DIR);
    let dir = parent.join(format!("{id}.{}-{}", now.unix_secs(), now.subsec_nanos()));
    for d in [&parent, &dir] {
        backend
            .create_prefix(d)
            .map_err(|e| Error::from_backend(backend, e))?;
    }
    let note = format!(
        "a log of conversation {id}, kept at {} UTC when {why}; the store's log is the conversation. Restore it by moving this events.log over conversations/{id}/events.log (and removing conversations/{id}/head).\n",
        now
    );
    for (name, data) in [(LOG_FILE, log), ("NOTE", note.as_bytes())] {
        let to = dir.join(name);
        let scratch = dir.join(format!("{name}.tmp.{}", std::process::id()));
        match backend.put_if_absent(&to, data, &scratch) {
            Ok(jpstore_blobstore::backend::Put::Created) => {}
            Ok(jpstore_blobstore::backend::Put::Existed) => {
                return Err(Error::AlreadyExists {
                    path: backend.display(&to),
                })
            }
            Err(e) => return Err(Error::from_backend(backend, e)),
        }
    }
    Ok(dir)
}

pub(crate) fn writer_lock(
    backend: &dyn Backend,
    id: &ConversationId,
) -> Result<Box<dyn LockGuard>, Error> {
    crate::log::lock_waiting(backend, &id.log_path()).map_err(|e| removed_while_waiting(id, e))
}

/// [`Error::LockReplaced`] of a conversation's log, said of the
/// conversation; so is a lock file whose directory is gone (the
/// conversation was removed after the caller saw it).
pub(crate) fn removed_while_waiting(id: &ConversationId, e: Error) -> Error {
    match e {
        Error::LockReplaced { .. } => Error::ConversationRemoved { id: id.to_string() },
        Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Error::NotFound { id: id.to_string() }
        }
        other => other,
    }
}

/// The name prefix a removal moves a conversation's directory to before it
/// deletes what it holds: `conversations/.removed-<id>-<pid>-<nanos>`
/// (never an id: ids do not start with `.`).
pub(crate) const REMOVED_PREFIX: &str = ".removed-";

/// Deletes every file in `dir`, the directory of the log `log`, the log's
/// lock file last, then `dir` itself; the caller holds
/// that lock (a writer waiting for it finds it replaced and takes the new
/// one, format-spec.md 3, "The writer lock"), or `dir` is one nothing
/// locks any more (a removal's, moved aside). What someone else deleted
/// meanwhile (gc removing a stopped removal) is passed over. Returns
/// whether `dir` is gone: `false` when something was made in it meanwhile.
pub(crate) fn clear_locked_dir(
    backend: &dyn Backend,
    dir: &Path,
    log: &Path,
) -> Result<bool, Error> {
    // One level: a conversation's directory holds files only, and an
    // object store lists a log (its first object and segments) as one.
    let entries = match backend.list(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(source) => {
            return Err(Error::Io {
                op: "list",
                path: backend.display(dir),
                source,
            })
        }
    };
    let lock_file = crate::log::lock_path(log);
    let (lock_files, files): (Vec<PathBuf>, Vec<PathBuf>) = entries
        .iter()
        .filter(|e| !e.is_prefix())
        .map(|e| dir.join(&e.name))
        .partition(|key| *key == lock_file);
    for batch in [files, lock_files] {
        match backend.delete(&batch) {
            Ok(_) => {}
            // Files already gone are passed over; `NotFound` is the
            // directory itself, removed by someone else (whose removal
            // made that durable).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(Error::from_backend(backend, e)),
        }
    }
    match backend.remove_prefix(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => Ok(false),
        Err(source) => Err(Error::Io {
            op: "remove",
            path: backend.display(dir),
            source,
        }),
    }
}

/// What a creation of `id` that failed before its log was published calls
/// while it still holds the log's lock ([`crate::log::LogWriter::create_published`]'s
/// `abandon`): the directory it made, with the lock file and whatever else
/// it wrote there (the head), is removed, so a failed creation (a full
/// disk) leaves nothing behind. Best effort: what is left is a leftover
/// that gc removes later.
pub(crate) fn abandon_creation(backend: &dyn Backend, id: &ConversationId) {
    let absent = matches!(backend.head(&id.log_path()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    if absent {
        let _ = clear_locked_dir(backend, &id.dir(), &id.log_path());
    }
}

/// Takes the gc lock, shared (writers) or exclusive (gc), waiting for it.
/// The lock is released when the returned guard is dropped.
pub(crate) fn gc_lock(backend: &dyn Backend, kind: LockKind) -> Result<Box<dyn LockGuard>, Error> {
    gc_lock_as(backend, kind, false)
}

/// [`gc_lock`] exclusive for a run that only reads (gc's dry run): it
/// needs no write where `gc.lock` exists ([`Backend::lock_to_read`]);
/// where it does not and cannot be made (a read-only file system, another
/// user's store), the error is one of [`Error::is_read_only`].
pub(crate) fn gc_lock_to_read(backend: &dyn Backend) -> Result<Box<dyn LockGuard>, Error> {
    gc_lock_as(backend, LockKind::Exclusive, true)
}

fn gc_lock_as(
    backend: &dyn Backend,
    kind: LockKind,
    to_read: bool,
) -> Result<Box<dyn LockGuard>, Error> {
    let path = std::path::Path::new(GC_LOCK);
    let io = |op, source| Error::Io {
        op,
        path: backend.display(path),
        source,
    };
    loop {
        let locked = if to_read {
            backend.lock_to_read(path, kind, true)
        } else {
            backend.lock(path, kind, true)
        };
        let Some(lock) = locked.map_err(|e| io("lock", e))? else {
            return Err(io(
                "lock",
                std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    "the storage backend returned from a waiting lock without the lock",
                ),
            ));
        };
        // A gc.lock removed (or replaced) while we waited excludes no one:
        // gc and writers would lock different files. Take the one at the
        // name instead.
        if lock.is_current().map_err(|e| io("stat", e))? {
            // On a shared store (S3) the lock excludes this process only;
            // a writer's window on the writers' clock bounds how long it
            // may take to make durable what it found (format-spec.md 5.5).
            return Ok(match (kind, backend.writer_clock()) {
                (LockKind::Shared, Some(clock)) => Box::new(WindowedLock {
                    lock,
                    _window: clock.start(),
                }),
                _ => lock,
            });
        }
    }
}

/// The gc lock held shared on a store whose locks do not span writers,
/// with the writer's window open while it is held.
#[derive(Debug)]
struct WindowedLock {
    lock: Box<dyn LockGuard>,
    _window: jpstore_blobstore::backend::ClockTicket,
}

impl LockGuard for WindowedLock {
    fn is_current(&self) -> std::io::Result<bool> {
        self.lock.is_current()
    }
}

/// Longest conversation id.
pub(crate) const MAX_ID_LEN: usize = 64;

/// A conversation id: 1 to 64 of `0-9 A-Z a-z _ -`, not starting with `-`.
/// JP's ids (UTC deciseconds, e.g. `17738399468`) are of this form. Ids are
/// directory names, so nothing else is accepted (no `/`, no `.`, no `..`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConversationId(String);

impl ConversationId {
    /// Validates `s` as an id.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let reason = if s.is_empty() {
            Some("an id is not empty")
        } else if s.len() > MAX_ID_LEN {
            Some("an id has at most 64 characters")
        } else if s.starts_with('-') {
            Some("an id does not start with `-`")
        } else if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            Some("an id has only the characters 0-9, A-Z, a-z, `_` and `-`")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidId {
                input: s.chars().take(80).collect(),
                reason,
            }),
            None => Ok(ConversationId(s.to_owned())),
        }
    }

    /// The id JP would give a conversation created at `t`: UTC deciseconds
    /// since the Unix epoch.
    pub(crate) fn from_time(t: Timestamp) -> Self {
        let ds = t.unix_secs().max(0) * 10 + i64::from(t.subsec_nanos() / 100_000_000);
        ConversationId(ds.to_string())
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id following this one numerically, for ids that are numbers (used
    /// to find a free id when two conversations are created in the same
    /// decisecond).
    pub(crate) fn next_numeric(&self) -> Option<Self> {
        let n: u64 = self.0.parse().ok()?;
        Some(ConversationId(n.checked_add(1)?.to_string()))
    }

    /// The conversation's directory, relative to the store root.
    pub(crate) fn dir(&self) -> PathBuf {
        self.file("")
    }

    /// The file `name` in the conversation's directory, relative to the
    /// store root (the directory itself for an empty name), made in one
    /// allocation: a view of a short conversation makes a few such paths,
    /// and each join of a path to another allocated twice.
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        let mut path =
            String::with_capacity(CONVERSATIONS_DIR.len() + self.0.len() + name.len() + 2);
        path.push_str(CONVERSATIONS_DIR);
        path.push('/');
        path.push_str(&self.0);
        if !name.is_empty() {
            path.push('/');
            path.push_str(name);
        }
        PathBuf::from(path)
    }

    /// The conversation's log, relative to the store root.
    pub(crate) fn log_path(&self) -> PathBuf {
        self.file(LOG_FILE)
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl serde::Serialize for ConversationId {
    /// Serializes as the id's string (in the reports the command line
    /// prints with `--json`).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl FromStr for ConversationId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_escape_the_directory_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            "-rf",
            "a b",
            "é",
            &"9".repeat(65),
            "a\0",
        ] {
            assert!(ConversationId::parse(bad).is_err(), "accepted {bad:?}");
        }
        for good in ["17738399468", "a", "my-conv_2", &"z".repeat(64)] {
            assert_eq!(ConversationId::parse(good).expect("valid").as_str(), good);
        }
    }

    #[test]
    fn ids_from_time_are_jp_deciseconds() {
        let t = Timestamp::parse("2026-03-18 13:19:06.8").expect("time");
        assert_eq!(ConversationId::from_time(t).as_str(), "17738399468");
        assert_eq!(
            ConversationId::parse("17738399468")
                .expect("id")
                .next_numeric()
                .map(|i| i.0),
            Some("17738399469".to_string())
        );
    }
}

#[cfg(test)]
mod store_tests;
