//! Merging, rewriting and upgrading packs (format-spec.md 2.7, 2.11 and
//! 2.12): the number of packs stays logarithmic in the size of the store,
//! gc drops unreferenced objects from packs, and packs of version 1 become
//! packs of version 2 when asked.
//!
//! Packs sorted by size must form a geometric progression of factor
//! [`MERGE_FACTOR`]: each at least twice the one before. Where the rule is
//! broken, the smallest packs up to the last break are merged into one,
//! together with any following pack smaller than twice what is merged, so
//! the rule holds again. The count is then at most
//! `log2(store bytes / smallest pack) + 1`, and each byte is copied about
//! once per doubling of the pack it is in.
//!
//! gc merges by this rule over every pack of version 2. A writer, after it
//! publishes a pack, merges by the same rule over the *small* packs only
//! (under [`Options::small_pack_bytes`](crate::Options)), and copies at most
//! [`WRITE_MERGE_FACTOR`] times that in one write: a command never pays
//! for a merge of the large packs, which are left to gc. Packs of version 1
//! are never merged: they keep their version until
//! [`BlobStore::upgrade_packs`] rewrites them (their number is what it was
//! when the store was last written by a build of version 1).
//!
//! Merges and rewrites of packs of version 2 *repack* groups: a group whose
//! kept objects are at least half its raw bytes, and that is at least half
//! the group target of the output, is copied unchanged after its CRC is
//! checked (its other objects, if any, stay in it unindexed); the kept
//! objects of every other group are decompressed, checked against their id
//! and gathered into new groups, compressed as the output's settings say.
//! The new pack and index are published as any writer publishes them, and
//! only then are the inputs' indexes and files unlinked. No lock is taken:
//! see format-spec.md 2.11 for why it is safe against readers, writers,
//! other merges and gc.

use std::collections::HashSet;
use std::io;
use std::sync::Arc;

use crate::backend::ObjectReader;
use crate::batch::{GroupSink, Groups, Member, OpenGroup, PackWriter};
use crate::error::{Error, Result};
use crate::group::{self, Compression, GroupSettings};
use crate::id::BlobId;
use crate::object::{self, HEADER_LEN};
use crate::pack::{Pack, PackEntry, PACK_VERSION_1};
use crate::store::{BlobStore, RewriteOutcome};

/// Each pack, in size order, must be at least this many times the size of
/// the one before.
pub const MERGE_FACTOR: u64 = 2;

/// A merge done by a writer copies at most this many times
/// [`Options::small_pack_bytes`](crate::Options) bytes of packs. With the
/// small packs in progression (less than twice the small limit in all)
/// plus the new pack, a writer's merge fits; the budget matters only for
/// a store whose small packs were never merged (written before merging,
/// or with it off), which then shrinks a budget's worth per write.
pub const WRITE_MERGE_FACTOR: u64 = 3;

/// What a merge did (or, dry, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MergeOutcome {
    /// Packs merged (and removed).
    pub merged_packs: usize,
    /// Objects copied into the new pack (each id once).
    pub objects: usize,
    /// Bytes of the packs merged.
    pub merged_bytes: u64,
    /// The new pack (None if nothing was merged).
    pub new_pack: Option<String>,
    /// Bytes of the new pack.
    pub new_bytes: u64,
    /// Groups of the inputs copied unchanged into the new pack.
    pub groups_copied: usize,
    /// Groups of the new pack compressed anew from the objects of the
    /// inputs' other groups.
    pub groups_encoded: usize,
}

/// Progress of [`BlobStore::upgrade_packs`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpgradeProgress {
    /// Packs of version 1 rewritten so far.
    pub packs_done: usize,
    /// Packs of version 1 to rewrite.
    pub packs_total: usize,
    /// Bytes of those packs rewritten so far.
    pub bytes_done: u64,
    /// Bytes of the packs to rewrite.
    pub bytes_total: u64,
}

/// What [`BlobStore::upgrade_packs`] did (or, dry, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct UpgradeOutcome {
    /// Packs of version 1 rewritten as version 2 (and removed); dry, to
    /// rewrite.
    pub packs: usize,
    /// Their objects.
    pub objects: usize,
    /// Their bytes.
    pub old_bytes: u64,
    /// The packs of version 2 written, one per pack rewritten (none when
    /// dry).
    pub new_packs: Vec<String>,
    /// Their bytes.
    pub new_bytes: u64,
    /// Packs of version 1 left as they were because another process
    /// removed them meanwhile (a merge, gc): their objects are elsewhere.
    pub vanished: usize,
}

/// How many of the smallest of `sizes` (sorted ascending) to merge so that
/// the rest, after the merged pack, is a progression of factor
/// [`MERGE_FACTOR`]: 0 when it already is, else at least 2.
pub fn geometric_rollup(sizes: &[u64]) -> usize {
    let grows = |small: u64, large: u64| large >= small.saturating_mul(MERGE_FACTOR);
    // The last break: every pack after it is at least twice the one before.
    let Some(last_break) = (1..sizes.len())
        .rev()
        .find(|&i| !grows(sizes[i - 1], sizes[i]))
    else {
        return 0;
    };
    let mut count = last_break + 1;
    let mut total: u64 = sizes[..count].iter().fold(0, |a, b| a.saturating_add(*b));
    // A following pack smaller than twice the merged one would break the
    // rule again at once: it joins.
    while count < sizes.len() && !grows(total, sizes[count]) {
        total = total.saturating_add(sizes[count]);
        count += 1;
    }
    count
}

/// Whether a repack copies a group of `raw_len` raw bytes, `kept` of them
/// in objects it keeps, unchanged into an output whose group target is
/// `target` (format-spec.md 2.12, "Repacking").
pub fn copies_group(raw_len: u32, kept: u64, target: u32) -> bool {
    kept.saturating_mul(2) >= u64::from(raw_len)
        && u64::from(raw_len).saturating_mul(2) >= u64::from(target)
}

/// Why a repack stopped before publishing anything.
enum Stop {
    /// An input pack was removed meanwhile (merged or swept by another
    /// process): its objects are in a pack this repack does not know.
    Vanished,
    /// Damage, or an I/O error.
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

/// A group of the pack a repack writes, in the order of the pack.
enum Pending {
    /// A group of an input, stored bytes copied unchanged.
    Copied(Vec<u8>),
    /// The raw content of a new group, to compress.
    Raw(Vec<u8>),
}

/// The groups a repack has decided on and not yet written: new groups are
/// compressed in parallel when enough are waiting (one group per worker),
/// then everything is written in order, so the pack depends only on its
/// inputs and settings.
#[derive(Default)]
struct Deferred {
    groups: Vec<(Pending, Vec<Member>)>,
    bytes: usize,
}

impl GroupSink for Deferred {
    fn take(&mut self, raw: &[u8], members: Vec<Member>) -> io::Result<()> {
        self.bytes += raw.len();
        self.groups.push((Pending::Raw(raw.to_vec()), members));
        Ok(())
    }
}

impl Deferred {
    /// Compresses the new groups at `level` on up to `threads` threads and
    /// returns every group encoded, in order.
    fn encode(&mut self, level: i32, threads: usize) -> io::Result<Groups> {
        let groups = std::mem::take(&mut self.groups);
        self.bytes = 0;
        let raw: Vec<usize> = (0..groups.len())
            .filter(|&i| matches!(groups[i].0, Pending::Raw(_)))
            .collect();
        let encoded: Vec<std::sync::Mutex<Option<io::Result<Vec<u8>>>>> =
            raw.iter().map(|_| std::sync::Mutex::new(None)).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || {
            let mut scratch = Vec::new();
            loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&i) = raw.get(k) else { break };
                let Pending::Raw(content) = &groups[i].0 else {
                    continue;
                };
                let mut out = Vec::new();
                let done =
                    group::encode_group(content, level, &mut out, &mut scratch).map(|()| out);
                *encoded[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(done);
            }
        };
        let workers = threads.clamp(1, raw.len().max(1));
        if workers == 1 {
            work();
        } else {
            std::thread::scope(|s| {
                for _ in 0..workers {
                    s.spawn(work);
                }
            });
        }
        let mut encoded = encoded
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()));
        let mut out = Groups::default();
        for (pending, members) in groups {
            match pending {
                Pending::Copied(stored) => out.copy(&stored, members),
                Pending::Raw(_) => {
                    let stored = encoded
                        .next()
                        .flatten()
                        .ok_or_else(|| io::Error::other("a group was not compressed"))??;
                    out.copy(&stored, members);
                }
            }
        }
        Ok(out)
    }
}

/// A pack being written from the objects of other packs: copied groups,
/// and new groups of objects taken out of the others.
struct Repack<'a> {
    store: &'a BlobStore,
    settings: GroupSettings,
    writer: PackWriter<'a>,
    open: OpenGroup,
    deferred: Deferred,
    stored: Vec<u8>,
    raw: Vec<u8>,
    objects: usize,
    groups_copied: usize,
}

impl<'a> Repack<'a> {
    fn new(store: &'a BlobStore, settings: GroupSettings) -> Result<Self> {
        Ok(Self {
            store,
            settings,
            writer: PackWriter::create(store, settings)?,
            open: OpenGroup::default(),
            deferred: Deferred::default(),
            stored: Vec::new(),
            raw: Vec::new(),
            objects: 0,
            groups_copied: 0,
        })
    }

    /// The open file of input `p`.
    fn input(&self, p: &Pack) -> Result<Arc<dyn ObjectReader>, Stop> {
        match self.store.pack_file(p) {
            Ok(file) => Ok(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Stop::Vanished),
            Err(e) => Err(Stop::Failed(self.store.io_error("open", &p.pack_path, e))),
        }
    }

    fn compress_error(&self, e: io::Error) -> Error {
        self.store.io_error("compress", self.store.base(), e)
    }

    /// Adds the kept objects of a pack of version 2, group by group, in
    /// pack order. `keep` is asked once per object.
    fn add_grouped_pack(
        &mut self,
        p: &Pack,
        keep: &mut dyn FnMut(&BlobId) -> bool,
    ) -> Result<(), Stop> {
        let store = self.store;
        let max = store.max_group_raw();
        let members = p.group_members();
        if let Some((i, e)) = members.stray.first() {
            return Err(Stop::Failed(store.grouped_bounds_error(
                p,
                e,
                format!(
                    "group {} of a pack of {} groups (entry {i})",
                    e.group,
                    p.group_count()
                ),
            )));
        }
        let file = self.input(p)?;
        for (g, objects) in members.groups().enumerate() {
            let mut kept: Vec<_> = objects
                .iter()
                .map(|o| members.entry(g, o))
                .filter(|o| keep(&o.id))
                .collect();
            // In the order the group holds them (neighbours compress
            // together when the group is encoded again).
            kept.sort_by_key(|o| (o.offset, o.raw_len));
            if kept.is_empty() {
                continue;
            }
            for o in &kept {
                p.check_grouped_bounds(o, max)
                    .map_err(|msg| store.grouped_bounds_error(p, o, msg))?;
            }
            let number = g as u32;
            let (entry, header) =
                p.read_group(&*file, g, max, &mut self.stored)
                    .map_err(|err| {
                        let entry = p.group(g);
                        store.group_read_error(p, number, &entry, err)
                    })?;
            let kept_raw: u64 = kept.iter().map(|o| u64::from(o.raw_len)).sum();
            let members = kept.iter().map(|o| Member {
                id: o.id,
                offset: o.offset,
                raw_len: o.raw_len,
            });
            if copies_group(entry.raw_len, kept_raw, self.settings.group_bytes) {
                self.deferred.bytes += self.stored.len();
                self.deferred
                    .groups
                    .push((Pending::Copied(self.stored.clone()), members.collect()));
                self.groups_copied += 1;
            } else {
                let content = group::group_content(&self.stored, &header, max, &mut self.raw)
                    .map_err(|d| store.group_decode_error(p, number, &entry, d))?;
                for o in &kept {
                    // Inside the group: checked above against the index,
                    // whose raw length the header matched.
                    let bytes = &content[o.offset as usize..o.end() as usize];
                    let actual = BlobId::of(bytes);
                    if actual != o.id {
                        return Err(Stop::Failed(Error::Corrupt {
                            path: store.display(&p.pack_path),
                            offset: Some(entry.offset + group::GROUP_HEADER_LEN as u64),
                            expected: format!(
                                "object {} (bytes {}..{} of group {g}) with that SHA-256",
                                o.id,
                                o.offset,
                                o.end()
                            ),
                            found: format!("content with SHA-256 {actual}"),
                        }));
                    }
                    self.open
                        .add(o.id, bytes, self.settings.group_bytes, &mut self.deferred)
                        .map_err(|e| store.io_error("compress", store.base(), e))?;
                }
            }
            self.objects += kept.len();
            self.flush(false)?;
        }
        Ok(())
    }

    /// Adds the kept objects of a pack of version 1, in offset order: each
    /// read, checked and decompressed, then gathered into new groups.
    fn add_object_pack(
        &mut self,
        p: &Pack,
        keep: &mut dyn FnMut(&BlobId) -> bool,
    ) -> Result<(), Stop> {
        let store = self.store;
        let max = store.options().max_blob_len;
        let file = self.input(p)?;
        let mut entries: Vec<PackEntry> = p.entries().filter(|e| keep(&e.id)).collect();
        entries.sort_unstable_by_key(|e| e.offset);
        for e in entries {
            if u32::try_from(e.raw_len).is_err() {
                // Larger than any group (a raised size limit): stays loose.
                let data = store.read_packed(p, &e)?;
                store.put(&data)?;
                continue;
            }
            let stored = p
                .read_stored(&*file, &e, max.saturating_add(HEADER_LEN as u64))
                .map_err(|err| store.pack_read_error(p, &e, err))?;
            let data = object::decode(&stored, &e.id, max)
                .map_err(|d| store.packed_decode_error(p, &e, d))?;
            self.open
                .add(e.id, &data, self.settings.group_bytes, &mut self.deferred)
                .map_err(|e| self.compress_error(e))?;
            self.objects += 1;
            self.flush(false)?;
        }
        Ok(())
    }

    /// Compresses and writes the groups decided on once there are enough
    /// for every worker to compress one (or, with `all`, whatever there
    /// is).
    fn flush(&mut self, all: bool) -> Result<()> {
        let threads = self.store.options().threads.max(1);
        let enough = threads * self.settings.group_bytes as usize;
        if self.deferred.groups.is_empty() || (!all && self.deferred.bytes < enough) {
            return Ok(());
        }
        let out = self
            .deferred
            .encode(self.settings.level, threads)
            .map_err(|e| self.compress_error(e))?;
        out.write_to(&mut self.writer)
    }

    /// Seals the last group and publishes the pack; `None` when it would
    /// hold nothing. Returns the pack's name and size, with the groups
    /// copied and encoded.
    fn finish(mut self) -> Result<Option<Repacked>> {
        self.open
            .seal(&mut self.deferred)
            .map_err(|e| self.compress_error(e))?;
        self.flush(true)?;
        if self.writer.len() == 0 {
            return Ok(None);
        }
        let groups = self.writer.groups();
        let (name, bytes) = self.writer.finish()?;
        Ok(Some(Repacked {
            name,
            bytes,
            objects: self.objects,
            groups_copied: self.groups_copied,
            groups_encoded: groups - self.groups_copied,
        }))
    }
}

/// A pack a repack published.
struct Repacked {
    name: String,
    bytes: u64,
    objects: usize,
    groups_copied: usize,
    groups_encoded: usize,
}

impl BlobStore {
    /// Merges packs by the geometric rule over every pack of version 2 (see
    /// the module documentation); gc's merge. Groups it does not copy are
    /// compressed as [`Options::repack_compression`](crate::Options::repack_compression)
    /// says. With `dry_run`, only reports what would be merged. A pack
    /// removed by another process meanwhile ends the merge with nothing
    /// published or removed (it is not an error).
    pub fn merge_packs(&self, dry_run: bool) -> Result<MergeOutcome> {
        self.refresh_packs()?;
        let packs = self.packs_by_size(u64::MAX);
        let count = geometric_rollup(&packs.iter().map(|p| p.pack_len).collect::<Vec<_>>());
        let chosen = &packs[..count];
        if dry_run {
            return Ok(MergeOutcome {
                merged_packs: chosen.len(),
                objects: chosen.iter().map(|p| p.len()).sum(),
                merged_bytes: chosen.iter().map(|p| p.pack_len).sum(),
                ..MergeOutcome::default()
            });
        }
        self.merge(chosen, self.options().repack_compression.settings())
    }

    /// The writer's merge (see the module documentation): the geometric
    /// rule over the packs of version 2 smaller than
    /// [`Options::small_pack_bytes`](crate::Options::small_pack_bytes), at
    /// most [`WRITE_MERGE_FACTOR`] times that copied; groups it does not
    /// copy are compressed as
    /// [`Options::batch_compression`](crate::Options::batch_compression)
    /// says (a writer's merge must stay cheap). Nothing when
    /// `small_pack_bytes` is 0.
    pub fn merge_small_packs(&self) -> Result<MergeOutcome> {
        let small = self.options().small_pack_bytes;
        if small == 0 {
            return Ok(MergeOutcome::default());
        }
        let packs = self.packs_by_size(small);
        let mut count = geometric_rollup(&packs.iter().map(|p| p.pack_len).collect::<Vec<_>>());
        let budget = small.saturating_mul(WRITE_MERGE_FACTOR);
        let mut total = 0u64;
        for (i, p) in packs[..count].iter().enumerate() {
            total = total.saturating_add(p.pack_len);
            if total > budget {
                count = i;
                break;
            }
        }
        if count < 2 {
            return Ok(MergeOutcome::default());
        }
        self.merge(&packs[..count], self.options().batch_compression.settings())
    }

    /// The loaded packs of version 2 smaller than `below` bytes, smallest
    /// first (by name among equals, so that two processes choose alike).
    fn packs_by_size(&self, below: u64) -> Vec<Arc<Pack>> {
        let mut packs: Vec<Arc<Pack>> = self
            .loaded_packs()
            .into_iter()
            .filter(|p| p.pack_len < below && p.version() != PACK_VERSION_1)
            .collect();
        packs.sort_by(|a, b| a.pack_len.cmp(&b.pack_len).then(a.name.cmp(&b.name)));
        packs
    }

    /// Unlinks the indexes of `packs` (except one named `except`), then
    /// their pack files, each step made durable: no index is ever without
    /// its pack.
    fn remove_packs(&self, packs: &[&Arc<Pack>], except: Option<&str>) -> Result<()> {
        let removed: Vec<&&Arc<Pack>> = packs
            .iter()
            .filter(|p| Some(p.name.as_str()) != except)
            .collect();
        if self.trashing() {
            return self.trash_packs(&removed);
        }
        for paths in [
            removed
                .iter()
                .map(|p| p.index_path.clone())
                .collect::<Vec<_>>(),
            removed
                .iter()
                .map(|p| p.pack_path.clone())
                .collect::<Vec<_>>(),
        ] {
            self.backend()
                .delete(&paths)
                .map_err(|e| self.backend_error(e))?;
        }
        Ok(())
    }

    /// Merges `packs` (at least two, of version 2) into one new pack, then
    /// removes them. Groups not copied are compressed with `settings`.
    fn merge(&self, packs: &[Arc<Pack>], settings: GroupSettings) -> Result<MergeOutcome> {
        if packs.len() < 2 {
            return Ok(MergeOutcome::default());
        }
        self.ensure_writable()?;
        // Inputs in name order, each pack's groups in pack order: the same
        // set merged by two processes gives the same pack (one name,
        // published once), and each input is read front to back.
        let mut inputs: Vec<&Arc<Pack>> = packs.iter().collect();
        inputs.sort_by(|a, b| a.name.cmp(&b.name));
        let mut repack = Repack::new(self, settings)?;
        // A pack never holds an id twice; the copy of the first input is
        // as good as any (each was checked alike).
        let mut seen = HashSet::new();
        for p in &inputs {
            match repack.add_grouped_pack(p, &mut |id| seen.insert(*id)) {
                Ok(()) => {}
                // The writer's temp file is removed on drop.
                Err(Stop::Vanished) => return Ok(MergeOutcome::default()),
                Err(Stop::Failed(e)) => return Err(e),
            }
        }
        let Some(done) = repack.finish()? else {
            return Ok(MergeOutcome::default());
        };
        // Published and durable (2.5): now the inputs go, indexes first so
        // that no index is ever without its pack.
        self.remove_packs(&inputs, Some(&done.name))?;
        self.refresh_packs()?;
        Ok(MergeOutcome {
            merged_packs: packs.len(),
            objects: done.objects,
            merged_bytes: packs.iter().map(|p| p.pack_len).sum(),
            new_pack: Some(done.name),
            new_bytes: done.bytes,
            groups_copied: done.groups_copied,
            groups_encoded: done.groups_encoded,
        })
    }
}

/// Pack rewrites: gc's sweep of a pack by live share (format-spec.md 2.7).
impl BlobStore {
    /// Rewrites pack `name` keeping only the objects for which `keep` is true:
    /// writes and publishes a new pack of those (unless none are kept), then
    /// removes the old index and the old pack. A pack of version 1 stays one:
    /// its kept objects are copied unchanged after their CRC-32 is checked.
    /// A pack of version 2 is repacked (see the module documentation), the
    /// groups not copied compressed as
    /// [`Options::repack_compression`](crate::Options::repack_compression)
    /// says. Damage aborts the rewrite and leaves the old pack in place.
    pub fn rewrite_pack(
        &self,
        name: &str,
        keep: &dyn Fn(&BlobId) -> bool,
    ) -> Result<RewriteOutcome> {
        self.ensure_writable()?;
        self.refresh_packs()?;
        let old = self.pack_by_name(name)?;
        let kept = old.ids().filter(|id| keep(id)).count();
        let mut outcome = RewriteOutcome {
            removed_objects: old.len() - kept,
            kept_objects: kept,
            old_bytes: old.pack_len,
            new_pack: None,
            new_bytes: 0,
            groups_copied: 0,
            groups_encoded: 0,
        };
        if kept == old.len() {
            outcome.new_bytes = old.pack_len;
            outcome.new_pack = Some(old.name.clone());
            return Ok(outcome);
        }
        if kept > 0 {
            let (new_name, bytes) = if old.version() == PACK_VERSION_1 {
                self.rewrite_v1(&old, keep)?
            } else {
                let mut repack = Repack::new(self, self.options().repack_compression.settings())?;
                match repack.add_grouped_pack(&old, &mut |id| keep(id)) {
                    Ok(()) => {}
                    Err(Stop::Vanished) => {
                        return Err(self.io_error(
                            "open",
                            &old.pack_path,
                            io::Error::from(io::ErrorKind::NotFound),
                        ))
                    }
                    Err(Stop::Failed(e)) => return Err(e),
                }
                match repack.finish()? {
                    Some(done) => {
                        outcome.groups_copied = done.groups_copied;
                        outcome.groups_encoded = done.groups_encoded;
                        (done.name, done.bytes)
                    }
                    // Every kept object is written (the index's objects
                    // all lie in its groups, or the repack stopped): keep
                    // the old pack rather than drop what it holds.
                    None => {
                        return Err(Error::Corrupt {
                            path: self.display(&old.index_path),
                            offset: None,
                            expected: format!("{kept} objects in the groups of the pack"),
                            found: "none written".into(),
                        })
                    }
                }
            };
            outcome.new_pack = Some(new_name);
            outcome.new_bytes = bytes;
        }
        // Index first: a pack without an index is invisible, an index without
        // its pack would be damage.
        self.remove_packs(&[&old], outcome.new_pack.as_deref())?;
        self.refresh_packs()?;
        Ok(outcome)
    }

    /// Writes a pack of version 1 of the objects of `old` (of version 1)
    /// that `keep` keeps, copied unchanged after their CRC check.
    fn rewrite_v1(&self, old: &Pack, keep: &dyn Fn(&BlobId) -> bool) -> Result<(String, u64)> {
        let max = self
            .options()
            .max_blob_len
            .saturating_add(HEADER_LEN as u64);
        let mut writer = PackWriter::create_v1(self)?;
        let file = self
            .pack_file(old)
            .map_err(|err| self.io_error("open", &old.pack_path, err))?;
        for e in old.entries().filter(|e| keep(&e.id)) {
            let stored = old
                .read_stored(&*file, &e, max)
                .map_err(|err| self.pack_read_error(old, &e, err))?;
            writer.add(e.id, e.raw_len, &stored)?;
        }
        writer.finish()
    }
}

/// Upgrading packs of version 1 (format-spec.md 2.12, "Upgrading").
impl BlobStore {
    /// Rewrites every pack of version 1 as a pack of version 2, one new
    /// pack per old one, with every object decompressed, checked against
    /// its id and grouped and compressed as `compression` says; each new
    /// pack is published before the old one's index and then its file are
    /// unlinked (the protocol of a merge, format-spec.md 2.11, with the
    /// same crash safety). Loose objects are left as they are. With
    /// `dry_run`, only reports what it would rewrite. `progress` is called
    /// after each pack.
    ///
    /// Damage in a pack stops the upgrade with that pack left as it was
    /// (and the packs before it upgraded): fsck names it.
    pub fn upgrade_packs(
        &self,
        dry_run: bool,
        compression: Compression,
        progress: &mut dyn FnMut(UpgradeProgress),
    ) -> Result<UpgradeOutcome> {
        self.refresh_packs()?;
        let old: Vec<Arc<Pack>> = self
            .loaded_packs()
            .into_iter()
            .filter(|p| p.version() == PACK_VERSION_1)
            .collect();
        let mut outcome = UpgradeOutcome {
            packs: old.len(),
            objects: old.iter().map(|p| p.len()).sum(),
            old_bytes: old.iter().map(|p| p.pack_len).sum(),
            ..UpgradeOutcome::default()
        };
        let mut p = UpgradeProgress {
            packs_total: old.len(),
            bytes_total: outcome.old_bytes,
            ..UpgradeProgress::default()
        };
        if dry_run {
            return Ok(outcome);
        }
        self.ensure_writable()?;
        let settings = compression.settings();
        for pack in &old {
            let mut repack = Repack::new(self, settings)?;
            match repack.add_object_pack(pack, &mut |_| true) {
                Ok(()) => {}
                Err(Stop::Vanished) => {
                    outcome.vanished += 1;
                    continue;
                }
                Err(Stop::Failed(e)) => return Err(e),
            }
            let done = repack.finish()?;
            let except = done.as_ref().map(|d| d.name.clone());
            self.remove_packs(&[pack], except.as_deref())?;
            if let Some(done) = done {
                outcome.new_bytes += done.bytes;
                outcome.new_packs.push(done.name);
            }
            p.packs_done += 1;
            p.bytes_done += pack.pack_len;
            progress(p);
        }
        outcome.packs -= outcome.vanished;
        self.refresh_packs()?;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::geometric_rollup;

    #[test]
    fn a_progression_is_left_alone() {
        assert_eq!(geometric_rollup(&[]), 0);
        assert_eq!(geometric_rollup(&[5]), 0);
        assert_eq!(geometric_rollup(&[1, 2, 4, 8, 100]), 0);
    }

    #[test]
    fn the_smallest_packs_up_to_the_last_break_are_merged() {
        // Equal packs: all of them.
        assert_eq!(geometric_rollup(&[3; 10]), 10);
        // A break between the two largest: everything.
        assert_eq!(geometric_rollup(&[1, 2, 4, 8, 9]), 5);
        // A break low down: the small ones, and the next joins when it is
        // less than twice their sum (1 + 1 = 2, 3 < 4).
        assert_eq!(geometric_rollup(&[1, 1, 3, 100]), 3);
        assert_eq!(geometric_rollup(&[1, 1, 4, 100]), 2);
    }

    #[test]
    fn after_a_merge_the_sizes_are_a_progression() {
        let mut sizes: Vec<u64> = Vec::new();
        for i in 0..2000u64 {
            sizes.push(1 + i % 7);
            sizes.sort_unstable();
            let n = geometric_rollup(&sizes);
            if n > 0 {
                let merged: u64 = sizes.drain(..n).sum();
                sizes.push(merged);
                sizes.sort_unstable();
            }
            assert_eq!(geometric_rollup(&sizes), 0, "{sizes:?}");
            let total: u64 = sizes.iter().sum();
            assert!(
                (sizes.len() as f64) <= (total as f64).log2() + 1.0,
                "{} packs for {total} bytes",
                sizes.len()
            );
        }
    }
}
