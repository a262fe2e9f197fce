//! The real file system backend.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt as UnixFileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use fs4::fs_std::FileExt as LockExt;

use super::{check_relative, DirEntry, LockKind, Metadata, OpenMode, Storage, StorageFile};
use crate::mmap::Mapping;

/// Permission bits of files the store creates: readable and writable by the
/// owner only (format-spec.md, "Permissions").
const FILE_MODE: u32 = 0o600;
/// Permission bits of directories the store creates.
const DIR_MODE: u32 = 0o700;

/// A [`Storage`] on the local file system, rooted at one directory.
///
/// Files are opened with `O_NOFOLLOW`, so a symbolic link planted where the
/// store expects a file is refused instead of followed out of the store.
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
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
        Ok(Self { root })
    }

    /// A storage rooted at `root`, creating the directory (owner-only) if needed.
    pub fn create(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&root)?;
        Self::open(root)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn full(&self, path: &Path) -> io::Result<PathBuf> {
        if path == Path::new(".") {
            return Ok(self.root.clone());
        }
        check_relative(path)?;
        Ok(self.root.join(path))
    }
}

fn metadata_of(m: &fs::Metadata) -> Metadata {
    Metadata {
        len: if m.is_dir() { 0 } else { m.len() },
        is_dir: m.is_dir(),
        modified: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    }
}

impl Storage for LocalStorage {
    fn display_path(&self, path: &Path) -> PathBuf {
        if path == Path::new(".") {
            self.root.clone()
        } else {
            self.root.join(path)
        }
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let full = self.full(path)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&full)?;
        // A symlinked directory would let later opens escape the root.
        if fs::symlink_metadata(&full)?.file_type().is_symlink() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is a symbolic link", full.display()),
            ));
        }
        Ok(())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let full = self.full(path)?;
        let mut opts = OpenOptions::new();
        opts.read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(FILE_MODE);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                opts.write(true);
            }
            OpenMode::CreateNew => {
                opts.write(true).create_new(true);
            }
            OpenMode::CreateOrOpen => {
                opts.write(true).create(true);
            }
        }
        let file = opts.open(&full).map_err(|e| symlink_error(e, &full))?;
        Ok(Box::new(LocalFile { file }))
    }

    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        let full = self.full(path)?;
        Ok(metadata_of(&fs::symlink_metadata(full)?))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let full = self.full(path)?;
        let mut out = Vec::new();
        for entry in fs::read_dir(full)? {
            let entry = entry?;
            let meta = match entry.metadata() {
                Ok(m) => m,
                // Removed between listing and stat: a concurrent sweep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let name = match entry.file_name().into_string() {
                Ok(n) => n,
                // The store never creates such names; list them for fsck
                // with a lossy name so they are reported, not hidden.
                Err(os) => os.to_string_lossy().into_owned(),
            };
            out.push(DirEntry {
                name,
                metadata: metadata_of(&meta),
            });
        }
        Ok(out)
    }

    fn link_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(self.full(from)?, self.full(to)?)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(self.full(from)?, self.full(to)?)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(self.full(path)?)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(self.full(path)?)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let full = self.full(path)?;
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&full)
            .map_err(|e| symlink_error(e, &full))?;
        dir.sync_all()
    }

    fn map(&self, path: &Path) -> io::Result<Mapping> {
        let full = self.full(path)?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&full)
            .map_err(|e| symlink_error(e, &full))?;
        Mapping::map_file(&file)
    }
}

/// `O_NOFOLLOW` on a symlink fails with `ELOOP`; say what happened.
fn symlink_error(e: io::Error, full: &Path) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is a symbolic link; the store never follows links",
                full.display()
            ),
        )
    } else {
        e
    }
}

#[derive(Debug)]
struct LocalFile {
    file: File,
}

impl StorageFile for LocalFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        UnixFileExt::read_at(&self.file, buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        UnixFileExt::write_at(&self.file, buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
