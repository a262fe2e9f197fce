//! gc's trash on a shared store (format-spec.md 5.5): while gc runs on a
//! backend whose locks do not exclude writers on other machines, what the
//! blob store would delete (unreferenced loose objects, packs rewritten,
//! merged or dead) is *moved* below a trash prefix of the run instead, so
//! that gc can restore it if a writer that saw it before the move makes a
//! record referencing it durable. gc deletes the trash only after it has
//! waited out every such writer and read the logs again.
//!
//! Keys keep their place below the prefix: `blobs/objects/ab/...` goes to
//! `<prefix>/blobs/objects/ab/...`. A pack is moved index first and restored
//! pack first, so that no index ever names a missing pack (2.7).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::read_all;
use crate::error::Result;
use crate::id::BlobId;
use crate::pack::Pack;
use crate::store::BlobStore;
use crate::trash_run::{MayMove, Moved, MovedPack, TrashRun};

/// What [`BlobStore::restore_moved`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Loose objects copied back.
    pub loose: usize,
    /// Packs (with their indexes) copied back.
    pub packs: usize,
}

impl BlobStore {
    /// Makes reads look below `root` (`gc/trash` of the engine) for a
    /// loose object they find nowhere else: while a gc run on a shared
    /// store holds a moved object in its trash, a writer that saw the
    /// object before the move may already have made a record referencing
    /// it durable, and the run puts it back only after waiting out every
    /// such writer (format-spec.md 5.5, step 4). Set once, when the store
    /// is opened on such a backend.
    pub fn look_in_trash_below(&self, root: PathBuf) {
        let _ = self.trash_root.set(root);
    }

    /// The key of loose object `id` in the trash of a gc run, if one holds
    /// it ([`BlobStore::look_in_trash_below`]): one listing of the runs and
    /// a look per run, made only for an object missing from the store.
    pub(crate) fn loose_in_trash(&self, id: &BlobId) -> Result<Option<PathBuf>> {
        let Some(root) = self.trash_root.get() else {
            return Ok(None);
        };
        let backend = self.backend();
        let runs = match backend.list(root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io_error("list", root, e)),
        };
        for run in runs.iter().filter(|e| e.is_prefix()) {
            let key = root.join(&run.name).join(self.loose_key(id));
            match backend.head(&key) {
                Ok(_) => return Ok(Some(key)),
                // Not in this run's trash, or put back or deleted since.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.io_error("inspect", &key, e)),
            }
        }
        Ok(None)
    }

    /// The content of loose object `id` from the trash of a gc run
    /// ([`BlobStore::loose_in_trash`]), checked against `id` as any read's.
    pub(crate) fn read_loose_in_trash(&self, id: &BlobId) -> Result<Option<Vec<u8>>> {
        let Some(key) = self.loose_in_trash(id)? else {
            return Ok(None);
        };
        let backend = self.backend();
        let max = self
            .options()
            .max_blob_len
            .saturating_add(crate::object::HEADER_LEN as u64);
        let bytes = match backend.open(&key).and_then(|o| read_all(&*o, max)) {
            Ok(b) => b,
            // Put back or deleted by its run since it was found.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io_error("read", &key, e)),
        };
        crate::object::decode(&bytes, id, self.options().max_blob_len)
            .map(Some)
            .map_err(|d| self.loose_error(&key, &bytes, d))
    }

    /// From now on, what this store would delete goes below `prefix`
    /// instead, each move first allowed by `may_move`.
    pub fn start_trash(&self, prefix: PathBuf, may_move: MayMove) {
        *self.trash.lock().unwrap_or_else(|e| e.into_inner()) = Some(TrashRun {
            prefix,
            may_move,
            moved: Moved::default(),
        });
    }

    /// Ends the trash mode; returns what was moved.
    pub fn end_trash(&self) -> Moved {
        self.trash
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .map(|t| t.moved)
            .unwrap_or_default()
    }

    /// Whether removals go to a trash now.
    pub(crate) fn trashing(&self) -> bool {
        self.trash
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Moves `key` to the trash. `Ok(false)` when it is not there (removed
    /// meanwhile: by a merge whose result holds its objects, or another gc).
    fn move_one(&self, key: &Path) -> Result<bool> {
        let (prefix, may_move) = {
            let trash = self.trash.lock().unwrap_or_else(|e| e.into_inner());
            let Some(t) = trash.as_ref() else {
                return Err(self.io_error(
                    "move to trash",
                    key,
                    io::Error::other("no trash run is open"),
                ));
            };
            (t.prefix.clone(), Arc::clone(&t.may_move))
        };
        may_move().map_err(|e| self.io_error("move to trash", key, e))?;
        let to = prefix.join(key);
        match self.backend().move_object(key, &to) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.backend_error(e)),
        }
    }

    fn record(&self, f: impl FnOnce(&mut Moved)) {
        if let Some(t) = self
            .trash
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            f(&mut t.moved);
        }
    }

    /// Moves loose objects to the trash: `(id, stored bytes)` of each.
    /// Returns the objects and bytes moved.
    pub(crate) fn trash_loose(&self, found: &[(BlobId, PathBuf, u64)]) -> Result<(usize, u64)> {
        let (mut objects, mut bytes) = (0, 0);
        for (id, path, len) in found {
            if self.move_one(path)? {
                self.record(|m| m.loose.push((*id, *len)));
                objects += 1;
                bytes += len;
            }
        }
        Ok((objects, bytes))
    }

    /// Moves packs to the trash, each index before its pack.
    pub(crate) fn trash_packs(&self, packs: &[&&Arc<Pack>]) -> Result<()> {
        for p in packs {
            // The pack is recorded before its index moves: a crash (or a
            // stop) between the two leaves it restorable.
            self.record(|m| {
                m.packs.push(MovedPack {
                    name: p.name.clone(),
                    ids: p.ids().collect(),
                    bytes: p.pack_len,
                })
            });
            self.move_one(&p.index_path)?;
            self.move_one(&p.pack_path)?;
        }
        Ok(())
    }

    /// Copies an object of the trash back to its key, unless something is
    /// there (a writer stored the same content again: the same bytes, since
    /// keys are content addresses). Returns whether it was copied.
    fn restore_key(&self, prefix: &Path, key: &Path) -> Result<bool> {
        let from = prefix.join(key);
        let backend = self.backend();
        let object = match backend.open(&from) {
            Ok(o) => o,
            // Moved back already (a restore that stopped), or never moved.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(self.io_error("open", &from, e)),
        };
        let bytes = read_all(&*object, u64::MAX).map_err(|e| self.io_error("read", &from, e))?;
        let scratch = self.new_tmp_path("restore");
        match backend.put_if_absent(key, &bytes, &scratch) {
            Ok(crate::backend::Put::Created) => Ok(true),
            Ok(crate::backend::Put::Existed) => Ok(false),
            Err(e) => Err(self.backend_error(e)),
        }
    }

    /// Step 3 of gc on a shared store for its own run: copies back from the
    /// trash below `prefix` every loose object `needed` keeps, and every
    /// pack holding one (pack, then index). Does not delete the trash.
    pub fn restore_moved(
        &self,
        prefix: &Path,
        moved: &Moved,
        needed: &dyn Fn(&BlobId) -> bool,
    ) -> Result<Restored> {
        let mut out = Restored::default();
        for (id, _) in &moved.loose {
            if needed(id) && self.restore_key(prefix, &self.loose_key(id))? {
                out.loose += 1;
            }
        }
        for p in &moved.packs {
            if p.ids.iter().any(needed) {
                let (pack, index) = self.pack_keys(&p.name);
                self.restore_key(prefix, &pack)?;
                self.restore_key(prefix, &index)?;
                out.packs += 1;
            }
        }
        if out.packs > 0 {
            self.refresh_packs()?;
        }
        Ok(out)
    }

    /// Copies back everything below `prefix` (the trash of a run that did
    /// not finish): packs before indexes. Returns the objects copied back.
    pub fn restore_all(&self, prefix: &Path) -> Result<usize> {
        let mut keys = self.trash_keys(prefix)?;
        // Indexes last: an index is never published before its pack.
        keys.sort_by_key(|k| k.extension().is_some_and(|e| e == "idx"));
        let mut restored = 0;
        for full in &keys {
            let key = full.strip_prefix(prefix).unwrap_or(full);
            if self.restore_key(prefix, key)? {
                restored += 1;
            }
        }
        if restored > 0 {
            self.refresh_packs()?;
        }
        Ok(restored)
    }

    /// Deletes everything below `prefix`. Returns the objects deleted.
    pub fn empty_trash(&self, prefix: &Path) -> Result<usize> {
        let keys = self.trash_keys(prefix)?;
        self.backend()
            .delete(&keys)
            .map_err(|e| self.backend_error(e))
    }

    fn loose_key(&self, id: &BlobId) -> PathBuf {
        self.loose_path(id)
    }

    /// The keys of pack `name`: its pack file and its index.
    fn pack_keys(&self, name: &str) -> (PathBuf, PathBuf) {
        crate::pack::pack_file_names(&self.base().join(crate::store::PACKS_DIR), name)
    }

    /// Every object below `prefix` (full keys).
    pub fn trash_keys(&self, prefix: &Path) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let mut dirs = vec![prefix.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            let listed = match self.backend().list(&dir) {
                Ok(l) => l,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.io_error("list", &dir, e)),
            };
            for e in listed {
                let path = dir.join(&e.name);
                if e.is_prefix() {
                    dirs.push(path);
                } else {
                    out.push(path);
                }
            }
        }
        out.sort();
        Ok(out)
    }
}
