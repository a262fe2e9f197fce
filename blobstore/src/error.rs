//! Errors of the blob store.

use std::io;
use std::path::PathBuf;

use crate::id::{BlobId, IdError};

/// Everything that can go wrong in the blob store.
///
/// Errors about bytes on disk name the file (as the storage backend displays
/// it) and, inside packs, the offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation failed.
    #[error("cannot {op} {}: {}", path.display(), crate::backend::unrepeated(path, source))]
    Io {
        /// What was being done ("read", "create", "publish", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A sync (fsync/fdatasync) failed. The state of the data on disk is
    /// unknown; the store handle is poisoned and refuses further writes.
    #[error("sync of {} failed, the store refuses further writes: {}", path.display(), crate::backend::unrepeated(path, source))]
    SyncFailed {
        /// The file or directory whose sync failed.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A write was attempted after an earlier sync failure.
    #[error("the blob store is poisoned by an earlier failed sync of {}; open it again", path.display())]
    Poisoned {
        /// The file or directory whose sync failed first.
        path: PathBuf,
    },
    /// Bytes on disk are not what the format requires.
    #[error("corrupt {}{}: expected {expected}, found {found}", path.display(), fmt_offset(*offset))]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damage inside the file, where known.
        offset: Option<u64>,
        /// What the format requires there.
        expected: String,
        /// What is there.
        found: String,
    },
    /// No object with this id is in the store: none that a reader can
    /// find. A pack whose index is damaged is skipped by reads, so its
    /// objects are missing too; the first such index, when there is one,
    /// is named, since the blob may be there.
    #[error("blob {id} is not in the store{}", damaged_note(damaged_index.as_deref()))]
    NotFound {
        /// The blob.
        id: BlobId,
        /// The index of a pack that reads skip as damaged, if any.
        damaged_index: Option<PathBuf>,
    },
    /// An object claims (or content has) a raw size above the configured limit.
    #[error("blob {} in {} is {size} bytes, more than the limit of {max} bytes", id.map(|i| i.to_string()).unwrap_or_else(|| "(new)".into()), path.display())]
    TooLarge {
        /// The blob, if known.
        id: Option<BlobId>,
        /// The file holding it (or the store directory for new content).
        path: PathBuf,
        /// The claimed or actual raw size.
        size: u64,
        /// The configured maximum.
        max: u64,
    },
    /// A string is not a blob id.
    #[error(transparent)]
    InvalidId(#[from] IdError),
    /// Reading a source of a batch put failed.
    #[error("cannot read {name}: {source}")]
    Source {
        /// The caller's name for the source (typically a file path).
        name: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The caller's interrupt flag was set: the run stopped before it
    /// finished, having changed nothing.
    #[error("interrupted before the end; nothing was changed")]
    Interrupted,
    /// A file written by a newer jp-store: a format version above those
    /// this build reads, in a file whose checksum holds where every version
    /// keeps it (format-spec.md 2.10). Not damage: nothing of it is read,
    /// and nothing moves or removes it; a newer jp-store reads it. `blob`:
    /// a blob found in nothing this build reads, which may be in the file
    /// (a pack of a newer version).
    #[error("{}", unsupported_message(path, *kind, *version, blob.as_ref()))]
    Unsupported {
        /// The file (an index names its pack too).
        path: PathBuf,
        /// Which format.
        kind: FormatKind,
        /// The version the file says.
        version: u8,
        /// The blob looked for, when it may be in the file.
        blob: Option<BlobId>,
    },
}

/// A kind of file of the blob store with a format version of its own
/// (format-spec.md 2.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatKind {
    /// An object's encoding (a loose object).
    Object,
    /// A pack.
    Pack,
    /// A pack index.
    PackIndex,
}

impl FormatKind {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            FormatKind::Object => "object",
            FormatKind::Pack => "pack",
            FormatKind::PackIndex => "pack index",
        }
    }

    /// The versions this build reads, in words.
    pub fn versions_read(self) -> &'static str {
        match self {
            FormatKind::Object => "version 1",
            FormatKind::Pack | FormatKind::PackIndex => "versions 1 and 2",
        }
    }
}

fn unsupported_message(
    path: &std::path::Path,
    kind: FormatKind,
    version: u8,
    blob: Option<&BlobId>,
) -> String {
    let newer = format!(
        "written by a newer jp-store (version {version} of the {} format; this build reads {}); upgrade jp-store",
        kind.name(),
        kind.versions_read()
    );
    match blob {
        Some(id) => format!(
            "blob {id} is in nothing this build reads; it may be in {}, {newer}",
            path.display()
        ),
        None => format!("{}: {newer}", path.display()),
    }
}

fn damaged_note(index: Option<&std::path::Path>) -> String {
    match index {
        Some(path) => format!(
            ", or is in a pack whose index is damaged ({}): reads skip that pack \
             (`jp-store fsck` reports it; `fsck --repair` moves it aside)",
            path.display()
        ),
        None => String::new(),
    }
}

fn fmt_offset(offset: Option<u64>) -> String {
    match offset {
        Some(o) => format!(" at offset {o}"),
        None => String::new(),
    }
}

impl Error {
    /// Whether the error reports damaged data (as opposed to I/O trouble or
    /// a missing object).
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corrupt { .. })
    }

    /// Whether the error reports a file of a newer format
    /// ([`Error::Unsupported`]): not damage.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported { .. })
    }

    /// Whether an error of a writer's merge of small packs must reach the
    /// writer's caller: a failed sync (the store is poisoned, and nothing
    /// may be acknowledged after it). Anything else (damage in a pack
    /// merged, a read error) leaves the packs as they were and is gc's and
    /// fsck's to report; the write itself succeeded.
    pub fn fails_the_write(&self) -> bool {
        matches!(self, Error::SyncFailed { .. } | Error::Poisoned { .. })
    }
}

/// Result of blob store operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
