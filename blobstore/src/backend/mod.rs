//! The storage seam: what the blob store and the conversation logs need of
//! the place that keeps their bytes, in operations that an object store (S3
//! and its kin) can implement as well as a file system.
//!
//! A [`Backend`] holds *objects* named by relative keys (`blobs/packs/...`,
//! `conversations/<id>/events.log`; `/`-separated, never absolute, never
//! `..`). Every operation says what is durable when it returns, so the crash
//! analysis of `format-spec.md` holds for every implementation:
//!
//! | operation | what it does | durable on return |
//! |---|---|---|
//! | [`Backend::put_if_absent`] | creates an immutable object unless the name is taken ([`Put::Existed`]: a dedup hit) | the object, and its name |
//! | [`Backend::upload`] | a large immutable object written piece by piece, published by name at the end ([`Upload::publish`], put-if-absent) | once published |
//! | [`Backend::open`], [`Backend::map`] | get, and get range ([`ObjectReader::read_at`]) | - |
//! | [`Backend::head`], [`Backend::list`] | an object's size and time; the objects and sub-prefixes one level below a prefix | - |
//! | [`Backend::delete`] | deletes objects | the deletions |
//! | [`Backend::replace`] | replaces an object whole, unconditionally or only if it is still the version read ([`Expect`]) | if asked (`durable`) |
//! | [`Backend::rename`] | moves an object or a prefix (quarantine, removal) | the move |
//! | [`Backend::open_log`] | an append-only object: append at its end, cut a torn tail | each append |
//! | [`Backend::lock`] | a named lock, shared or exclusive | - |
//!
//! Implementations:
//! - [`FileBackend`] over a [`Storage`](crate::storage::Storage): the local
//!   file system ([`LocalStorage`](crate::storage::LocalStorage)), or the
//!   simulated one ([`SimStorage`](crate::storage::SimStorage)) that crashes
//!   at a chosen sync and injects faults. It follows the protocols of
//!   format-spec.md (temp file, fsync, link without replacing, directory
//!   fsync) with the same calls in the same order as the blob store and the
//!   logs made before this seam existed.
//! - [`MemoryBackend`]: objects in memory with an object store's semantics
//!   (no directories, no links, no file system): the blob store's and the
//!   engine's behavioural tests run against it too, which shows that they
//!   need nothing a remote object store lacks.
//!
//! A failed sync, or a remote write whose outcome is unknown, is
//! [`BackendError::Unsynced`]: the caller poisons whatever depends on it and
//! never retries and acknowledges (format-spec.md 2.3).

#[doc(hidden)]
pub mod contract;
mod files;
mod memory;
mod writer_clock;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use crate::mmap::Mapping;
pub use crate::storage::{FileKind, LockKind};
pub use files::FileBackend;
pub use memory::MemoryBackend;
pub use writer_clock::{ClockTicket, WriterClock, DEFAULT_WRITE_BOUND, LISTING_ALLOWANCE};

/// What [`Backend::put_if_absent`] and [`Upload::publish`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// The object was created by this call.
    Created,
    /// An object of that name existed already (and is durable): for
    /// content-addressed names, a deduplication hit.
    Existed,
}

/// Why a write of a [`Backend`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum BackendError {
    /// The operation failed before it could change what is durable: nothing
    /// was published (a temp file may be left for cleanup).
    Io {
        /// What was being done ("create", "write", "publish", ...).
        op: &'static str,
        /// The key (or scratch name) acted on, relative to the backend.
        key: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A sync failed, or a write's outcome is unknown (a remote request that
    /// timed out after it was sent): what is durable is unknown, and the
    /// handle that wrote must be considered poisoned.
    Unsynced {
        /// The key (or scratch name, or directory) concerned.
        key: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl BackendError {
    /// The error of a failed operation `op` on `key`.
    pub fn io(op: &'static str, key: &Path, source: io::Error) -> Self {
        BackendError::Io {
            op,
            key: key.to_path_buf(),
            source,
        }
    }

    /// The error of a failed sync of `key`.
    pub fn unsynced(key: &Path, source: io::Error) -> Self {
        BackendError::Unsynced {
            key: key.to_path_buf(),
            source,
        }
    }

    /// The key concerned.
    pub fn key(&self) -> &Path {
        match self {
            BackendError::Io { key, .. } | BackendError::Unsynced { key, .. } => key,
        }
    }

    /// The underlying I/O error.
    pub fn source_error(&self) -> &io::Error {
        match self {
            BackendError::Io { source, .. } | BackendError::Unsynced { source, .. } => source,
        }
    }

    /// The kind of the underlying I/O error.
    pub fn kind(&self) -> io::ErrorKind {
        self.source_error().kind()
    }
}

/// The message of `source`, an error about `path`, without `path` when it
/// starts with it: an error of a backend that names the object (an S3 URL)
/// is said once in "cannot list s3://b/p: HTTP 403 ...".
pub fn unrepeated(path: &Path, source: &dyn fmt::Display) -> String {
    let text = source.to_string();
    let path = path.display().to_string();
    // The source may name the object, or the prefix listed to find it.
    if let Some((named, rest)) = text.split_once(": ") {
        let within = path.strip_prefix(named).is_some_and(|after| {
            after.is_empty() || after.starts_with('/') || named.ends_with('/')
        });
        if within && named.contains("://") {
            return rest.to_string();
        }
    }
    text
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Io { op, key, source } => {
                write!(
                    f,
                    "cannot {op} {}: {}",
                    key.display(),
                    unrepeated(key, source)
                )
            }
            BackendError::Unsynced { key, source } => {
                write!(
                    f,
                    "sync of {} failed: {}",
                    key.display(),
                    unrepeated(key, source)
                )
            }
        }
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source_error())
    }
}

/// What a backend tells of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Bytes of the object.
    pub len: u64,
    /// When it was created (or last freshened, [`Backend::touch`]).
    pub modified: SystemTime,
    /// What is at the name: [`FileKind::Regular`] for an object; a file
    /// system backend also reports what else it finds there (a directory, a
    /// FIFO, a link), which the store never takes for an object.
    pub kind: FileKind,
    /// The version of the object, for a conditional [`Backend::replace`]:
    /// an opaque token that changes whenever the object is written (a file's
    /// identity, length and time; an object store's ETag).
    pub version: Version,
}

/// The version of an object ([`ObjectMeta::version`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version(pub String);

/// One entry of [`Backend::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The last segment of the name (below the prefix listed).
    pub name: String,
    /// An object, with its metadata, or a sub-prefix (a directory).
    pub entry: ListedEntry,
}

/// What a listed name is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListedEntry {
    /// An object (or, on a file system, a node that is not a directory).
    Object(ObjectMeta),
    /// A prefix with objects below it (a directory).
    Prefix,
}

impl Listed {
    /// The object's metadata, if it is one.
    pub fn object(&self) -> Option<&ObjectMeta> {
        match &self.entry {
            ListedEntry::Object(m) => Some(m),
            ListedEntry::Prefix => None,
        }
    }

    /// Whether the name is a prefix (a directory).
    pub fn is_prefix(&self) -> bool {
        matches!(self.entry, ListedEntry::Prefix)
    }
}

/// The condition of a [`Backend::replace`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Replace whatever is there, or create.
    Any,
    /// Replace only the version read ([`ObjectMeta::version`]): an object
    /// written since makes the replace fail with
    /// [`io::ErrorKind::AlreadyExists`] (a remote store's 412). A file
    /// system checks the version and renames; writers that race there hold
    /// the object's lock ([`Backend::lock`]).
    Version(Version),
}

/// An object open for reading: get and get range.
#[allow(clippy::len_without_is_empty)]
pub trait ObjectReader: Send + Sync + fmt::Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were
    /// read (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// The length of the object (of an append-only object: as of now).
    fn len(&self) -> io::Result<u64>;
    /// The object's metadata as its open found it, where the open gives it
    /// (a file opened for reading: its `fstat` then, what
    /// [`Backend::head`] said of it at that moment); `None` elsewhere.
    fn opened_meta(&self) -> Option<ObjectMeta> {
        None
    }
}

/// An append-only object open for appending ([`Backend::open_log`]): the
/// one appender holds the object's lock.
pub trait LogObject: ObjectReader {
    /// The object as a reader (for the walks that read what it holds).
    fn as_reader(&self) -> &dyn ObjectReader;
    /// Writes `data` at `at`, the end of the object as its appender knows
    /// it, and makes it durable (`fdatasync` on a file system). An error of
    /// either step leaves the end unknown: [`BackendError::Unsynced`] after a
    /// failed sync, [`BackendError::Io`] after a failed write, which may
    /// have written part of `data`; the appender poisons its handle in both
    /// cases (a reader of the object finds at most a torn tail).
    fn append(&self, at: u64, data: &[u8]) -> Result<(), BackendError>;
    /// Cuts the object to `len` bytes (a torn tail after the last whole
    /// record) and makes the new length durable. Only the bytes that no
    /// acknowledged append wrote are ever cut.
    fn truncate(&self, len: u64) -> Result<(), BackendError>;
    /// Makes what was appended by anyone durable (a reader that records how
    /// far the object is whole first syncs it).
    fn sync(&self) -> Result<(), BackendError>;
}

/// A large immutable object being written piece by piece (a pack). Nothing
/// is visible under any key until [`Upload::publish`]; dropping an upload
/// that was not published discards its bytes.
pub trait Upload: Send + Sync + fmt::Debug {
    /// Writes `data` at `offset` (pieces are written in order, back to
    /// back).
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), BackendError>;
    /// Makes the bytes written so far durable while more are still to come,
    /// so that the sync before publication has little left to do (a hint: a
    /// backend without such a sync does nothing).
    fn sync_partial(&self) -> Result<(), BackendError>;
    /// Makes every byte written durable: the step before [`Upload::publish`]
    /// (it may run on another thread while other uploads are prepared).
    fn sync_all(&self) -> Result<(), BackendError>;
    /// Publishes the bytes under `key` unless the name is taken. May be
    /// called again (with the same key) to publish once more if the object
    /// was removed meanwhile.
    fn publish(&self, key: &Path) -> Result<Put, BackendError>;
}

/// A lock held on a name ([`Backend::lock`]) until the guard is dropped.
pub trait LockGuard: Send + Sync + fmt::Debug {
    /// Whether the lock still guards its name: `false` if the name's lock
    /// was removed or replaced while the holder waited for it (the thing it
    /// guarded was removed, and perhaps created again with a new lock that
    /// someone else may hold).
    fn is_current(&self) -> io::Result<bool>;
}

/// A place that keeps objects. See the module documentation.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The name of `key` as a person should see it in messages (the local
    /// backend: the absolute path on disk).
    fn display(&self, key: &Path) -> PathBuf;

    /// Creates the immutable object `key` holding `data`, unless an object
    /// of that name exists. On a file system `scratch` is the temp file the
    /// bytes are written and synced in before they are linked under `key`
    /// (format-spec.md 2.3); object stores ignore it. Durable on return,
    /// whichever [`Put`] it was.
    fn put_if_absent(&self, key: &Path, data: &[u8], scratch: &Path) -> Result<Put, BackendError>;

    /// Starts a large immutable object (on a file system, written in the
    /// temp file `scratch`), published later by [`Upload::publish`].
    fn upload(&self, scratch: &Path) -> Result<Box<dyn Upload>, BackendError>;

    /// Whether a write can leave its `scratch` name behind after a crash
    /// (a file system's temp files, which their writers remove later):
    /// false where every write is published whole by one request and no
    /// scratch name is ever written (an object store), so that nothing
    /// needs listing to look for them.
    fn leaves_scratch(&self) -> bool {
        true
    }

    /// Opens an object for reading. `NotFound` if there is none; anything
    /// that is not an object (a directory, a FIFO, a link) is refused
    /// without waiting, with an error naming what it is
    /// ([`crate::storage::NotRegularFile`]).
    fn open(&self, key: &Path) -> io::Result<Box<dyn ObjectReader>>;

    /// The whole of an immutable object in memory: mapped read-only on a
    /// file system (format-spec.md, "Immutable files"), read elsewhere.
    fn map(&self, key: &Path) -> io::Result<Mapping>;

    /// Metadata of the object `key` (a file system also describes what else
    /// is at the name, never following a link). `NotFound` if absent.
    fn head(&self, key: &Path) -> io::Result<ObjectMeta>;

    /// The objects and sub-prefixes one level below `prefix`, in no
    /// particular order. `NotFound` if the prefix does not exist (a file
    /// system directory that is missing); an empty prefix of an object store
    /// lists as empty.
    fn list(&self, prefix: &Path) -> io::Result<Vec<Listed>>;

    /// Every object at any depth below `prefix`, a prefix that holds only
    /// immutable objects (the loose objects of a blob store: no logs), as
    /// its key relative to `prefix` with its metadata, in no particular
    /// order; a missing prefix lists as empty. An object store answers with
    /// one listing (paginated); the default walks [`Backend::list`], a
    /// request per prefix.
    fn list_objects_below(&self, prefix: &Path) -> io::Result<Vec<(PathBuf, ObjectMeta)>> {
        let mut out = Vec::new();
        let mut todo = vec![PathBuf::new()];
        while let Some(rel) = todo.pop() {
            let listed = match self.list(&prefix.join(&rel)) {
                Ok(l) => l,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for l in listed {
                let key = rel.join(&l.name);
                match l.entry {
                    ListedEntry::Object(meta) => out.push((key, meta)),
                    ListedEntry::Prefix => todo.push(key),
                }
            }
        }
        Ok(out)
    }

    /// Deletes the objects `keys` (those already gone are skipped). The
    /// deletions are durable on return. Returns how many this call deleted.
    fn delete(&self, keys: &[PathBuf]) -> Result<usize, BackendError>;

    /// Replaces `key` whole with `data` (creating it if absent), as
    /// `expect` allows: a reader sees the old bytes or the new, never a
    /// mix. With `durable`, the new bytes survive a crash once this returns
    /// (a file system syncs the temp file `scratch` before renaming it over
    /// the key, and the directory after); without, they may be lost or
    /// found damaged after a crash (caches that check themselves).
    fn replace(
        &self,
        key: &Path,
        data: &[u8],
        scratch: &Path,
        expect: Expect,
        durable: bool,
    ) -> Result<(), BackendError>;

    /// Moves the object or the prefix `from` (every object below it) to the
    /// name `to`, which must not exist, durably. A file system renames
    /// atomically; an object store copies then deletes, so a crash may leave
    /// both names, never neither.
    fn rename(&self, from: &Path, to: &Path) -> Result<(), BackendError>;

    /// Moves the object `from` to `to`, a name that nothing else writes
    /// (the trash of a gc run, format-spec.md 5.5), as
    /// [`Backend::rename`] does but without checking first that `to` is
    /// free. `NotFound` when `from` is not there.
    fn move_object(&self, from: &Path, to: &Path) -> Result<(), BackendError> {
        self.rename(from, to)
    }

    /// Opens the append-only object `key` to append to it (it must exist:
    /// it is created whole by [`Backend::put_if_absent`]). The caller holds
    /// the object's lock. The names of append-only objects end in `.log`:
    /// an object store keeps such an object as a first object and one
    /// immutable segment per append, and reads it whole from them.
    fn open_log(&self, key: &Path) -> io::Result<Box<dyn LogObject>>;

    /// Takes the lock `name`, shared or exclusive. With `wait` false,
    /// `Ok(None)` when another holder conflicts. `NotFound` if the name's
    /// parent prefix does not exist (what it guards was removed).
    fn lock(
        &self,
        name: &Path,
        kind: LockKind,
        wait: bool,
    ) -> io::Result<Option<Box<dyn LockGuard>>>;

    /// [`Backend::lock`] for a caller that only reads while it holds the
    /// lock (fsck's second look at a torn tail, a dry run of gc): it needs
    /// no write where the lock's file exists (a file system locks it
    /// through a read-only descriptor where it cannot be written: a
    /// read-only mount, another user's store); where the file does not
    /// exist and cannot be made, the error is of kind `ReadOnlyFilesystem`
    /// or `PermissionDenied`. Writers take [`Backend::lock`], so that a
    /// store they cannot write refuses them at once.
    fn lock_to_read(
        &self,
        name: &Path,
        kind: LockKind,
        wait: bool,
    ) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.lock(name, kind, wait)
    }

    /// Sets the modification time of `key` to now, so that a grace period
    /// measured from it spares the object (gc's protocol, format-spec.md
    /// 4.7). `Ok(false)` if there is no such object.
    fn touch(&self, key: &Path) -> io::Result<bool>;

    /// Creates the prefix `dir` (a file system's directory, with its
    /// missing parents) if it is missing, and makes its name durable in
    /// every case: a file system syncs the parent directory even when `dir`
    /// was there already, since another process may have created it and not
    /// synced it yet. Object stores have nothing to do.
    fn create_prefix(&self, dir: &Path) -> Result<(), BackendError>;

    /// Makes the names directly below `dir` durable (a file system syncs
    /// the directory: creations, links, renames and removals in it); object
    /// stores have nothing to do.
    fn sync_prefix(&self, dir: &Path) -> Result<(), BackendError>;

    /// Makes the bytes of the object `key` durable as they are now (an
    /// append-only object another process appended to and may not have
    /// synced: its reader records how far it is whole only after this).
    fn sync_object(&self, key: &Path) -> Result<(), BackendError>;

    /// Removes an empty prefix (a file system's empty directory); object
    /// stores have nothing to do. `NotFound` and "not empty" are errors for
    /// the caller to judge.
    fn remove_prefix(&self, dir: &Path) -> io::Result<()>;

    /// Whether [`Backend::rename`] moves a prefix in one step, so that no
    /// reader sees part of it moved: true of a file system (one `rename`),
    /// false of an object store, which copies the objects and then deletes
    /// them, so that meanwhile readers find part of the source.
    fn renames_in_one_step(&self) -> bool {
        true
    }

    /// Whether [`Backend::lock`] excludes every process that may write to
    /// the store: true of a file system (its locks are the kernel's), false
    /// of a remote object store, whose locks exclude the threads of one
    /// process only (appends are ordered there by conditional creates, and
    /// what needs to exclude writers on other machines, gc, refuses to run
    /// or uses its own protocol).
    fn locks_span_writers(&self) -> bool {
        true
    }

    /// The writers' clock of a backend whose locks do not span writers
    /// (format-spec.md 5.5): writers open a window on it when they take the
    /// gc lock shared, and the backend refuses to write a record once a
    /// window is older than its bound. `None` where the locks span writers.
    fn writer_clock(&self) -> Option<&std::sync::Arc<WriterClock>> {
        None
    }

    /// The file system under this backend, for what only a file system has
    /// (fsck's walk for special files where the layout keeps objects).
    fn files(&self) -> Option<&dyn crate::storage::Storage> {
        None
    }
}

/// Reads exactly `buf.len()` bytes at `offset`, failing with
/// [`io::ErrorKind::UnexpectedEof`] if the object is shorter.
pub fn read_exact_at(object: &dyn ObjectReader, buf: &mut [u8], offset: u64) -> io::Result<()> {
    if read_at_most(object, buf, offset)? < buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the object ends before the expected length",
        ));
    }
    Ok(())
}

/// Reads into `buf` at `offset` until it is full or the object ends;
/// returns how many bytes were read.
pub fn read_at_most(object: &dyn ObjectReader, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match object.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// An upload kept in memory and published whole by one
/// `put_if_absent` of its backend: for backends where a put is atomic and
/// nothing is durable before it (memory, object stores). Written in order
/// only.
#[derive(Debug)]
pub struct BufferedUpload<B> {
    backend: B,
    bytes: std::sync::Mutex<Vec<u8>>,
}

impl<B> BufferedUpload<B> {
    /// An empty upload to `backend`.
    pub fn new(backend: B) -> Self {
        BufferedUpload {
            backend,
            bytes: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl<B: Backend> Upload for BufferedUpload<B> {
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), BackendError> {
        let mut bytes = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        if offset != bytes.len() as u64 {
            return Err(BackendError::io(
                "write",
                Path::new("upload"),
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "an upload is written in order: {offset} is not its end {}",
                        bytes.len()
                    ),
                ),
            ));
        }
        bytes.extend_from_slice(data);
        Ok(())
    }

    fn sync_partial(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn sync_all(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn publish(&self, key: &Path) -> Result<Put, BackendError> {
        let bytes = self.bytes.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.backend.put_if_absent(key, &bytes, Path::new(""))
    }
}

/// Reads a whole object into memory, refusing one longer than `max` bytes.
pub fn read_all(object: &dyn ObjectReader, max: u64) -> io::Result<Vec<u8>> {
    let len = object.len()?;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the object is {len} bytes, more than the limit of {max}"),
        ));
    }
    let len = usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "object too large"))?;
    let mut buf = vec![0u8; len];
    read_exact_at(object, &mut buf, 0)?;
    Ok(buf)
}

#[cfg(test)]
mod tests;
