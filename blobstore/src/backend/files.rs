//! [`FileBackend`]: the seam over a file system ([`Storage`]), following
//! the protocols of format-spec.md: a new object is written in a temp file,
//! synced, linked under its name without ever replacing one, and its
//! directory synced; an append is one write and one `fdatasync`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::{
    Backend, BackendError, Expect, Listed, ListedEntry, LockGuard, LogObject, Mapping, ObjectMeta,
    ObjectReader, Put, Upload, Version,
};
use crate::storage::{
    parent_dir, publish_new_file, publish_synced, still_named, write_all_at, LockKind, Metadata,
    OpenMode, PublishError, Storage, StorageFile,
};

/// A [`Backend`] over a file system: the local one
/// ([`LocalStorage`](crate::storage::LocalStorage)) or the simulated one
/// ([`SimStorage`](crate::storage::SimStorage)). Keys are paths relative
/// to the storage's root; directories are prefixes.
#[derive(Debug, Clone)]
pub struct FileBackend {
    storage: Arc<dyn Storage>,
}

impl FileBackend {
    /// The backend over `storage`.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        FileBackend { storage }
    }

    /// The backend over `storage`, shared.
    pub fn shared(storage: Arc<dyn Storage>) -> Arc<dyn Backend> {
        Arc::new(FileBackend::new(storage))
    }

    /// The file system under it.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Locks `file`, open at `name`: the guard, or `None` where another
    /// holder conflicts and `wait` is false.
    fn lock_file(
        &self,
        name: &Path,
        file: Box<dyn StorageFile>,
        kind: LockKind,
        wait: bool,
    ) -> io::Result<Option<Box<dyn LockGuard>>> {
        if !file.lock(kind, wait)? {
            return Ok(None);
        }
        Ok(Some(Box::new(FileLock {
            storage: Arc::clone(&self.storage),
            name: name.to_path_buf(),
            file,
        })))
    }
}

/// Whether `e` is the file system refusing a write: a read-only file
/// system, or no permission.
pub(crate) fn cannot_write(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::PermissionDenied
    )
}

fn from_publish(e: PublishError) -> BackendError {
    match e {
        PublishError::Io(op, key, source) => BackendError::Io { op, key, source },
        PublishError::Sync(key, source) => BackendError::Unsynced { key, source },
    }
}

/// The metadata of a file as the seam describes an object: its version is
/// the file's identity, length and time, so that a file replaced by another
/// one (a log rewritten, a lease taken over) is another version even when
/// the two agree in length and in time (written within one tick of the
/// file system's clock).
pub(crate) fn object_meta(m: &Metadata) -> ObjectMeta {
    let nanos = m
        .modified
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    ObjectMeta {
        len: m.len,
        modified: m.modified,
        kind: m.kind,
        version: Version(format!("{}:{}:{}:{nanos}", m.id.dev, m.id.ino, m.len)),
    }
}

impl Backend for FileBackend {
    fn display(&self, key: &Path) -> PathBuf {
        self.storage.display_path(key)
    }

    fn put_if_absent(&self, key: &Path, data: &[u8], scratch: &Path) -> Result<Put, BackendError> {
        match publish_new_file(&*self.storage, scratch, key, data) {
            Ok(true) => Ok(Put::Created),
            Ok(false) => Ok(Put::Existed),
            Err(e) => Err(from_publish(e)),
        }
    }

    fn upload(&self, scratch: &Path) -> Result<Box<dyn Upload>, BackendError> {
        let file = self
            .storage
            .open(scratch, OpenMode::CreateNew)
            .map_err(|e| BackendError::io("create", scratch, e))?;
        Ok(Box::new(FileUpload {
            storage: Arc::clone(&self.storage),
            scratch: scratch.to_path_buf(),
            file,
        }))
    }

    fn open(&self, key: &Path) -> io::Result<Box<dyn ObjectReader>> {
        Ok(Box::new(FileReader(
            self.storage.open(key, OpenMode::Read)?,
        )))
    }

    fn map(&self, key: &Path) -> io::Result<Mapping> {
        self.storage.map(key)
    }

    fn head(&self, key: &Path) -> io::Result<ObjectMeta> {
        self.storage.metadata(key).map(|m| object_meta(&m))
    }

    fn list(&self, prefix: &Path) -> io::Result<Vec<Listed>> {
        Ok(self
            .storage
            .read_dir(prefix)?
            .into_iter()
            .map(|e| Listed {
                entry: if e.metadata.is_dir {
                    ListedEntry::Prefix
                } else {
                    ListedEntry::Object(object_meta(&e.metadata))
                },
                name: e.name,
            })
            .collect())
    }

    fn delete(&self, keys: &[PathBuf]) -> Result<usize, BackendError> {
        let mut deleted = 0;
        let mut dirs: Vec<&Path> = Vec::new();
        for key in keys {
            match self.storage.remove_file(key) {
                Ok(()) => {
                    deleted += 1;
                    let dir = parent_dir(key);
                    if !dirs.contains(&dir) {
                        dirs.push(dir);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(BackendError::io("remove", key, e)),
            }
        }
        for dir in dirs {
            self.storage
                .sync_dir(dir)
                .map_err(|e| BackendError::unsynced(dir, e))?;
        }
        Ok(deleted)
    }

    fn replace(
        &self,
        key: &Path,
        data: &[u8],
        scratch: &Path,
        expect: Expect,
        durable: bool,
    ) -> Result<(), BackendError> {
        if let Expect::Version(version) = &expect {
            let now = self
                .head(key)
                .map_err(|e| BackendError::io("inspect", key, e))?;
            if now.version != *version {
                return Err(BackendError::io(
                    "replace",
                    key,
                    io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        "the object was written since it was read",
                    ),
                ));
            }
        }
        let written = (|| {
            let file = if durable {
                let f = self
                    .storage
                    .open(scratch, OpenMode::CreateOrOpen)
                    .map_err(|e| BackendError::io("create", scratch, e))?;
                f.set_len(0)
                    .map_err(|e| BackendError::io("write", scratch, e))?;
                f
            } else {
                self.storage
                    .open(scratch, OpenMode::CreateNew)
                    .map_err(|e| BackendError::io("create", scratch, e))?
            };
            write_all_at(&*file, data, 0).map_err(|e| BackendError::io("write", scratch, e))?;
            if durable {
                file.sync_all()
                    .map_err(|e| BackendError::unsynced(scratch, e))?;
            }
            drop(file);
            self.storage
                .rename(scratch, key)
                .map_err(|e| BackendError::io("rename", key, e))?;
            // Durable: the rename too, as the contract says.
            if durable {
                let dir = parent_dir(key);
                self.storage
                    .sync_dir(dir)
                    .map_err(|e| BackendError::unsynced(dir, e))?;
            }
            Ok(())
        })();
        if written.is_err() {
            // The scratch name is the writer's alone; removing it loses
            // nothing.
            let _ = self.storage.remove_file(scratch);
        }
        written
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<(), BackendError> {
        self.storage
            .rename(from, to)
            .map_err(|e| BackendError::io("move", from, e))?;
        let (a, b) = (parent_dir(from), parent_dir(to));
        for dir in if a == b { vec![a] } else { vec![a, b] } {
            self.storage
                .sync_dir(dir)
                .map_err(|e| BackendError::unsynced(dir, e))?;
        }
        Ok(())
    }

    fn open_log(&self, key: &Path) -> io::Result<Box<dyn LogObject>> {
        Ok(Box::new(FileLog {
            key: key.to_path_buf(),
            file: self.storage.open(key, OpenMode::ReadWrite)?,
        }))
    }

    fn lock(
        &self,
        name: &Path,
        kind: LockKind,
        wait: bool,
    ) -> io::Result<Option<Box<dyn LockGuard>>> {
        let file = self.storage.open(name, OpenMode::CreateOrOpen)?;
        self.lock_file(name, file, kind, wait)
    }

    fn lock_to_read(
        &self,
        name: &Path,
        kind: LockKind,
        wait: bool,
    ) -> io::Result<Option<Box<dyn LockGuard>>> {
        let file = match self.storage.open(name, OpenMode::CreateOrOpen) {
            Ok(file) => file,
            // An advisory lock needs no write access: a lock file that
            // cannot be opened for writing (a read-only file system,
            // another user's store) is locked through a read-only
            // descriptor, which excludes the holders of every other
            // descriptor of the file all the same. One that does not
            // exist and cannot be made is the error.
            Err(e) if cannot_write(&e) => match self.storage.open(name, OpenMode::Read) {
                Ok(file) => file,
                Err(_) => return Err(e),
            },
            Err(e) => return Err(e),
        };
        self.lock_file(name, file, kind, wait)
    }

    fn touch(&self, key: &Path) -> io::Result<bool> {
        let file = match self.storage.open(key, OpenMode::Read) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        file.set_modified(SystemTime::now())?;
        Ok(true)
    }

    fn create_prefix(&self, dir: &Path) -> Result<(), BackendError> {
        self.storage
            .create_dir_all(dir)
            .map_err(|e| BackendError::io("create", dir, e))?;
        let parent = parent_dir(dir);
        self.storage
            .sync_dir(parent)
            .map_err(|e| BackendError::unsynced(parent, e))
    }

    fn sync_prefix(&self, dir: &Path) -> Result<(), BackendError> {
        self.storage
            .sync_dir(dir)
            .map_err(|e| BackendError::unsynced(dir, e))
    }

    fn remove_prefix(&self, dir: &Path) -> io::Result<()> {
        self.storage.remove_dir(dir)
    }

    fn sync_object(&self, key: &Path) -> Result<(), BackendError> {
        self.storage
            .open(key, OpenMode::Read)
            .and_then(|f| f.sync_data())
            .map_err(|e| BackendError::unsynced(key, e))
    }

    fn files(&self) -> Option<&dyn Storage> {
        Some(&*self.storage)
    }
}

/// An object open for reading: a file.
#[derive(Debug)]
struct FileReader(Box<dyn StorageFile>);

impl ObjectReader for FileReader {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn opened_meta(&self) -> Option<ObjectMeta> {
        self.0.opened_metadata().map(|m| object_meta(&m))
    }
}

/// An append-only object: a file open for writing, appended with one write
/// and one `fdatasync`.
#[derive(Debug)]
struct FileLog {
    key: PathBuf,
    file: Box<dyn StorageFile>,
}

impl ObjectReader for FileLog {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }
}

impl LogObject for FileLog {
    fn as_reader(&self) -> &dyn ObjectReader {
        self
    }

    fn append(&self, at: u64, data: &[u8]) -> Result<(), BackendError> {
        write_all_at(&*self.file, data, at)
            .map_err(|e| BackendError::io("append to", &self.key, e))?;
        self.file
            .sync_data()
            .map_err(|e| BackendError::unsynced(&self.key, e))
    }

    fn truncate(&self, len: u64) -> Result<(), BackendError> {
        self.file
            .set_len(len)
            .map_err(|e| BackendError::io("cut the torn tail of", &self.key, e))?;
        // sync_all: the new (smaller) length must be durable before
        // anything is written over the cut bytes.
        self.file
            .sync_all()
            .map_err(|e| BackendError::unsynced(&self.key, e))
    }

    fn sync(&self) -> Result<(), BackendError> {
        self.file
            .sync_data()
            .map_err(|e| BackendError::unsynced(&self.key, e))
    }
}

/// A large object written in a temp file, linked under its name when
/// published; the temp file is removed when the upload is dropped.
#[derive(Debug)]
struct FileUpload {
    storage: Arc<dyn Storage>,
    scratch: PathBuf,
    file: Box<dyn StorageFile>,
}

impl Upload for FileUpload {
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), BackendError> {
        write_all_at(&*self.file, data, offset)
            .map_err(|e| BackendError::io("write", &self.scratch, e))
    }

    fn sync_partial(&self) -> Result<(), BackendError> {
        self.file
            .sync_data()
            .map_err(|e| BackendError::unsynced(&self.scratch, e))
    }

    fn sync_all(&self) -> Result<(), BackendError> {
        self.file
            .sync_all()
            .map_err(|e| BackendError::unsynced(&self.scratch, e))
    }

    fn publish(&self, key: &Path) -> Result<Put, BackendError> {
        match publish_synced(&*self.storage, &self.scratch, key) {
            Ok(true) => Ok(Put::Created),
            Ok(false) => Ok(Put::Existed),
            Err(e) => Err(from_publish(e)),
        }
    }
}

impl Drop for FileUpload {
    fn drop(&mut self) {
        // The temp name is the upload's alone: a published object is a
        // separate link, so removing it never loses data.
        let _ = self.storage.remove_file(&self.scratch);
    }
}

/// A lock: an advisory lock on the file `name`, created if needed.
#[derive(Debug)]
struct FileLock {
    storage: Arc<dyn Storage>,
    name: PathBuf,
    file: Box<dyn StorageFile>,
}

impl LockGuard for FileLock {
    fn is_current(&self) -> io::Result<bool> {
        still_named(&*self.storage, &*self.file, &self.name)
    }
}
