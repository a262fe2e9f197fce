//! Batch writes: the parallel hash-and-compress pipeline and the pack writer.
//!
//! Worker threads read and hash items, gather the new ones in groups of
//! about the group target of the batch's [`Compression`] and compress each
//! group when it is full, into segments of about [`SEGMENT_BYTES`] of
//! encoded groups; the calling thread appends each segment to one temp pack
//! file with one write, then writes the index, syncs both once and
//! publishes them (format-spec.md 2.5 and 2.12). Each worker fills groups
//! of its own, so the batch is compressed on every core.

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::backend::Upload;
use crate::error::{Error, Result};
use crate::group::{self, Compression, GroupSettings};
use crate::id::BlobId;
use crate::pack::{self, GroupEntry, GroupedEntry, PackEntry};
use crate::parallel::{self, Sink};
use crate::store::{BatchOutcome, BatchProgress, BlobStore, LooseListing};

/// Batch puts: many blobs as one pack (format-spec.md 2.5).
impl BlobStore {
    /// Stores many blobs as one pack: hashes and compresses on
    /// [`Options::threads`](crate::Options::threads) threads, writes one pack file and one index, and
    /// syncs each once. Content already in the store (or repeated within the
    /// batch) is not stored again. Objects are grouped and compressed as
    /// [`Options::batch_compression`](crate::Options::batch_compression)
    /// says.
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
        let settings = self.options().batch_compression.settings();
        put_batch(self, settings, count, &read, progress, |_, _| ()).map(|(o, ())| o)
    }

    /// [`BlobStore::put_batch_buffered`] with objects grouped and compressed
    /// as `compression` says rather than as
    /// [`Options::batch_compression`](crate::Options::batch_compression)
    /// (an import, say, with [`Options::import_compression`](crate::Options::import_compression)).
    pub fn put_batch_compressed<F>(
        &self,
        compression: Compression,
        count: usize,
        read: F,
        progress: &mut dyn FnMut(BatchProgress),
    ) -> Result<BatchOutcome>
    where
        F: Fn(usize, &mut Vec<u8>) -> io::Result<()> + Sync,
    {
        put_batch(
            self,
            compression.settings(),
            count,
            &read,
            progress,
            |_, _| (),
        )
        .map(|(o, ())| o)
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
        let settings = self.options().batch_compression.settings();
        put_batch(self, settings, count, &read, progress, meanwhile)
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

/// What a pack writer records for its index, by the pack's version.
enum IndexParts {
    /// Version 1 (rewrites of packs of version 1 only): each object's
    /// encoding.
    V1(Vec<PackEntry>),
    /// Version 2: each object's place in its group, and each group's in
    /// the pack.
    V2 {
        objects: Vec<GroupedEntry>,
        groups: Vec<GroupEntry>,
    },
}

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
    index: IndexParts,
}

impl<'a> PackWriter<'a> {
    /// A writer of a pack of version 2 whose groups are compressed with
    /// `settings` (recorded in its header).
    pub(crate) fn create(store: &'a BlobStore, settings: GroupSettings) -> Result<Self> {
        let mut w = Self::start(
            store,
            IndexParts::V2 {
                objects: Vec::new(),
                groups: Vec::new(),
            },
        )?;
        w.append(&pack::pack_header_v2(settings))?;
        Ok(w)
    }

    /// A writer of a pack of version 1: for rewriting a pack of version 1
    /// (gc), which stays in its version until it is upgraded.
    pub(crate) fn create_v1(store: &'a BlobStore) -> Result<Self> {
        let mut w = Self::start(store, IndexParts::V1(Vec::new()))?;
        w.append(&pack::pack_header())?;
        Ok(w)
    }

    fn start(store: &'a BlobStore, index: IndexParts) -> Result<Self> {
        store.ensure_writable()?;
        let tmp_path = store.new_tmp_path("pack");
        let upload = store
            .backend()
            .upload(&tmp_path)
            .map_err(|e| store.backend_error(e))?;
        Ok(Self {
            store,
            upload,
            offset: 0,
            synced: 0,
            buffer: Vec::with_capacity(WRITE_BUFFER),
            hasher: blake3::Hasher::new(),
            index,
        })
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
        // The buffer holds the last bytes appended, none of them synced.
        assert!(
            self.synced + self.buffer.len() as u64 <= self.offset,
            "buffered bytes before the synced end of the pack"
        );
        let start = self.offset - self.buffer.len() as u64;
        self.upload
            .write_at(&self.buffer, start)
            .map_err(|e| self.store.backend_error(e))?;
        self.buffer.clear();
        Ok(())
    }

    /// Appends one encoded object (header and payload) to a pack of
    /// version 1.
    pub(crate) fn add(&mut self, id: BlobId, raw_len: u64, stored: &[u8]) -> Result<()> {
        let offset = self.offset;
        // Objects back to back after the pack header (format-spec.md 2.3),
        // each an object header and its payload (2.1).
        assert!(
            stored.len() >= crate::object::HEADER_LEN,
            "an object without its header"
        );
        if let IndexParts::V1(entries) = &self.index {
            assert_eq!(
                entries
                    .last()
                    .map_or(pack::PACK_HEADER_LEN, |e| e.offset + e.stored_len),
                offset,
                "an object where the last one does not end"
            );
        }
        self.append(stored)?;
        match &mut self.index {
            IndexParts::V1(entries) => entries.push(PackEntry {
                id,
                offset,
                stored_len: stored.len() as u64,
                raw_len,
            }),
            IndexParts::V2 { .. } => unreachable!("an object encoding in a pack of version 2"),
        }
        Ok(())
    }

    /// Appends encoded groups laid back to back in `bytes` to a pack of
    /// version 2: `groups` gives each one's place in `bytes` and its
    /// objects (id, offset in the group's raw content, raw length), which
    /// it indexes. Syncs the temp file early once enough is written.
    pub(crate) fn add_groups<'g>(
        &mut self,
        bytes: &[u8],
        groups: impl IntoIterator<Item = (usize, usize, &'g [Member])>,
    ) -> Result<()> {
        let base = self.offset;
        self.append(bytes)?;
        let IndexParts::V2 {
            objects,
            groups: table,
        } = &mut self.index
        else {
            unreachable!("a group in a pack of version 1")
        };
        for (at, len, members) in groups {
            let stored = &bytes[at..at + len];
            // Encoded by this process (`group::encode_group`) or checked
            // (`pack::check_stored_group`): the header is whole.
            let header = group::GroupHeader::decode(stored).map_err(|d| {
                self.store.io_error(
                    "append a group",
                    self.store.base(),
                    io::Error::new(io::ErrorKind::InvalidData, d.expected),
                )
            })?;
            let entry = GroupEntry {
                offset: base + at as u64,
                payload_len: header.payload_len,
                raw_len: header.raw_len,
            };
            // Groups back to back from the pack header on, each as long
            // as its header says, holding at least one object, its
            // objects inside its raw content (format-spec.md 2.12); its
            // checksum over what is written (checked in debug builds: a
            // pass over the group).
            assert_eq!(
                table.last().map_or(pack::PACK_HEADER_LEN, GroupEntry::end),
                entry.offset,
                "a group where the last one does not end"
            );
            assert_eq!(
                entry.stored_len(),
                len as u64,
                "a group framed as {len} bytes"
            );
            assert!(!members.is_empty(), "a group of no object");
            assert!(
                members
                    .iter()
                    .all(|m| u64::from(m.offset) + u64::from(m.raw_len) <= u64::from(entry.raw_len)),
                "an object beyond the raw content of its group"
            );
            debug_assert!(
                group::check_group(stored).is_ok(),
                "a group that does not check"
            );
            let number = table.len() as u32;
            table.push(entry);
            objects.extend(members.iter().map(|m| GroupedEntry {
                id: m.id,
                group: number,
                offset: m.offset,
                raw_len: m.raw_len,
            }));
        }
        self.sync_early()
    }

    /// Syncs what was written of the temp file once [`SYNC_EVERY`] bytes
    /// wait (the bytes still buffered stay for later). Only the temp file
    /// is concerned: nothing is published, so a crash leaves a temp file as
    /// before (format-spec.md 2.5, step 2). A failed sync poisons the store
    /// as any other.
    fn sync_early(&mut self) -> Result<()> {
        let written = self.offset - self.buffer.len() as u64;
        assert!(self.synced <= written, "synced past what is written");
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
        match &self.index {
            IndexParts::V1(entries) => entries.len(),
            IndexParts::V2 { objects, .. } => objects.len(),
        }
    }

    /// Groups added so far (0 for a pack of version 1).
    pub(crate) fn groups(&self) -> usize {
        match &self.index {
            IndexParts::V1(_) => 0,
            IndexParts::V2 { groups, .. } => groups.len(),
        }
    }

    /// Writes the trailer and the index, syncs both, publishes them. Returns the
    /// pack's name and size.
    pub(crate) fn finish(mut self) -> Result<(String, u64)> {
        let checksum: [u8; 32] = *self.hasher.finalize().as_bytes();
        // The trailer follows the last object or group (format-spec.md 2.3,
        // 2.12).
        let content_end = match &self.index {
            IndexParts::V1(entries) => entries.last().map(|e| e.offset + e.stored_len),
            IndexParts::V2 { groups, .. } => groups.last().map(GroupEntry::end),
        };
        assert_eq!(
            content_end.unwrap_or(pack::PACK_HEADER_LEN),
            self.offset,
            "a trailer where the last object does not end"
        );
        self.buffer.extend_from_slice(&checksum);
        self.offset += pack::PACK_TRAILER_LEN;
        self.flush()?;
        let pack_len = self.offset;
        let name = hex::encode(checksum);
        let index_tmp = self.store.new_tmp_path("idx");
        // Steps 2 and 3 of format-spec.md 2.5 at once: the pack is synced on
        // another thread while the index is built, written and synced; both
        // are durable before either is published.
        let (store, upload) = (self.store, &self.upload);
        let parts = &mut self.index;
        let index_upload = std::thread::scope(|s| {
            let pack_synced = s.spawn(move || upload.sync_all());
            let index_synced = (|| {
                let index = match parts {
                    IndexParts::V1(entries) => pack::build_index(entries, &checksum),
                    IndexParts::V2 { objects, groups } => {
                        pack::v2::build_index(objects, groups, &checksum)
                    }
                };
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

/// An object of a group being written: its id and where it lies in the
/// group's raw content.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Member {
    pub(crate) id: BlobId,
    pub(crate) offset: u32,
    pub(crate) raw_len: u32,
}

/// Encoded groups laid back to back, with the objects of each: what a
/// worker (or a repack) hands to the pack writer.
#[derive(Default)]
pub(crate) struct Groups {
    /// The groups' encodings (header and payload), back to back.
    pub(crate) bytes: Vec<u8>,
    /// Per group: its place in `bytes` and its members.
    pub(crate) groups: Vec<(usize, usize, Vec<Member>)>,
}

impl Groups {
    /// Whether no group is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Appends the encoding of a group of raw content `raw` holding
    /// `members`, compressed at `level`.
    pub(crate) fn encode(
        &mut self,
        raw: &[u8],
        members: Vec<Member>,
        level: i32,
        scratch: &mut Vec<u8>,
    ) -> io::Result<()> {
        let at = self.bytes.len();
        group::encode_group(raw, level, &mut self.bytes, scratch)?;
        self.groups.push((at, self.bytes.len() - at, members));
        Ok(())
    }

    /// Appends a stored group (header and payload, checked) unchanged.
    pub(crate) fn copy(&mut self, stored: &[u8], members: Vec<Member>) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(stored);
        self.groups.push((at, stored.len(), members));
    }

    /// Appends them to `writer`, which takes the bytes in one write.
    pub(crate) fn write_to(&self, writer: &mut PackWriter<'_>) -> Result<()> {
        writer.add_groups(
            &self.bytes,
            self.groups
                .iter()
                .map(|(at, len, members)| (*at, *len, members.as_slice())),
        )
    }
}

/// Where [`OpenGroup`] puts the groups it closes.
pub(crate) trait GroupSink {
    /// Takes a closed group: its raw content and its members.
    fn take(&mut self, raw: &[u8], members: Vec<Member>) -> io::Result<()>;
}

/// A [`GroupSink`] that compresses each group at once into `out` (a batch
/// worker: the batch is parallel across workers).
pub(crate) struct Encode<'a> {
    pub(crate) out: &'a mut Groups,
    pub(crate) level: i32,
    pub(crate) scratch: &'a mut Vec<u8>,
}

impl GroupSink for Encode<'_> {
    fn take(&mut self, raw: &[u8], members: Vec<Member>) -> io::Result<()> {
        self.out.encode(raw, members, self.level, self.scratch)
    }
}

/// The raw content of a group being gathered, and its members.
#[derive(Default)]
pub(crate) struct OpenGroup {
    raw: Vec<u8>,
    members: Vec<Member>,
}

impl OpenGroup {
    /// Adds an object of less than `target` bytes to the group, first
    /// closing the group into `sink` if the object would take it over
    /// `target`; an object of `target` bytes or more is a group of its own,
    /// handed to `sink` at once (format-spec.md 2.12, "Grouping").
    pub(crate) fn add(
        &mut self,
        id: BlobId,
        data: &[u8],
        target: u32,
        sink: &mut dyn GroupSink,
    ) -> io::Result<()> {
        let raw_len = u32::try_from(data.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "an object of 4 GiB or more in a group",
            )
        })?;
        if raw_len >= target {
            let member = Member {
                id,
                offset: 0,
                raw_len,
            };
            return sink.take(data, vec![member]);
        }
        if self.raw.len() + data.len() > target as usize {
            self.seal(sink)?;
        }
        self.members.push(Member {
            id,
            // Below the target, which fits a u32.
            offset: self.raw.len() as u32,
            raw_len,
        });
        self.raw.extend_from_slice(data);
        Ok(())
    }

    /// Closes the group (if it holds anything) into `sink` and starts a new
    /// one.
    pub(crate) fn seal(&mut self, sink: &mut dyn GroupSink) -> io::Result<()> {
        if self.members.is_empty() {
            return Ok(());
        }
        let members = std::mem::take(&mut self.members);
        sink.take(&self.raw, members)?;
        self.raw.clear();
        if self.raw.capacity() > KEEP_BUFFER {
            self.raw = Vec::new();
        }
        Ok(())
    }
}

/// One item of a batch, as a worker found it.
struct Item {
    index: usize,
    /// `None`: its read asked to skip it ([`skip_item`]).
    id: Option<BlobId>,
    raw_len: u64,
}

/// What a batch's `read(i, buf)` returns for an item it cannot give (a
/// file that turned out unreadable) when the others are to be stored all
/// the same: the item is stored as nothing at all, listed in
/// [`BatchOutcome::skipped`], and its place in the ids holds
/// [`BlobId::from_bytes`]`([0; 32])` (no object has that id, and no
/// caller should use it). Any other error fails the batch.
pub fn skip_item() -> io::Error {
    io::Error::other(Skipped)
}

/// The payload of [`skip_item`]'s error.
#[derive(Debug)]
struct Skipped;

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("item skipped by its reader")
    }
}

impl std::error::Error for Skipped {}

fn is_skip(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Skipped>())
}

/// What a worker hands to the pack writer: the items it has read and
/// hashed, and the groups it has sealed (holding new items of this
/// segment or of earlier ones).
#[derive(Default)]
struct Segment {
    items: Vec<Item>,
    groups: Groups,
}

/// The batch put, its objects grouped and compressed with `settings`:
/// `meanwhile(ids, sizes)` runs on the calling thread, once every item is
/// hashed, while another thread syncs and publishes the pack; the batch
/// returns once both are done (the pack durable and visible).
pub(crate) fn put_batch<T>(
    store: &BlobStore,
    settings: GroupSettings,
    count: usize,
    read: &(dyn Fn(usize, &mut Vec<u8>) -> io::Result<()> + Sync),
    progress: &mut dyn FnMut(BatchProgress),
    meanwhile: impl FnOnce(&[BlobId], &[u64]) -> T,
) -> Result<(BatchOutcome, T)> {
    store.ensure_writable()?;
    store.refresh_packs()?;
    // After the caller's look at the store began (its gc window, on an
    // object store), as the packs' listing is.
    let loose = store.loose_listing_for(count)?;
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
        |sink| {
            let ctx = Shared {
                store,
                settings,
                count,
                read,
                next: &next,
                claimed: &claimed,
                loose: loose.as_ref(),
            };
            work(&ctx, sink)
        },
        |segment: Segment| {
            if !segment.groups.is_empty() {
                let w = match writer.as_mut() {
                    Some(w) => w,
                    None => writer.insert(PackWriter::create(store, settings)?),
                };
                segment.groups.write_to(w)?;
            }
            for item in &segment.items {
                ids[item.index] = Some(item.id.unwrap_or(BlobId::from_bytes([0; 32])));
                if item.id.is_none() {
                    outcome.skipped.push(item.index);
                }
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
    outcome.skipped.sort_unstable();
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

/// What the workers of a batch share.
struct Shared<'a> {
    store: &'a BlobStore,
    settings: GroupSettings,
    count: usize,
    read: &'a (dyn Fn(usize, &mut Vec<u8>) -> io::Result<()> + Sync),
    /// The next item to take.
    next: &'a AtomicUsize,
    /// The new ids a worker has taken on (each stored once).
    claimed: &'a Mutex<HashSet<BlobId>>,
    /// The loose objects as listed ([`BlobStore::loose_listing_for`]), or
    /// `None`: asked per item.
    loose: Option<&'a LooseListing>,
}

/// A worker: takes items until none is left (or the caller stops), reads
/// and hashes each, gathers the new ones in its open group (sealing it into
/// its current segment when full), and sends the segment when it holds
/// enough and at the end.
fn work(ctx: &Shared<'_>, sink: &Sink<'_, Segment>) -> Result<()> {
    let Shared {
        store,
        settings,
        count,
        read,
        next,
        ..
    } = *ctx;
    let (mut data, mut scratch) = (Vec::new(), Vec::new());
    let mut open = OpenGroup::default();
    let mut segment = Segment::default();
    while !sink.stopped() {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= count {
            break;
        }
        data.clear();
        match read(index, &mut data) {
            Ok(()) => add(ctx, index, &data, &mut open, &mut segment, &mut scratch)?,
            // Stored as nothing.
            Err(e) if is_skip(&e) => segment.items.push(Item {
                index,
                id: None,
                raw_len: 0,
            }),
            Err(source) => {
                return Err(Error::Source {
                    name: format!("item {index}"),
                    source,
                })
            }
        }
        for buf in [&mut data, &mut scratch] {
            if buf.capacity() > KEEP_BUFFER {
                *buf = Vec::new();
            }
        }
        if (segment.groups.bytes.len() >= SEGMENT_BYTES || segment.items.len() >= SEGMENT_ITEMS)
            && !sink.send(std::mem::take(&mut segment))
        {
            return Ok(());
        }
    }
    open.seal(&mut Encode {
        out: &mut segment.groups,
        level: settings.level,
        scratch: &mut scratch,
    })
    .map_err(|e| store.io_error("compress", store.base(), e))?;
    if !segment.items.is_empty() || !segment.groups.is_empty() {
        sink.send(segment);
    }
    Ok(())
}

/// Adds item `index`, read into `data`, to the worker's `segment`: hashed,
/// and, if new to the store and to the batch, added to its open group.
fn add(
    ctx: &Shared<'_>,
    index: usize,
    data: &[u8],
    open: &mut OpenGroup,
    segment: &mut Segment,
    scratch: &mut Vec<u8>,
) -> Result<()> {
    let Shared {
        store,
        settings,
        claimed,
        loose,
        ..
    } = *ctx;
    let compress = |e| store.io_error("compress", store.base(), e);
    store.len_limit(data.len() as u64)?;
    let id = BlobId::of(data);
    let new = !store.exists_cached_in(&id, loose)?
        && claimed.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
    if new && u32::try_from(data.len()).is_err() {
        // No group holds 4 GiB (format-spec.md 2.12): such an object
        // (under a raised size limit) is stored loose, durable now.
        store.put(data)?;
    } else if new {
        let mut sink = Encode {
            out: &mut segment.groups,
            level: settings.level,
            scratch,
        };
        open.add(id, data, settings.group_bytes, &mut sink)
            .map_err(compress)?;
    }
    segment.items.push(Item {
        index,
        id: Some(id),
        raw_len: data.len() as u64,
    });
    Ok(())
}
