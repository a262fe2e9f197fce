//! Batch writes: the parallel hash-and-compress pipeline and the pack writer.
//!
//! Worker threads read, hash and compress items; the calling thread appends
//! the compressed objects to one temp pack file, then writes the index, syncs
//! both once and publishes them (format-spec.md, "Writing a pack").

use std::collections::HashSet;
use std::io;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::object;
use crate::pack::{self, PackEntry};
use crate::parallel;
use crate::storage::{write_all_at, OpenMode, StorageFile};
use crate::store::{BatchOutcome, BatchProgress, BlobStore};

/// Bytes buffered before the pack writer issues a write.
const WRITE_BUFFER: usize = 1 << 20;

/// Writes one pack under a temp name; [`PackWriter::finish`] publishes it.
/// Dropping an unfinished writer removes its temp file.
pub(crate) struct PackWriter<'a> {
    store: &'a BlobStore,
    tmp_path: PathBuf,
    file: Option<Box<dyn StorageFile>>,
    offset: u64,
    buffer: Vec<u8>,
    hasher: blake3::Hasher,
    entries: Vec<PackEntry>,
}

impl<'a> PackWriter<'a> {
    pub(crate) fn create(store: &'a BlobStore) -> Result<Self> {
        store.ensure_writable()?;
        let tmp_path = store.new_tmp_path("pack");
        let file = store
            .storage()
            .open(&tmp_path, OpenMode::CreateNew)
            .map_err(|e| store.io_error("create", &tmp_path, e))?;
        let mut w = Self {
            store,
            tmp_path,
            file: Some(file),
            offset: 0,
            buffer: Vec::with_capacity(WRITE_BUFFER),
            hasher: blake3::Hasher::new(),
            entries: Vec::new(),
        };
        w.append(&pack::pack_header())?;
        Ok(w)
    }

    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.hasher.update(bytes);
        self.buffer.extend_from_slice(bytes);
        self.offset += bytes.len() as u64;
        if self.buffer.len() >= WRITE_BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let start = self.offset - self.buffer.len() as u64;
        if let Some(file) = &self.file {
            write_all_at(&**file, &self.buffer, start)
                .map_err(|e| self.store.io_error("write", &self.tmp_path, e))?;
        }
        self.buffer.clear();
        Ok(())
    }

    /// Appends one encoded object (header and payload).
    pub(crate) fn add(&mut self, id: BlobId, raw_len: u64, stored: &[u8]) -> Result<()> {
        let offset = self.offset;
        self.append(stored)?;
        self.entries.push(PackEntry {
            id,
            offset,
            stored_len: stored.len() as u64,
            raw_len,
        });
        Ok(())
    }

    /// Number of objects added so far.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Writes the trailer and the index, syncs both, publishes them. Returns the
    /// pack's name and size.
    pub(crate) fn finish(mut self) -> Result<(String, u64)> {
        let checksum: [u8; 32] = *self.hasher.finalize().as_bytes();
        self.buffer.extend_from_slice(&checksum);
        self.offset += 32;
        self.flush()?;
        let pack_len = self.offset;
        if let Some(file) = &self.file {
            file.sync_all()
                .map_err(|e| self.store.poison_on_sync(&self.tmp_path, e))?;
        }
        self.file = None;
        let name = hex::encode(checksum);
        let index = pack::build_index(&mut self.entries, &checksum);
        let index_tmp = self.store.new_tmp_path("idx");
        let result = (|| {
            let f = self
                .store
                .storage()
                .open(&index_tmp, OpenMode::CreateNew)
                .map_err(|e| self.store.io_error("create", &index_tmp, e))?;
            write_all_at(&*f, &index, 0)
                .map_err(|e| self.store.io_error("write", &index_tmp, e))?;
            f.sync_all()
                .map_err(|e| self.store.poison_on_sync(&index_tmp, e))?;
            drop(f);
            self.store.publish_pack(&name, &self.tmp_path, &index_tmp)
        })();
        let _ = self.store.storage().remove_file(&index_tmp);
        result.map(|()| (name, pack_len))
    }
}

impl Drop for PackWriter<'_> {
    fn drop(&mut self) {
        // Published packs were linked under their own name; the temp name is
        // only ours, so removing it never loses data.
        self.file = None;
        let _ = self.store.storage().remove_file(&self.tmp_path);
    }
}

struct Item {
    index: usize,
    id: BlobId,
    raw_len: u64,
    encoded: Option<Vec<u8>>,
}

pub(crate) fn put_batch(
    store: &BlobStore,
    count: usize,
    read: &(dyn Fn(usize) -> io::Result<Vec<u8>> + Sync),
    progress: &mut dyn FnMut(BatchProgress),
) -> Result<BatchOutcome> {
    store.ensure_writable()?;
    store.refresh_packs()?;
    let level = store.options().compression_level;
    let claimed: Mutex<HashSet<BlobId>> = Mutex::new(HashSet::new());
    let mut ids = vec![None; count];
    let mut sizes = vec![0u64; count];
    let mut outcome = BatchOutcome::default();
    let mut writer: Option<PackWriter<'_>> = None;
    let mut done = 0usize;

    parallel::run(
        count,
        store.options().threads,
        2,
        |index| prepare(store, index, read, level, &claimed),
        |item| {
            if let Some(encoded) = &item.encoded {
                let w = match writer.as_mut() {
                    Some(w) => w,
                    None => writer.insert(PackWriter::create(store)?),
                };
                w.add(item.id, item.raw_len, encoded)?;
            }
            ids[item.index] = Some(item.id);
            sizes[item.index] = item.raw_len;
            outcome.raw_bytes += item.raw_len;
            done += 1;
            progress(BatchProgress {
                items_done: done,
                items_total: count,
                bytes_done: outcome.raw_bytes,
            });
            Ok(())
        },
    )?;

    if let Some(writer) = writer {
        outcome.new_objects = writer.len();
        let (name, bytes) = writer.finish()?;
        outcome.pack = Some(name);
        outcome.pack_bytes = bytes;
    }
    outcome.ids = ids
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            id.ok_or_else(|| Error::Source {
                name: format!("item {i}"),
                source: io::Error::other("item was not processed"),
            })
        })
        .collect::<Result<_>>()?;
    outcome.sizes = sizes;
    Ok(outcome)
}

fn prepare(
    store: &BlobStore,
    index: usize,
    read: &(dyn Fn(usize) -> io::Result<Vec<u8>> + Sync),
    level: i32,
    claimed: &Mutex<HashSet<BlobId>>,
) -> Result<Item> {
    let data = read(index).map_err(|source| Error::Source {
        name: format!("item {index}"),
        source,
    })?;
    store.len_limit(data.len() as u64)?;
    let id = BlobId::of(&data);
    let new =
        !store.exists_cached(&id)? && claimed.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
    let encoded = if new {
        Some(
            object::encode(&data, level)
                .map_err(|e| store.io_error("compress", store.base(), e))?,
        )
    } else {
        None
    };
    Ok(Item {
        index,
        id,
        raw_len: data.len() as u64,
        encoded,
    })
}
