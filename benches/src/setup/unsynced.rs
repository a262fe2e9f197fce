//! Building workloads without waiting for the disk.
//!
//! A conversation written as an agent writes it (one record per step, one
//! `fdatasync` each) takes minutes to build at 10,000 events and more on
//! this kind of machine; the syncs are what the append benches measure, not
//! what their setup needs. [`Unsynced`] is the real file system with every
//! sync a no-op: the engine writes exactly the bytes it always writes, and
//! [`sync_tree`] makes them durable once at the end, before anything is
//! measured.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use jpstore_blobstore::storage::{
    DirEntry, FileId, LocalStorage, LockKind, Mapping, Metadata, OpenMode, Storage, StorageFile,
};
use jpstore_engine::{Store, StoreOptions};

/// [`LocalStorage`] whose `sync_data`, `sync_all` and `sync_dir` do nothing.
#[derive(Debug)]
pub struct Unsynced(LocalStorage);

#[derive(Debug)]
struct UnsyncedFile(Box<dyn StorageFile>);

impl StorageFile for UnsyncedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.0.write_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    fn lock(&self, kind: LockKind, wait: bool) -> io::Result<bool> {
        self.0.lock(kind, wait)
    }
    fn unlock(&self) -> io::Result<()> {
        self.0.unlock()
    }
    fn set_modified(&self, time: SystemTime) -> io::Result<()> {
        self.0.set_modified(time)
    }
    fn file_id(&self) -> io::Result<FileId> {
        self.0.file_id()
    }
}

impl Storage for Unsynced {
    fn display_path(&self, path: &Path) -> std::path::PathBuf {
        self.0.display_path(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.0.create_dir_all(path)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(UnsyncedFile(self.0.open(path, mode)?)))
    }
    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        self.0.metadata(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.0.read_dir(path)
    }
    fn file_id(&self, path: &Path) -> io::Result<FileId> {
        self.0.file_id(path)
    }
    fn link_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.link_noreplace(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.0.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.0.remove_dir(path)
    }
    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
    fn map(&self, path: &Path) -> io::Result<Mapping> {
        self.0.map(path)
    }
}

/// The store initialised in `dir`, opened without syncs. Drop it, then
/// call [`sync_tree`] on `dir` before measuring anything in it.
pub fn open_unsynced(dir: &Path) -> Store {
    let storage = LocalStorage::open(dir).expect("open the store's directory");
    Store::open(
        jpstore_blobstore::backend::FileBackend::shared(Arc::new(Unsynced(storage))),
        StoreOptions::default(),
    )
    .expect("open the store")
}

/// `fsync` of every file and directory below `dir` (and `dir`), so what
/// was written unsynced is durable and no writeback is left to land on a
/// measurement.
pub fn sync_tree(dir: &Path) {
    for e in std::fs::read_dir(dir).expect("list a directory").flatten() {
        let p = e.path();
        let m = std::fs::symlink_metadata(&p).expect("stat");
        if m.is_dir() {
            sync_tree(&p);
        } else if m.is_file() {
            sync_tree_entry(&p);
        }
    }
    sync_tree_entry(dir);
}

/// `fsync` of one file or directory (a directory's entries, not what is
/// below them).
pub fn sync_tree_entry(path: &Path) {
    File::open(path)
        .and_then(|f| f.sync_all())
        .expect("sync a file or directory");
}
