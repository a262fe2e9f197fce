//! The real file system backend.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileExt as UnixFileExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fs4::fs_std::FileExt as LockExt;
use rustix::fs::{AtFlags, Mode, OFlags};

use super::beneath::{self, DIR_LOOKUP};
use super::{
    check_relative, not_regular_error, symlink_error, DirEntry, FileId, FileKind, LockKind,
    Metadata, OpenMode, Storage, StorageFile,
};
use crate::mmap::Mapping;

/// The permission bits of what a [`LocalStorage`] creates, before the
/// process's umask takes its bits away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// Of files.
    pub file: u32,
    /// Of directories.
    pub dir: u32,
    /// Whether a file renamed over another takes the mode of the one it
    /// replaces (a user's file rewritten keeps the mode its owner gave it).
    pub keep_replaced: bool,
}

impl Modes {
    /// A store's files and directories: readable and writable by the owner
    /// only (format-spec.md, "Permissions"). The default.
    pub const STORE: Modes = Modes {
        file: 0o600,
        dir: 0o700,
        keep_replaced: false,
    };
    /// A user's files written by a command (an export): made as any program
    /// makes them, the umask deciding (`0o666` and `0o777` before it); a
    /// file replaced keeps its mode.
    pub const USER: Modes = Modes {
        file: 0o666,
        dir: 0o777,
        keep_replaced: true,
    };
}

/// A [`Storage`] on the local file system, rooted at one directory.
///
/// The root is opened once; every name below it is resolved from that
/// descriptor without following a symbolic link in any component
/// (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or a walk with
/// `O_NOFOLLOW`: see `beneath.rs`), then acted on with the `*at` calls. A
/// symbolic link planted anywhere inside the store, as a file or as a
/// directory, is refused instead of followed out of it.
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
    dir: Arc<OwnedFd>,
    modes: Modes,
}

/// The directory a `*at` call names its file in: the root's descriptor,
/// or one opened below it.
enum ParentDir<'s> {
    Root(&'s OwnedFd),
    Opened(OwnedFd),
}

impl std::ops::Deref for ParentDir<'_> {
    type Target = OwnedFd;

    fn deref(&self) -> &OwnedFd {
        match self {
            ParentDir::Root(dir) => dir,
            ParentDir::Opened(dir) => dir,
        }
    }
}

impl LocalStorage {
    /// A storage rooted at `root`, which must exist and be a directory.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        let meta = fs::metadata(&root)?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        let dir = rustix::fs::open(&root, DIR_LOOKUP | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Self {
            root,
            dir: Arc::new(dir),
            modes: Modes::STORE,
        })
    }

    /// A storage rooted at `root`, creating the directory (owner-only) if needed.
    pub fn create(root: impl Into<PathBuf>) -> io::Result<Self> {
        Self::create_with(root, Modes::STORE)
    }

    /// A storage rooted at `root` that creates files and directories with
    /// `modes`, creating the directory (and its parents) with them if
    /// needed.
    pub fn create_with(root: impl Into<PathBuf>, modes: Modes) -> io::Result<Self> {
        let root = root.into();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(modes.dir)
            .create(&root)?;
        Ok(Self::open(root)?.with_modes(modes))
    }

    /// This storage, creating files and directories with `modes`.
    pub fn with_modes(self, modes: Modes) -> Self {
        Self { modes, ..self }
    }

    /// [`LocalStorage::create`], and whether the directory was made by this
    /// call (nothing was at `root` before).
    pub fn create_new(root: impl Into<PathBuf>) -> io::Result<(Self, bool)> {
        let root = root.into();
        let made =
            matches!(fs::symlink_metadata(&root), Err(e) if e.kind() == io::ErrorKind::NotFound);
        Ok((Self::create(root)?, made))
    }

    /// Removes the root directory if it is empty: a directory made by
    /// [`LocalStorage::create_new`] for work that failed before anything
    /// was kept in it. A directory that is not empty is an error, and is
    /// left as it is.
    pub fn remove_root_if_empty(&self) -> io::Result<()> {
        fs::remove_dir(&self.root)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Opens `path` below the root (see [`LocalStorage`]).
    fn open_beneath(&self, path: &Path, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
        if path != Path::new(".") {
            check_relative(path)?;
        }
        beneath::open(self.dir.as_fd(), path, flags, mode).map_err(|e| self.explain(e, path))
    }

    /// The parent directory of `path` (opened below the root, or the root
    /// itself for a name in it) and its last name, for the `*at` calls.
    fn parent<'p>(&self, path: &'p Path) -> io::Result<(ParentDir<'_>, &'p OsStr)> {
        check_relative(path)?;
        let mut names = beneath::components(path);
        let name = names
            .pop()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty path"))?;
        if names.is_empty() {
            // A name in the root (`gc.lock`, `config.toml`): the root's
            // descriptor serves, where opening it again cost a writer two
            // system calls of the dozen around each append.
            return Ok((ParentDir::Root(&self.dir), name));
        }
        let parent: PathBuf = names.iter().collect();
        let dir = beneath::open(self.dir.as_fd(), &parent, DIR_LOOKUP, 0)
            .map_err(|e| self.explain(e, path))?;
        Ok((ParentDir::Opened(dir), name))
    }

    /// The entries of directory `path` (without `.` and `..`), each name
    /// (lossy: the store never creates names that are not UTF-8, and fsck
    /// lists them so they are reported, not hidden) with what `info` makes
    /// of its type as the listing says it and of a lookup of it (`None`
    /// from the lookup: removed since the listing, by a concurrent sweep;
    /// `None` from `info`: left out).
    fn list<T>(
        &self,
        path: &Path,
        mut info: impl FnMut(
            rustix::fs::FileType,
            &mut dyn FnMut() -> io::Result<Option<rustix::fs::Stat>>,
        ) -> io::Result<Option<T>>,
    ) -> io::Result<Vec<(String, T)>> {
        let fd = self.open_beneath(path, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        let stat_base = fd.try_clone()?;
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::new(fd)? {
            let entry = entry?;
            let raw = entry.file_name();
            if raw == c"." || raw == c".." {
                continue;
            }
            let mut stat = || match rustix::fs::statat(&stat_base, raw, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => Ok(Some(st)),
                Err(rustix::io::Errno::NOENT) => Ok(None),
                Err(e) => Err(e.into()),
            };
            if let Some(found) = info(entry.file_type(), &mut stat)? {
                out.push((raw.to_string_lossy().into_owned(), found));
            }
        }
        Ok(out)
    }

    /// Runs a `*at` call on the last name of `path`.
    fn at<T>(
        &self,
        path: &Path,
        call: impl FnOnce(&OwnedFd, &OsStr) -> rustix::io::Result<T>,
    ) -> io::Result<T> {
        let (dir, name) = self.parent(path)?;
        call(&dir, name).map_err(|e| self.explain(e.into(), path))
    }

    /// An error of a lookup that met a symbolic link (`ELOOP`, or `ENOTDIR`
    /// when a link stands where a directory is looked up through) says which
    /// name is the link; other errors are returned as they are.
    fn explain(&self, e: io::Error, path: &Path) -> io::Error {
        if !matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
            return e;
        }
        let mut prefix = self.root.clone();
        for name in beneath::components(path) {
            prefix.push(name);
            match fs::symlink_metadata(&prefix) {
                Ok(m) if m.file_type().is_symlink() => return symlink_error(&prefix),
                Ok(m) if m.is_dir() => {}
                _ => break,
            }
        }
        e
    }

    /// Opens the file `path` with `flags`, refusing anything but a regular
    /// file without blocking: `O_NONBLOCK` makes opening a FIFO return at
    /// once (with no writer, a FIFO opened for reading would wait forever),
    /// the descriptor's own `fstat` says what was opened (no race with a
    /// name replaced meanwhile), and `O_NONBLOCK` is cleared again on a
    /// regular file kept for writing, so its locks wait as asked. A name that cannot be
    /// opened at all because of what it is (a directory opened for writing,
    /// a socket) gets the same error.
    fn open_regular(&self, path: &Path, flags: OFlags) -> io::Result<File> {
        self.open_regular_meta(path, flags).map(|(file, _)| file)
    }

    /// [`open_regular`](Self::open_regular), with the file's metadata as
    /// its `fstat` gave it.
    fn open_regular_meta(&self, path: &Path, flags: OFlags) -> io::Result<(File, Metadata)> {
        // O_NOCTTY: a terminal device planted at a store name must not become
        // the controlling terminal of a session leader that opens it.
        let flags = flags | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = match self.open_beneath(path, flags, self.modes.file) {
            Ok(fd) => fd,
            Err(e) => {
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EISDIR | libc::ENXIO | libc::ENODEV | libc::EOPNOTSUPP)
                ) {
                    if let Ok(m) = self.metadata(path) {
                        if !matches!(m.kind, FileKind::Regular | FileKind::Symlink) {
                            return Err(not_regular_error(self.display_path(path), m.kind));
                        }
                    }
                }
                return Err(e);
            }
        };
        let meta = metadata_of_stat(&rustix::fs::fstat(&fd)?);
        let kind = meta.kind;
        if kind != FileKind::Regular {
            return Err(not_regular_error(self.display_path(path), kind));
        }
        // A descriptor opened only for reading is never locked, and Linux
        // ignores `O_NONBLOCK` for reads of a regular file: it keeps the
        // flag, which saves two system calls on every read (a view opens
        // its log and its head).
        if flags.intersects(OFlags::WRONLY | OFlags::RDWR) {
            let status = rustix::fs::fcntl_getfl(&fd)?;
            rustix::fs::fcntl_setfl(&fd, status - OFlags::NONBLOCK)?;
        }
        Ok((File::from(fd), meta))
    }
}

/// Widens a field of `struct stat`, whose C type differs between
/// architectures.
fn wide<T: Into<i128>>(v: T) -> i128 {
    v.into()
}

fn kind_of(kind: rustix::fs::FileType) -> FileKind {
    use rustix::fs::FileType as T;
    match kind {
        T::RegularFile => FileKind::Regular,
        T::Directory => FileKind::Directory,
        T::Symlink => FileKind::Symlink,
        T::Fifo => FileKind::Fifo,
        T::Socket => FileKind::Socket,
        T::CharacterDevice => FileKind::CharDevice,
        T::BlockDevice => FileKind::BlockDevice,
        _ => FileKind::Other,
    }
}

fn metadata_of_stat(st: &rustix::fs::Stat) -> Metadata {
    let kind = kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode));
    let is_dir = kind == FileKind::Directory;
    let secs = wide(st.st_mtime);
    let nanos = u32::try_from(wide(st.st_mtime_nsec)).unwrap_or(0);
    let modified = u64::try_from(secs)
        .ok()
        .and_then(|s| SystemTime::UNIX_EPOCH.checked_add(Duration::new(s, nanos)))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Metadata {
        len: if is_dir {
            0
        } else {
            u64::try_from(wide(st.st_size)).unwrap_or(0)
        },
        kind,
        is_dir,
        is_symlink: kind == FileKind::Symlink,
        modified,
        id: file_id_of_stat(st),
    }
}

fn file_id_of_stat(st: &rustix::fs::Stat) -> FileId {
    FileId {
        dev: u64::try_from(wide(st.st_dev)).unwrap_or(u64::MAX),
        ino: u64::try_from(wide(st.st_ino)).unwrap_or(u64::MAX),
    }
}

fn open_flags(mode: OpenMode) -> OFlags {
    match mode {
        OpenMode::Read => OFlags::RDONLY,
        OpenMode::ReadWrite => OFlags::RDWR,
        OpenMode::CreateNew => OFlags::RDWR | OFlags::CREATE | OFlags::EXCL,
        OpenMode::CreateOrOpen => OFlags::RDWR | OFlags::CREATE,
    }
}

impl Storage for LocalStorage {
    fn display_path(&self, path: &Path) -> PathBuf {
        if path == Path::new(".") {
            self.root.clone()
        } else {
            // `root.join(path)`, allocated once (a join copies the root,
            // then grows the copy for the path).
            let mut shown =
                PathBuf::with_capacity(self.root.as_os_str().len() + path.as_os_str().len() + 1);
            shown.push(&self.root);
            shown.push(path);
            shown
        }
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        if path != Path::new(".") {
            check_relative(path)?;
        }
        if self.open_beneath(path, DIR_LOOKUP, 0).is_ok() {
            return Ok(());
        }
        // One component at a time: each made if missing, then opened
        // without following a link before the next is made inside it.
        let names = beneath::components(path);
        let mode = Mode::from_raw_mode(self.modes.dir);
        beneath::open_dirs(self.dir.as_fd(), &names, Some(mode))
            .map_err(|e| self.explain(e, path))?;
        Ok(())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let (file, meta) = self.open_regular_meta(path, open_flags(mode))?;
        // A file opened only for reading answers its first `len` with the
        // length its open saw: nothing writes through this descriptor, and
        // a length read then is as current as one read a moment later (a
        // reader's view is of some moment after its open). Later calls ask
        // the kernel.
        let opened = match mode {
            OpenMode::Read => Some(meta),
            _ => None,
        };
        Ok(Box::new(LocalFile {
            file,
            opened_len: std::sync::Mutex::new(opened.as_ref().map(|m| m.len)),
            opened,
        }))
    }

    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        if path == Path::new(".") {
            return Ok(metadata_of_stat(&rustix::fs::fstat(&*self.dir)?));
        }
        // The common question, whether a name is there (a batch put asks it
        // of every new blob), answered by one lookup of the whole path
        // beneath the root, opened for its path only: a name that is not
        // there costs that one call instead of three (the parent's open,
        // the `statat`, the close). A name met as a link, or any other
        // error, takes the way below, which says exactly what is there.
        #[cfg(target_os = "linux")]
        {
            check_relative(path)?;
            match beneath::open(self.dir.as_fd(), path, OFlags::PATH, 0) {
                Ok(fd) => return Ok(metadata_of_stat(&rustix::fs::fstat(&fd)?)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(_) => {}
            }
        }
        let st = self.at(path, |dir, name| {
            rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        })?;
        Ok(metadata_of_stat(&st))
    }

    fn file_id(&self, path: &Path) -> io::Result<FileId> {
        let st = if path == Path::new(".") {
            rustix::fs::fstat(&*self.dir)?
        } else {
            self.at(path, |dir, name| {
                rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            })?
        };
        Ok(file_id_of_stat(&st))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.list(path, |_, stat| Ok(stat()?.map(|st| metadata_of_stat(&st))))
            .map(|entries| {
                entries
                    .into_iter()
                    .map(|(name, metadata)| DirEntry { name, metadata })
                    .collect()
            })
    }

    fn read_dir_kinds(&self, path: &Path) -> io::Result<Vec<(String, FileKind)>> {
        self.list(path, |listed, stat| match listed {
            // The file system does not say: looked up, as `read_dir` does
            // every entry.
            rustix::fs::FileType::Unknown => Ok(stat()?.map(|st| metadata_of_stat(&st).kind)),
            known => Ok(Some(kind_of(known))),
        })
    }

    fn link_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from_dir, from_name) = self.parent(from)?;
        self.at(to, |to_dir, to_name| {
            rustix::fs::linkat(&*from_dir, from_name, to_dir, to_name, AtFlags::empty())
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from_dir, from_name) = self.parent(from)?;
        self.at(to, |to_dir, to_name| {
            if self.modes.keep_replaced {
                // The file replaced gives its mode to the one replacing it,
                // before the rename: no moment with other bits.
                if let Ok(st) = rustix::fs::statat(to_dir, to_name, AtFlags::SYMLINK_NOFOLLOW) {
                    if rustix::fs::FileType::from_raw_mode(st.st_mode)
                        == rustix::fs::FileType::RegularFile
                    {
                        rustix::fs::chmodat(
                            &*from_dir,
                            from_name,
                            Mode::from_raw_mode(st.st_mode & 0o7777),
                            AtFlags::empty(),
                        )?;
                    }
                }
            }
            rustix::fs::renameat(&*from_dir, from_name, to_dir, to_name)
        })
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.at(path, |dir, name| {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())
        })
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.at(path, |dir, name| {
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
        })
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let fd = self.open_beneath(path, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        File::from(fd).sync_all()
    }

    fn map(&self, path: &Path) -> io::Result<Mapping> {
        Mapping::map_file(&self.open_regular(path, OFlags::RDONLY)?)
    }
}

#[derive(Debug)]
struct LocalFile {
    file: File,
    /// The length its open saw, for the first [`StorageFile::len`] of a
    /// file opened for reading only.
    opened_len: std::sync::Mutex<Option<u64>>,
    /// The metadata its open saw, of a file opened for reading only.
    opened: Option<Metadata>,
}

impl StorageFile for LocalFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        UnixFileExt::read_at(&self.file, buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        UnixFileExt::write_at(&self.file, buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        if let Some(len) = self
            .opened_len
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Ok(len);
        }
        Ok(self.file.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }
    fn lock(&self, kind: LockKind, wait: bool) -> io::Result<bool> {
        match (kind, wait) {
            (LockKind::Shared, true) => LockExt::lock_shared(&self.file).map(|()| true),
            (LockKind::Exclusive, true) => LockExt::lock_exclusive(&self.file).map(|()| true),
            (LockKind::Shared, false) => LockExt::try_lock_shared(&self.file),
            (LockKind::Exclusive, false) => LockExt::try_lock_exclusive(&self.file),
        }
    }
    fn unlock(&self) -> io::Result<()> {
        LockExt::unlock(&self.file)
    }
    fn set_modified(&self, time: SystemTime) -> io::Result<()> {
        self.file.set_modified(time)
    }
    fn file_id(&self) -> io::Result<FileId> {
        Ok(file_id_of_stat(&rustix::fs::fstat(&self.file)?))
    }
    fn opened_metadata(&self) -> Option<Metadata> {
        self.opened.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name below `root` with its content (`None` for directories).
    fn tree(root: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).expect("ls") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path.clone());
                    out.push((path, None));
                } else {
                    let bytes = fs::read(&path).expect("read");
                    out.push((path, Some(bytes)));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn refuses_to_follow_a_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::NamedTempFile::new().expect("tempfile");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).expect("symlink");
        let storage = LocalStorage::open(dir.path()).expect("open");
        let err = storage
            .open(Path::new("link"), OpenMode::Read)
            .expect_err("followed a symlink");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(storage.map(Path::new("link")).is_err());
    }

    #[test]
    fn no_operation_goes_through_a_linked_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        fs::write(outside.path().join("f"), b"outside").expect("write");
        fs::create_dir(outside.path().join("d")).expect("mkdir");
        fs::create_dir(dir.path().join("objects")).expect("mkdir");
        fs::write(dir.path().join("objects/own"), b"inside").expect("write");
        let link = dir.path().join("objects/ab");
        std::os::unix::fs::symlink(outside.path(), &link).expect("symlink");
        let storage = LocalStorage::open(dir.path()).expect("open");
        let before = tree(outside.path());

        let p = Path::new;
        let s = &storage;
        type Op<'a> = Box<dyn Fn() -> io::Result<()> + 'a>;
        let ops: Vec<(&str, Op)> = vec![
            (
                "open",
                Box::new(|| s.open(p("objects/ab/f"), OpenMode::Read).map(drop)),
            ),
            (
                "create new",
                Box::new(|| s.open(p("objects/ab/n"), OpenMode::CreateNew).map(drop)),
            ),
            (
                "create",
                Box::new(|| s.open(p("objects/ab/n"), OpenMode::CreateOrOpen).map(drop)),
            ),
            (
                "write",
                Box::new(|| s.open(p("objects/ab/f"), OpenMode::ReadWrite).map(drop)),
            ),
            ("map", Box::new(|| s.map(p("objects/ab/f")).map(drop))),
            (
                "metadata",
                Box::new(|| s.metadata(p("objects/ab/f")).map(drop)),
            ),
            (
                "read_dir",
                Box::new(|| s.read_dir(p("objects/ab")).map(drop)),
            ),
            ("sync_dir", Box::new(|| s.sync_dir(p("objects/ab")))),
            (
                "create_dir_all",
                Box::new(|| s.create_dir_all(p("objects/ab/x/y"))),
            ),
            (
                "link into",
                Box::new(|| s.link_noreplace(p("objects/own"), p("objects/ab/own"))),
            ),
            (
                "link from",
                Box::new(|| s.link_noreplace(p("objects/ab/f"), p("objects/stolen"))),
            ),
            (
                "rename",
                Box::new(|| s.rename(p("objects/ab/f"), p("objects/stolen"))),
            ),
            ("remove_file", Box::new(|| s.remove_file(p("objects/ab/f")))),
            ("remove_dir", Box::new(|| s.remove_dir(p("objects/ab/d")))),
        ];
        for (what, op) in ops {
            let text = op().expect_err(what).to_string();
            assert!(
                text.contains(&link.display().to_string()) && text.contains("symbolic link"),
                "{what}: {text}"
            );
        }
        // The link itself is a name in the store: it can be seen and removed,
        // but not listed through.
        let m = storage
            .metadata(p("objects/ab"))
            .expect("lstat of the link");
        assert!(!m.is_dir && m.is_symlink);
        assert_eq!(tree(outside.path()), before);
        storage
            .remove_file(p("objects/ab"))
            .expect("unlink the link");
        assert_eq!(tree(outside.path()), before);
        assert!(!dir.path().join("objects/stolen").exists());
    }

    #[test]
    fn created_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = LocalStorage::open(dir.path()).expect("open");
        storage.create_dir_all(Path::new("a/b")).expect("mkdir");
        drop(
            storage
                .open(Path::new("a/b/f"), OpenMode::CreateNew)
                .expect("create"),
        );
        let mode = fs::metadata(dir.path().join("a/b/f"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "file mode {mode:o}");
        let mode = fs::metadata(dir.path().join("a"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "dir mode {mode:o}");
    }

    #[test]
    fn file_ids_follow_the_file_not_the_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = LocalStorage::open(dir.path()).expect("open");
        let name = Path::new("f");
        let held = s.open(name, OpenMode::CreateNew).expect("create");
        assert!(crate::storage::still_named(&s, &*held, name).expect("id"));
        s.remove_file(name).expect("unlink");
        assert!(!crate::storage::still_named(&s, &*held, name).expect("gone"));
        let again = s.open(name, OpenMode::CreateNew).expect("create again");
        assert!(!crate::storage::still_named(&s, &*held, name).expect("re-created"));
        assert!(crate::storage::still_named(&s, &*again, name).expect("new file"));
        std::os::unix::fs::symlink(dir.path().join("f"), dir.path().join("l")).expect("symlink");
        assert!(!crate::storage::still_named(&s, &*again, Path::new("l")).expect("link"));
    }

    #[test]
    fn link_noreplace_never_overwrites() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = LocalStorage::open(dir.path()).expect("open");
        fs::write(dir.path().join("a"), b"a").expect("write");
        fs::write(dir.path().join("b"), b"b").expect("write");
        let err = storage
            .link_noreplace(Path::new("a"), Path::new("b"))
            .expect_err("overwrote");
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(dir.path().join("b")).expect("read"), b"b");
    }

    #[test]
    fn metadata_says_what_is_there_and_not_found_for_what_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(dir.path().join("objects/ab")).expect("mkdir");
        fs::write(dir.path().join("objects/ab/cd"), b"twelve bytes").expect("write");
        fs::write(dir.path().join("objects/file"), b"x").expect("write");
        let storage = LocalStorage::open(dir.path()).expect("open");
        let m = storage
            .metadata(Path::new("objects/ab/cd"))
            .expect("a regular file");
        assert_eq!((m.kind, m.len, m.is_dir), (FileKind::Regular, 12, false));
        let m = storage
            .metadata(Path::new("objects/ab"))
            .expect("a directory");
        assert!(m.is_dir && m.kind == FileKind::Directory);
        // Not there: the name, or its directory.
        for missing in ["objects/ab/ef", "objects/zz/ef", "nothing/at/all"] {
            let e = storage.metadata(Path::new(missing)).expect_err(missing);
            assert_eq!(e.kind(), io::ErrorKind::NotFound, "{missing}: {e}");
        }
        // A file where a directory is looked up through: an error, not a
        // missing name.
        let e = storage
            .metadata(Path::new("objects/file/cd"))
            .expect_err("through a file");
        assert_ne!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }

    /// A FIFO, a socket (bound while the listener lives), a directory and a
    /// regular file named by their kinds in `dir`.
    fn one_of_each(dir: &Path) -> std::os::unix::net::UnixListener {
        crate::storage::mkfifo(&dir.join("fifo"));
        let socket = std::os::unix::net::UnixListener::bind(dir.join("socket")).expect("bind");
        fs::create_dir(dir.join("dir")).expect("mkdir");
        fs::write(dir.join("file"), b"regular").expect("write");
        socket
    }

    #[test]
    fn a_listing_of_kinds_is_the_listing_without_the_metadata() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _socket = one_of_each(dir.path());
        std::os::unix::fs::symlink("file", dir.path().join("link")).expect("symlink");
        let storage = LocalStorage::open(dir.path()).expect("open");
        let mut kinds = storage.read_dir_kinds(Path::new(".")).expect("kinds");
        kinds.sort_by(|a, b| a.0.cmp(&b.0));
        let mut listed: Vec<(String, FileKind)> = storage
            .read_dir(Path::new("."))
            .expect("list")
            .into_iter()
            .map(|e| (e.name, e.metadata.kind))
            .collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(kinds, listed);
        let names: Vec<(&str, FileKind)> = kinds.iter().map(|(n, k)| (n.as_str(), *k)).collect();
        assert_eq!(
            names,
            [
                ("dir", FileKind::Directory),
                ("fifo", FileKind::Fifo),
                ("file", FileKind::Regular),
                ("link", FileKind::Symlink),
                ("socket", FileKind::Socket),
            ]
        );
        let e = storage
            .read_dir_kinds(Path::new("missing"))
            .expect_err("missing");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(
            storage.read_dir_kinds(Path::new("link")).is_err(),
            "a link is not followed"
        );
    }

    #[test]
    fn only_regular_files_are_opened_and_none_blocks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _socket = one_of_each(dir.path());
        let storage = LocalStorage::open(dir.path()).expect("open");
        // Opening a FIFO for reading with no writer waits forever unless the
        // open refuses it: the modes that would not block come first, so a
        // build without the check fails on them instead of hanging.
        let modes = [OpenMode::ReadWrite, OpenMode::CreateOrOpen, OpenMode::Read];
        for (name, found) in [
            ("fifo", FileKind::Fifo),
            ("socket", FileKind::Socket),
            ("dir", FileKind::Directory),
        ] {
            let shown = dir.path().join(name);
            let check = |what: String, e: io::Error| {
                let typed = super::super::not_regular(&e)
                    .unwrap_or_else(|| panic!("{what}: untyped error {e}"));
                assert_eq!(
                    (typed.path.as_path(), typed.found),
                    (shown.as_path(), found)
                );
                let text = e.to_string();
                assert!(
                    text.contains(&shown.display().to_string()) && text.contains(found.describe()),
                    "{what}: {text}"
                );
            };
            for mode in modes {
                let e = storage
                    .open(Path::new(name), mode)
                    .expect_err(&format!("{name} opened {mode:?}"));
                check(format!("{name} {mode:?}"), e);
            }
            let e = storage.map(Path::new(name)).expect_err(name);
            check(format!("{name} map"), e);
            assert_eq!(storage.metadata(Path::new(name)).expect(name).kind, found);
        }
        // A regular file is opened and read as before.
        let file = storage
            .open(Path::new("file"), OpenMode::ReadWrite)
            .expect("a regular file");
        let mut buf = [0u8; 7];
        super::super::read_exact_at(&*file, &mut buf, 0).expect("read");
        assert_eq!(&buf, b"regular");
        assert!(file.lock(LockKind::Exclusive, true).expect("lock"));
        assert_eq!(
            storage.metadata(Path::new("file")).expect("file").kind,
            FileKind::Regular
        );
        // A FIFO is never created over: the name is taken.
        let e = storage
            .open(Path::new("fifo"), OpenMode::CreateNew)
            .expect_err("created over a FIFO");
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    }
}
