//! Batch writes: the parallel hash-and-compress pipeline and the pack writer.
//!
//! Worker threads read, hash and compress items, each into segments of about
//! [`SEGMENT_BYTES`] of encoded objects; the calling thread appends each
//! segment to one temp pack file with one write, then writes the index, syncs
//! both once and publishes them (format-spec.md, "Writing a pack").

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::backend::Upload;
use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::object;
use crate::pack::{self, PackEntry};
use crate::parallel::{self, Sink};
use crate::store::{BatchOutcome, BatchProgress, BlobStore};

/// Batch puts: many blobs as one pack (format-spec.md 2.5).
impl BlobStore {
    /// Stores many blobs as one pack: hashes and compresses on
    /// [`Options::threads`](crate::Options::threads) threads, writes one pack file and one index, and
    /// syncs each once. Content already in the store (or repeated within the
    /// batch) is not stored again.
    ///
    /// `read(i)` produces the content of item `i` for `i in 0..count`; it is
    /// called from worker threads. Returns the ids in input order. On any error
    /// (including a failing `read`) nothing is published.
    pub fn put_batch<F>(
        &self,
        count: usize,
        read: F,
        progress: &mut dyn FnMut(BatchProgress),
    ) -> Result<BatchOutcome>
    where
        F: Fn(usize) -> io::Result<Vec<u8>> + Sync,
    {
        self.put_batch_buffered(
            count,
            |i, buf| {
                *buf = read(i)?;
                Ok(())
            },
            progress,
        )
    }

    /// [`BlobStore::put_batch`] with the content read into a buffer:
    /// `read(i, buf)` appends the content of item `i` to `buf`, which it is
    /// given empty; each worker reuses one buffer from item to item, so
    /// reading many items (files, say) allocates little. `progress` is
    /// called as the pack grows, every few dozen items or megabyte.
    pub fn put_batch_buffered<F>(
        &self,
        count: usize,
        read: F,
        progress: &mut dyn FnMut(BatchProgress),
    ) -> Result<BatchOutcome>
    where
        F: Fn(usize, &mut Vec<u8>) -> io::Result<()> + Sync,
    {
        put_batch(self, count, &read, progress, |_, _| ()).map(|(o, ())| o)
    }

    /// [`BlobStore::put_batch_buffered`] that runs `meanwhile(ids, sizes)`
    /// (the id and raw size of every item, in input order) on the calling
    /// thread once every item is hashed, while another thread makes the
    /// pack durable and publishes it. The batch returns once both are done,
    /// so what `meanwhile` prepares (a log record referencing the items,
    /// say) is still written only after the pack is durable. It is not run
    /// if the batch fails before; its result is returned beside the
    /// outcome, or dropped if publishing the pack fails.
    pub fn put_batch_buffered_then<F, M, T>(
        &self,
        count: usize,
        read: F,
        progress: &mut dyn FnMut(BatchProgress),
        meanwhile: M,
    ) -> Result<(BatchOutcome, T)>
    where
        F: Fn(usize, &mut Vec<u8>) -> io::Result<()> + Sync,
        M: FnOnce(&[BlobId], &[u64]) -> T,
    {
        put_batch(self, count, &read, progress, meanwhile)
    }
}

/// Encoded bytes a worker gathers before handing them to the pack writer.
const SEGMENT_BYTES: usize = 1 << 20;
/// Items a worker handles at most per segment (so progress moves on when
/// the items are already stored and add no bytes).
const SEGMENT_ITEMS: usize = 64;
/// A worker's buffers keep their memory between items up to this size; a
/// larger one (grown for a large item) is freed after it.
const KEEP_BUFFER: usize = 8 << 20;

/// Bytes buffered before the pack writer issues a write.
const WRITE_BUFFER: usize = 1 << 20;

/// Bytes of a pack written but not yet synced after which the pack writer
/// syncs its temp file while the workers go on: the sync that publishes the
/// pack then writes only what came after, so the serial end of a batch does
/// not grow with the pack.
const SYNC_EVERY: u64 = 1 << 20;

/// Writes one pack under a temp name; [`PackWriter::finish`] publishes it.
/// Dropping an unfinished writer removes its temp file.
pub(crate) struct PackWriter<'a> {
    store: &'a BlobStore,
    upload: Box<dyn Upload>,
    offset: u64,
    /// Bytes of the temp file made durable by an early sync.
    synced: u64,
    buffer: Vec<u8>,
    hasher: blake3::Hasher,
    entries: Vec<PackEntry>,
}

impl<'a> PackWriter<'a> {
    pub(crate) fn create(store: &'a BlobStore) -> Result<Self> {
        store.ensure_writable()?;
        let tmp_path = store.new_tmp_path("pack");
        let upload = store
            .backend()
            .upload(&tmp_path)
            .map_err(|e| store.backend_error(e))?;
        let mut w = Self {
            store,
            upload,
            offset: 0,
            synced: 0,
            buffer: Vec::with_capacity(WRITE_BUFFER),
            hasher: blake3::Hasher::new(),
            entries: Vec::new(),
        };
        w.append(&pack::pack_header())?;
        Ok(w)
    }

    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.hasher.update(bytes);
        if bytes.len() >= WRITE_BUFFER {
            // Large enough to be written as it is, without a copy.
            self.flush()?;
            self.upload
                .write_at(bytes, self.offset)
                .map_err(|e| self.store.backend_error(e))?;
            self.offset += bytes.len() as u64;
            return Ok(());
        }
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
        self.upload
            .write_at(&self.buffer, start)
            .map_err(|e| self.store.backend_error(e))?;
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

    /// Appends a segment of encoded objects laid back to back; `objects`
    /// gives each one's id, raw length, and offset and length inside
    /// `bytes`.
    fn add_segment(&mut self, bytes: &[u8], objects: impl Iterator<Item = Stored>) -> Result<()> {
        let base = self.offset;
        self.append(bytes)?;
        self.entries.extend(objects.map(|o| PackEntry {
            id: o.id,
            offset: base + o.at as u64,
            stored_len: o.len as u64,
            raw_len: o.raw_len,
        }));
        self.sync_early()
    }

    /// Syncs what was written of the temp file once [`SYNC_EVERY`] bytes
    /// wait (the bytes still buffered stay for later). Only the temp file
    /// is concerned: nothing is published, so a crash leaves a temp file as
    /// before (format-spec.md 2.5, step 2). A failed sync poisons the store
    /// as any other.
    fn sync_early(&mut self) -> Result<()> {
        let written = self.offset - self.buffer.len() as u64;
        if written - self.synced < SYNC_EVERY {
            return Ok(());
        }
        self.upload
            .sync_partial()
            .map_err(|e| self.store.backend_error(e))?;
        self.synced = written;
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
        let name = hex::encode(checksum);
        let index_tmp = self.store.new_tmp_path("idx");
        // Steps 2 and 3 of format-spec.md 2.5 at once: the pack is synced on
        // another thread while the index is built, written and synced; both
        // are durable before either is published.
        let (store, upload) = (self.store, &self.upload);
        let entries = &mut self.entries;
        let index_upload = std::thread::scope(|s| {
            let pack_synced = s.spawn(move || upload.sync_all());
            let index_synced = (|| {
                let index = pack::build_index(entries, &checksum);
                let up = store
                    .backend()
                    .upload(&index_tmp)
                    .map_err(|e| store.backend_error(e))?;
                up.write_at(&index, 0)
                    .and_then(|()| up.sync_all())
                    .map_err(|e| store.backend_error(e))?;
                Ok(up)
            })();
            let pack_synced = pack_synced
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                .map_err(|e| store.backend_error(e));
            pack_synced.and(index_synced)
        })?;
        // Dropping the uploads afterwards removes their temp files (the
        // published names are links of their own).
        store.publish_pack(&name, &*self.upload, &*index_upload)?;
        Ok((name, pack_len))
    }
}

/// One item of a batch, as a worker found it.
struct Item {
    index: usize,
    id: BlobId,
    raw_len: u64,
    /// Where its encoding is in the segment's bytes, if it is new.
    stored: Option<(usize, usize)>,
}

/// An object in a segment: its place in the segment's bytes.
struct Stored {
    id: BlobId,
    raw_len: u64,
    at: usize,
    len: usize,
}

/// What a worker hands to the pack writer: items and the encodings of the
/// new ones, back to back.
#[derive(Default)]
struct Segment {
    items: Vec<Item>,
    bytes: Vec<u8>,
}

/// The batch put: `meanwhile(ids, sizes)` runs on the calling thread, once
/// every item is hashed, while another thread syncs and publishes the pack;
/// the batch returns once both are done (the pack durable and visible).
pub(crate) fn put_batch<T>(
    store: &BlobStore,
    count: usize,
    read: &(dyn Fn(usize, &mut Vec<u8>) -> io::Result<()> + Sync),
    progress: &mut dyn FnMut(BatchProgress),
    meanwhile: impl FnOnce(&[BlobId], &[u64]) -> T,
) -> Result<(BatchOutcome, T)> {
    store.ensure_writable()?;
    store.refresh_packs()?;
    let mut ids = vec![None; count];
    let mut sizes = vec![0u64; count];
    let mut outcome = BatchOutcome::default();
    let mut writer: Option<PackWriter<'_>> = None;
    let mut done = 0usize;
    let next = AtomicUsize::new(0);
    let claimed: Mutex<HashSet<BlobId>> = Mutex::new(HashSet::new());
    parallel::workers(
        store.options().threads.min(count),
        2,
        |sink| work(store, count, read, &next, &claimed, sink),
        |segment: Segment| {
            let new = segment.items.iter().filter_map(|item| {
                item.stored.map(|(at, len)| Stored {
                    id: item.id,
                    raw_len: item.raw_len,
                    at,
                    len,
                })
            });
            if !segment.bytes.is_empty() {
                let w = match writer.as_mut() {
                    Some(w) => w,
                    None => writer.insert(PackWriter::create(store)?),
                };
                w.add_segment(&segment.bytes, new)?;
            }
            for item in &segment.items {
                ids[item.index] = Some(item.id);
                sizes[item.index] = item.raw_len;
                outcome.raw_bytes += item.raw_len;
            }
            done += segment.items.len();
            progress(BatchProgress {
                items_done: done,
                items_total: count,
                bytes_done: outcome.raw_bytes,
            });
            Ok(())
        },
    )?;

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
    let Some(writer) = writer else {
        let t = meanwhile(&outcome.ids, &outcome.sizes);
        return Ok((outcome, t));
    };
    outcome.new_objects = writer.len();
    let (finished, t) = std::thread::scope(|s| {
        let publishing = s.spawn(move || writer.finish());
        let t = meanwhile(&outcome.ids, &outcome.sizes);
        let finished = publishing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (finished, t)
    });
    let (name, bytes) = finished?;
    outcome.pack = Some(name);
    outcome.pack_bytes = bytes;
    // The new pack may break the rule of the small packs' sizes: merge
    // them (format-spec.md 2.11), within the writer's budget. The batch is
    // durable already; only a failed sync (the store poisoned) fails it.
    match store.merge_small_packs() {
        Ok(merged) => outcome.merged_packs = merged.merged_packs,
        Err(e) if e.fails_the_write() => return Err(e),
        Err(_) => {}
    }
    Ok((outcome, t))
}

/// A worker: takes items until none is left (or the caller stops), reads,
/// hashes and, when new, encodes each into its current segment, and sends
/// the segment when it is full and at the end.
fn work(
    store: &BlobStore,
    count: usize,
    read: &(dyn Fn(usize, &mut Vec<u8>) -> io::Result<()> + Sync),
    next: &AtomicUsize,
    claimed: &Mutex<HashSet<BlobId>>,
    sink: &Sink<'_, Segment>,
) -> Result<()> {
    let level = store.options().compression_level;
    let (mut data, mut scratch) = (Vec::new(), Vec::new());
    let mut segment = Segment::default();
    while !sink.stopped() {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= count {
            break;
        }
        data.clear();
        read(index, &mut data).map_err(|source| Error::Source {
            name: format!("item {index}"),
            source,
        })?;
        store.len_limit(data.len() as u64)?;
        let id = BlobId::of(&data);
        let new = !store.exists_cached(&id)?
            && claimed.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        let stored = if new {
            let at = segment.bytes.len();
            object::encode_into(&data, level, &mut segment.bytes, &mut scratch)
                .map_err(|e| store.io_error("compress", store.base(), e))?;
            Some((at, segment.bytes.len() - at))
        } else {
            None
        };
        segment.items.push(Item {
            index,
            id,
            raw_len: data.len() as u64,
            stored,
        });
        for buf in [&mut data, &mut scratch] {
            if buf.capacity() > KEEP_BUFFER {
                *buf = Vec::new();
            }
        }
        if (segment.bytes.len() >= SEGMENT_BYTES || segment.items.len() >= SEGMENT_ITEMS)
            && !sink.send(std::mem::take(&mut segment))
        {
            return Ok(());
        }
    }
    if !segment.items.is_empty() {
        sink.send(segment);
    }
    Ok(())
}
