//! Errors of the engine.

use std::io;

pub use crate::config::{BadSetting, ConfigError, SettingPlace};
use std::path::PathBuf;

/// Everything that can go wrong in the engine.
///
/// Errors about bytes on disk name the file (as the storage backend displays
/// it, see `Storage::display_path`) and the byte offset of the damage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation failed.
    #[error("cannot {op} {}: {}", path.display(), jpstore_blobstore::backend::unrepeated(path, source))]
    Io {
        /// What was being done ("open", "read", "lock", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A sync (fsync/fdatasync) failed. What is on disk is unknown; the
    /// handle that wrote is poisoned and refuses further writes.
    #[error("sync of {} failed, the writer refuses further appends: {}", path.display(), jpstore_blobstore::backend::unrepeated(path, source))]
    SyncFailed {
        /// The file whose sync failed.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Another writer appended to the log first, at the offset this writer
    /// took for its end (on S3: the conditional create of the segment at
    /// that offset answered 412). Nothing of the batch was written; the
    /// handle refuses further appends (its end is stale): open the log
    /// again, and append again if the batch still holds against what is
    /// there now ([`crate::append::retry_on_conflict`]).
    #[error("cannot append to {}: {}", path.display(), jpstore_blobstore::backend::unrepeated(path, source))]
    AppendConflict {
        /// The log.
        path: PathBuf,
        /// Where this writer believed the log ended.
        offset: u64,
        /// What the backend said.
        #[source]
        source: io::Error,
    },
    /// A write was attempted through a handle that an earlier failed write or
    /// sync poisoned.
    #[error("the writer of {} is poisoned by an earlier failed write or sync; open the log again", path.display())]
    Poisoned {
        /// The file whose write or sync failed.
        path: PathBuf,
    },
    /// Bytes on disk are not what the format requires.
    #[error("corrupt {} at offset {offset}: expected {expected}, found {found}", path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damage inside the file.
        offset: u64,
        /// What the format requires there.
        expected: String,
        /// What is there.
        found: String,
    },
    /// A log record (on disk, or a batch being appended) is larger than the
    /// configured limit.
    #[error("{} in {} is {size} bytes, more than the limit of {max} bytes", match offset { Some(o) => format!("record at offset {o}"), None => "batch to append".to_string() }, path.display())]
    RecordTooLarge {
        /// The log file.
        path: PathBuf,
        /// Offset of the record on disk; `None` for a batch being appended.
        offset: Option<u64>,
        /// The size the record claims, or the encoded size of the batch.
        size: u64,
        /// The configured maximum.
        max: u64,
    },
    /// A log written by a newer jp-store: a version above those this build
    /// reads, or flags it does not know, in a file header whose checksum
    /// holds (format-spec.md 3, "Versioning"). Not damage: nothing of it is
    /// read, and nothing moves or changes it. (A file of the blob store of
    /// a newer format is [`jpstore_blobstore::Error::Unsupported`].)
    #[error("{}: written by a newer jp-store (version {version} of the log format, flags {flags:#06x}; this build reads version 1 with flags 0x0001 at most and version 2 without flags, and writes version {supported}); upgrade jp-store", path.display())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// Its format version.
        version: u16,
        /// Its flags.
        flags: u16,
        /// The newest version this build writes.
        supported: u16,
    },
    /// A record of one framing version was to be written to a log of
    /// another (a version 1 batch to a version 2 log, or the reverse):
    /// refused before anything was written.
    #[error("{} is a version {log} log; a version {record} record cannot be appended to it", path.display())]
    WrongFraming {
        /// The log file.
        path: PathBuf,
        /// The log's framing version.
        log: u16,
        /// The record's framing version.
        record: u16,
    },
    /// A file to be created exists already.
    #[error("{} already exists", path.display())]
    AlreadyExists {
        /// The file.
        path: PathBuf,
    },
    /// The lock file of a log was removed or replaced while this writer
    /// waited for its lock: the lock it got no longer guards the log's name
    /// (the log was removed, perhaps created again), so it writes nothing.
    #[error("{} was removed or replaced while this command waited for its lock (held lock file {} is no longer at that name)", path.display(), lock.display())]
    LockReplaced {
        /// The log.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// A conversation was removed (and perhaps created again under its id)
    /// while this command waited for its writer lock; nothing was written.
    #[error("conversation {id} was removed while this command waited for its lock; nothing was written to it")]
    ConversationRemoved {
        /// The id.
        id: String,
    },
    /// A blob store operation failed.
    #[error(transparent)]
    Blob(#[from] jpstore_blobstore::Error),
    /// A conversation id that is not valid.
    #[error("invalid conversation id {input:?}: {reason}")]
    InvalidId {
        /// What was given (at most 80 characters of it).
        input: String,
        /// What a valid id looks like.
        reason: &'static str,
    },
    /// No conversation has this id.
    #[error("no conversation with id {id}")]
    NotFound {
        /// The id.
        id: String,
    },
    /// A conversation with this id exists already.
    #[error("a conversation with id {id} exists already")]
    ConversationExists {
        /// The id.
        id: String,
    },
    /// An entry of a batch to append is not acceptable; nothing was
    /// appended.
    #[error("entry {} of the batch: {}{message}", index + 1, if field.is_empty() { String::new() } else { format!("field `{field}`: ") })]
    BadEntry {
        /// 0-based position of the entry in the batch.
        index: usize,
        /// The field at fault (a path inside the entry; may be empty).
        field: String,
        /// What is wrong, and what was expected.
        message: String,
    },
    /// `init` was given a directory that holds something and is not a
    /// store.
    #[error("{} is not empty and not a jp-store store (it holds {found}); init makes a store only in a new or empty directory", path.display())]
    NotEmpty {
        /// The directory.
        path: PathBuf,
        /// Some of the names in it.
        found: String,
    },
    /// A fork of the last 0 turns: it would hold nothing.
    #[error("the range is empty: from turn {from} to turn {to}")]
    EmptyFork {
        /// The number of turns of the conversation forked.
        from: u64,
        /// One less.
        to: u64,
    },
    /// The caller's interrupt flag was set: the run stopped before it
    /// finished (see `Store::fsck_interruptible`).
    #[error("interrupted before the end")]
    Interrupted,
    /// The directory is not a jp-store store. (How to make one is the
    /// caller's to say: [`Store::init_dir`](crate::Store::init_dir) for a
    /// library, `jp-store init` on the command line, which adds it.)
    #[error("{} is not a jp-store store ({reason})", path.display())]
    NotAStore {
        /// The directory.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// A config file or config blob is not valid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A setting jp-store reads has a value of the wrong type; `place` says
    /// which file or stored config holds it.
    #[error("{place}: {setting}")]
    BadSetting {
        /// Where the value lives.
        place: Box<crate::config::SettingPlace>,
        /// The key, what it must be and what was found.
        setting: Box<crate::config::BadSetting>,
    },
    /// An append of a batch without entries.
    #[error("refusing to append an empty batch to {}", path.display())]
    EmptyBatch {
        /// The log file.
        path: PathBuf,
    },
    /// Content cannot be rendered into a provider request (e.g. text that is
    /// not UTF-8).
    #[error("cannot render the provider request: {what}")]
    Render {
        /// What could not be rendered, and why (names the blob, if any).
        what: String,
    },
}

impl Error {
    /// The error of a failed write of the store's backend, naming the key
    /// as `backend` displays it; a failed sync is [`Error::SyncFailed`].
    pub(crate) fn from_backend(
        backend: &dyn jpstore_blobstore::backend::Backend,
        e: jpstore_blobstore::backend::BackendError,
    ) -> Error {
        use jpstore_blobstore::backend::BackendError;
        match e {
            BackendError::Io { op, key, source } => Error::Io {
                op,
                path: backend.display(&key),
                source,
            },
            BackendError::Unsynced { key, source } => Error::SyncFailed {
                path: backend.display(&key),
                source,
            },
            // A failure this engine does not know: what is durable is taken
            // as unknown, as after a failed sync.
            other => Error::SyncFailed {
                path: backend.display(other.key()),
                source: std::io::Error::new(other.kind(), other.to_string()),
            },
        }
    }

    /// Whether the error says there is no such conversation: for a command
    /// walking every conversation of the store, one removed since it listed
    /// them (`rm` moves a conversation away in one rename), which it leaves
    /// out as a listing taken a moment later would.
    pub fn is_no_conversation(&self) -> bool {
        matches!(
            self,
            Error::NotFound { .. } | Error::ConversationRemoved { .. }
        )
    }

    /// Whether the error is the file system refusing a write where nothing
    /// else could have been done: a read-only file system, or no
    /// permission (another user's store). A check that only reads (`fsck`,
    /// `gc --dry-run`) goes on without the lock it could not take.
    pub(crate) fn is_read_only(&self) -> bool {
        matches!(self, Error::Io { source, .. } if matches!(
            source.kind(),
            std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
        ))
    }

    /// Whether the error reports damaged data on disk (as opposed to I/O
    /// trouble, limits or misuse).
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::Corrupt { .. }
                | Error::RecordTooLarge {
                    offset: Some(_),
                    ..
                }
        )
    }
}

/// Result of engine operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
