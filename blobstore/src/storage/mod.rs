//! The file systems under [`FileBackend`](crate::backend::FileBackend): a
//! [`Storage`] is rooted at one directory and addresses files by *relative*
//! paths below it. Callers never see absolute paths of the backend, so:
//!
//! - no path given to the store can name anything outside its root
//!   ([`check_relative`] refuses absolute paths and `..`);
//! - tests swap the real file system ([`LocalStorage`]) for a simulated one
//!   ([`SimStorage`]) that keeps "written" and "durable" images apart, crashes at
//!   a chosen sync, and injects faults (failed fsync, short write, full disk).
//!
//! The trait is shaped like a file system (hard links, directory syncs,
//! locks, modification times) because the protocols of `format-spec.md`
//! (temp file, fsync, link without replacing, directory fsync) and their
//! crash-point analysis are written against these primitives. The blob
//! store and the logs do not use it directly: they use the storage seam,
//! [`Backend`](crate::backend::Backend), which an object store implements
//! too; `FileBackend` builds the seam's operations from these primitives.

mod beneath;
mod local;
pub mod sim;

use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

pub use crate::mmap::Mapping;
pub use local::{LocalStorage, Modes};
pub use sim::SimStorage;

/// How [`Storage::open`] opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Create a new file for reading and writing; fails with
    /// [`io::ErrorKind::AlreadyExists`] if the name is taken.
    CreateNew,
    /// Read and write, creating the file if it does not exist.
    CreateOrOpen,
}

impl OpenMode {
    /// Whether the mode allows writing.
    pub fn writable(self) -> bool {
        !matches!(self, OpenMode::Read)
    }
}

/// What kind of node a name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A regular file: the only kind the store opens as a file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link (never followed).
    Symlink,
    /// A named pipe: opening it for reading waits for a writer.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device (`/dev/null`, a terminal, `/dev/zero`).
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else the system reports.
    Other,
}

impl From<std::fs::FileType> for FileKind {
    fn from(kind: std::fs::FileType) -> Self {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_file() {
            FileKind::Regular
        } else if kind.is_dir() {
            FileKind::Directory
        } else if kind.is_symlink() {
            FileKind::Symlink
        } else if kind.is_fifo() {
            FileKind::Fifo
        } else if kind.is_socket() {
            FileKind::Socket
        } else if kind.is_char_device() {
            FileKind::CharDevice
        } else if kind.is_block_device() {
            FileKind::BlockDevice
        } else {
            FileKind::Other
        }
    }
}

impl FileKind {
    /// The kind with an article, as a message names it ("a FIFO").
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Symlink => "a symbolic link",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Other => "a special file of an unknown kind",
        }
    }
}

/// A store file that is not a regular file: what [`Storage::open`] and
/// [`Storage::map`] return, inside an [`io::Error`] of kind
/// [`io::ErrorKind::InvalidData`], for a FIFO, a socket, a device or a
/// directory found where a file is opened (format-spec.md section 1,
/// "Special files"). [`not_regular`] gets it back out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRegularFile {
    /// The name, as the storage displays it.
    pub path: PathBuf,
    /// What was found there.
    pub found: FileKind,
}

impl fmt::Display for NotRegularFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {}, not a regular file; the store opens nothing else",
            self.path.display(),
            self.found.describe()
        )
    }
}

impl std::error::Error for NotRegularFile {}

/// The error for `found` at `path` (as the storage displays it).
pub fn not_regular_error(path: PathBuf, found: FileKind) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, NotRegularFile { path, found })
}

/// The [`NotRegularFile`] inside `e`, if that is what it is.
pub fn not_regular(e: &io::Error) -> Option<&NotRegularFile> {
    e.get_ref().and_then(|inner| inner.downcast_ref())
}

/// What [`Storage::metadata`] and [`Storage::read_dir`] tell about a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// Length in bytes (0 for directories).
    pub len: u64,
    /// What kind of node the name is.
    pub kind: FileKind,
    /// Whether the name is a directory.
    pub is_dir: bool,
    /// Whether the name is a symbolic link (which the store never follows:
    /// where it expects a file, a link is an error naming it).
    pub is_symlink: bool,
    /// Last modification time.
    pub modified: SystemTime,
    /// Which file the name refers to: a file replaced by another (a rename
    /// over the name) has another id, even at the same length and time.
    pub id: FileId,
}

/// The identity of a file: which file a name or an open handle refers to
/// (device and inode number on POSIX). Two handles, or a handle and a name,
/// with equal ids refer to the same file. While a handle is open its file
/// cannot be freed, so no other file can take its id: comparing the id of
/// an open handle with that of a name proves whether the name still refers
/// to the handle's file (format-spec.md 3, "The writer lock").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    /// The device (file system) holding the file.
    pub dev: u64,
    /// The file's number on that device.
    pub ino: u64,
}

/// One entry of [`Storage::read_dir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The file name (one path component).
    pub name: String,
    /// Metadata of the entry itself (symlinks are not followed).
    pub metadata: Metadata,
}

/// An open file of a [`Storage`].
///
/// All I/O is positional, so one handle can be shared by threads without a
/// cursor. A handle whose `sync_data`/`sync_all` failed must not be trusted for
/// further writes: the caller poisons whatever state depends on it.
#[allow(clippy::len_without_is_empty)]
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read
    /// (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes up to `buf.len()` bytes at `offset`; returns how many were written.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// Current length of the file.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data (and the metadata needed to read it, such as its
    /// length) durable, like `fdatasync(2)`.
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's data and all its metadata durable, like `fsync(2)`.
    fn sync_all(&self) -> io::Result<()>;
    /// Takes an advisory lock on the file. With `wait == false` returns
    /// `Ok(false)` when another holder conflicts. Locks are released by
    /// [`StorageFile::unlock`] or when the handle is dropped.
    fn lock(&self, kind: LockKind, wait: bool) -> io::Result<bool>;
    /// Releases a lock taken by [`StorageFile::lock`].
    fn unlock(&self) -> io::Result<()>;
    /// Sets the modification time (used to freshen objects for gc).
    fn set_modified(&self, time: SystemTime) -> io::Result<()>;
    /// The identity of the open file (`fstat`), which stays that of the file
    /// the handle opened even after its name was removed or replaced.
    fn file_id(&self) -> io::Result<FileId>;
    /// The file's metadata as its open found it, for a file opened for
    /// reading only where the open looked it up (the local file system's
    /// `fstat` of the new descriptor); `None` elsewhere.
    fn opened_metadata(&self) -> Option<Metadata> {
        None
    }
}

/// Advisory lock kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// Many holders at once.
    Shared,
    /// One holder, no shared holders.
    Exclusive,
}

/// A rooted file system. See the module documentation.
pub trait Storage: Send + Sync + fmt::Debug {
    /// The path a person should see for `path` in messages (for the local backend,
    /// the absolute path on disk).
    fn display_path(&self, path: &Path) -> PathBuf;
    /// Creates a directory and its missing parents. Creating an existing
    /// directory succeeds. New directory entries are not durable until the
    /// parent is synced with [`Storage::sync_dir`].
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Opens a file. Symbolic links are never followed, and anything but a
    /// regular file (a FIFO, a socket, a device, a directory) is refused
    /// with a [`NotRegularFile`] error, without waiting: no caller can block
    /// on a FIFO planted in the store or read a device.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>>;
    /// Metadata of a name, without following symbolic links.
    fn metadata(&self, path: &Path) -> io::Result<Metadata>;
    /// The identity of the file a name refers to, without following a
    /// symbolic link (`lstat`).
    fn file_id(&self, path: &Path) -> io::Result<FileId>;
    /// Lists a directory (without `.` and `..`), in no particular order.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>>;
    /// Lists a directory as [`Storage::read_dir`] does, each name with its
    /// kind only: where the listing itself says what an entry is (on
    /// Linux, the `d_type` of most file systems), no entry is looked up.
    fn read_dir_kinds(&self, path: &Path) -> io::Result<Vec<(String, FileKind)>> {
        Ok(self
            .read_dir(path)?
            .into_iter()
            .map(|e| (e.name, e.metadata.kind))
            .collect())
    }
    /// Publishes `from` under the name `to` without ever replacing an existing
    /// `to` (a hard link on POSIX): fails with [`io::ErrorKind::AlreadyExists`]
    /// if `to` exists. `from` stays; the caller removes it.
    fn link_noreplace(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Renames `from` to `to`, atomically replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of a directory (creations, links, renames, removals)
    /// durable, like `fsync(2)` on the directory.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// A read-only view of a whole file that is never modified after it was
    /// published (format-spec.md, "Immutable files"). The local backend maps it
    /// into memory; others may read it. Refuses what is not a regular file,
    /// as [`Storage::open`] does.
    fn map(&self, path: &Path) -> io::Result<Mapping>;
}

/// Whether `file` (an open handle) is still the file named `path`: `false`
/// if the name was removed, or now names another file (removed and created
/// again, or replaced by a rename). A lock taken on a handle protects the
/// name only while this holds.
pub fn still_named(storage: &dyn Storage, file: &dyn StorageFile, path: &Path) -> io::Result<bool> {
    let held = file.file_id()?;
    match storage.file_id(path) {
        Ok(named) => Ok(named == held),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Refuses paths that could leave the storage root: absolute paths, `..`,
/// prefixes and empty paths.
pub fn check_relative(path: &Path) -> io::Result<()> {
    let mut any = false;
    for c in path.components() {
        match c {
            Component::Normal(_) => any = true,
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("path {} leaves the store", path.display()),
                ));
            }
        }
    }
    if any {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, "empty path"))
    }
}

/// The error for a symbolic link met inside the store (`path` as the
/// storage displays it).
pub fn symlink_error(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} is a symbolic link; the store never follows links",
            path.display()
        ),
    )
}

/// Reads exactly `buf.len()` bytes at `offset`, failing with
/// [`io::ErrorKind::UnexpectedEof`] if the file is shorter.
pub fn read_exact_at(
    file: &dyn StorageFile,
    mut buf: &mut [u8],
    mut offset: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        match file.read_at(buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file ends before the expected length",
                ))
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` at `offset`.
pub fn write_all_at(file: &dyn StorageFile, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.write_at(buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "storage accepted no bytes",
                ))
            }
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads a whole file into memory, refusing files longer than `max` bytes.
pub fn read_all(file: &dyn StorageFile, max: u64) -> io::Result<Vec<u8>> {
    let len = file.len()?;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file is {len} bytes, more than the limit of {max}"),
        ));
    }
    let len = usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
    let mut buf = vec![0u8; len];
    read_exact_at(file, &mut buf, 0)?;
    Ok(buf)
}

/// The parent directory of a relative path (`.` for a top-level name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates a new file, writes `data` to it, syncs it and publishes it under `to`
/// without overwriting, then syncs the parent directory of `to`: the durable
/// creation protocol of format-spec.md ("Publishing a file"). `tmp` must be in
/// the same storage (and on the same file system) as `to`.
///
/// Returns `Ok(true)` if this call published the file, `Ok(false)` if `to`
/// already existed (the directory is synced in that case too, so the existing
/// entry is durable before the caller relies on it). The temp file is removed
/// in either case.
pub fn publish_new_file(
    storage: &dyn Storage,
    tmp: &Path,
    to: &Path,
    data: &[u8],
) -> Result<bool, PublishError> {
    let file = storage
        .open(tmp, OpenMode::CreateNew)
        .map_err(|e| PublishError::Io("create", tmp.to_path_buf(), e))?;
    let result = (|| {
        write_all_at(&*file, data, 0)
            .map_err(|e| PublishError::Io("write", tmp.to_path_buf(), e))?;
        file.sync_all()
            .map_err(|e| PublishError::Sync(tmp.to_path_buf(), e))?;
        drop(file);
        publish_synced(storage, tmp, to)
    })();
    // The temp name is ours alone; removing it never loses data (the published
    // name, if any, is a separate link). Failure to remove leaves garbage that
    // temp-file cleanup collects.
    let _ = storage.remove_file(tmp);
    result
}

/// Publishes an already synced temp file under `to` (see [`publish_new_file`]),
/// syncing the parent of `to`. Does not remove `tmp`.
pub fn publish_synced(storage: &dyn Storage, tmp: &Path, to: &Path) -> Result<bool, PublishError> {
    let created = match storage.link_noreplace(tmp, to) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(PublishError::Io("publish", to.to_path_buf(), e)),
    };
    let dir = parent_dir(to);
    storage
        .sync_dir(dir)
        .map_err(|e| PublishError::Sync(dir.to_path_buf(), e))?;
    Ok(created)
}

/// Why [`publish_new_file`] failed.
#[derive(Debug)]
pub enum PublishError {
    /// An operation other than a sync failed; nothing was published.
    Io(&'static str, PathBuf, io::Error),
    /// A sync failed: the outcome on disk is unknown and the handle that wrote
    /// must be considered poisoned.
    Sync(PathBuf, io::Error),
}

/// Makes a FIFO at `path` (for tests of what the store does with one).
#[cfg(test)]
pub(crate) fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_checked() {
        assert!(check_relative(Path::new("objects/ab/cd")).is_ok());
        assert!(check_relative(Path::new("./a")).is_ok());
        for bad in ["/etc/passwd", "../x", "a/../../b", "", "."] {
            assert!(check_relative(Path::new(bad)).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn parent_of_top_level_name_is_dot() {
        assert_eq!(parent_dir(Path::new("a")), Path::new("."));
        assert_eq!(parent_dir(Path::new("a/b")), Path::new("a"));
    }
}
