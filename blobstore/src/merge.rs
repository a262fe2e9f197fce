//! Merging packs (format-spec.md 2.11): the number of packs stays
//! logarithmic in the size of the store.
//!
//! Packs sorted by size must form a geometric progression of factor
//! [`MERGE_FACTOR`]: each at least twice the one before. Where the rule is
//! broken, the smallest packs up to the last break are merged into one,
//! together with any following pack smaller than twice what is merged, so
//! the rule holds again. The count is then at most
//! `log2(store bytes / smallest pack) + 1`, and each byte is copied about
//! once per doubling of the pack it is in.
//!
//! gc merges by this rule over every pack. A writer, after it publishes a
//! pack, merges by the same rule over the *small* packs only (under
//! [`Options::small_pack_bytes`](crate::Options)), and copies at most
//! [`WRITE_MERGE_FACTOR`] times that in one write: a command never pays
//! for a merge of the large packs, which are left to gc.
//!
//! A merge copies stored objects unchanged after checking their CRC, as
//! [`BlobStore::rewrite_pack`] does, publishes the new pack and index as
//! any writer does, and only then unlinks the merged packs' indexes and
//! files. It takes no lock: see format-spec.md 2.11 for why it is safe
//! against readers, writers, other merges and gc.

use std::collections::HashSet;
use std::io;
use std::sync::Arc;

use crate::batch::PackWriter;
use crate::error::Result;
use crate::id::BlobId;
use crate::object::HEADER_LEN;
use crate::pack::{Pack, PackEntry};
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

impl BlobStore {
    /// Merges packs by the geometric rule over every pack (see the module
    /// documentation); gc's merge. With `dry_run`, only reports what would
    /// be merged. A pack removed by another process meanwhile ends the
    /// merge with nothing published or removed (it is not an error).
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
        self.merge(chosen)
    }

    /// The writer's merge (see the module documentation): the geometric
    /// rule over the packs smaller than [`Options::small_pack_bytes`](crate::Options::small_pack_bytes)
    /// (crate::Options), at most [`WRITE_MERGE_FACTOR`] times that copied.
    /// Nothing when `small_pack_bytes` is 0.
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
        self.merge(&packs[..count])
    }

    /// The loaded packs smaller than `below` bytes, smallest first (by name
    /// among equals, so that two processes choose alike).
    fn packs_by_size(&self, below: u64) -> Vec<Arc<Pack>> {
        let mut packs: Vec<Arc<Pack>> = self
            .loaded_packs()
            .into_iter()
            .filter(|p| p.pack_len < below)
            .collect();
        packs.sort_by(|a, b| a.pack_len.cmp(&b.pack_len).then(a.name.cmp(&b.name)));
        packs
    }

    /// Merges `packs` (at least two) into one new pack, then removes them.
    fn merge(&self, packs: &[Arc<Pack>]) -> Result<MergeOutcome> {
        if packs.len() < 2 {
            return Ok(MergeOutcome::default());
        }
        self.ensure_writable()?;
        // Inputs in name order, each pack's objects in offset order: the
        // same set merged by two processes gives the same pack (one name,
        // published once), and each input is read front to back.
        let mut inputs: Vec<&Arc<Pack>> = packs.iter().collect();
        inputs.sort_by(|a, b| a.name.cmp(&b.name));
        let max = self
            .options()
            .max_blob_len
            .saturating_add(HEADER_LEN as u64);
        let mut writer = PackWriter::create(self)?;
        let mut seen = HashSet::new();
        for p in &inputs {
            let file = match self.pack_file(p) {
                Ok(file) => file,
                // Merged or swept by another process since its index was
                // loaded: its objects are in a pack this merge does not
                // know. Stop; the writer's temp file is removed on drop.
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(MergeOutcome::default()),
                Err(e) => return Err(self.io_error("open", &p.pack_path, e)),
            };
            let mut entries: Vec<PackEntry> = p.entries().collect();
            entries.sort_unstable_by_key(|e| e.offset);
            for e in entries {
                // A pack never holds an id twice; the copy of the first
                // input is as good as any (each was checked alike).
                if !seen.insert(e.id) {
                    continue;
                }
                let stored = p
                    .read_stored(&*file, &e, max)
                    .map_err(|err| self.pack_read_error(p, &e, err))?;
                writer.add(e.id, e.raw_len, &stored)?;
            }
        }
        let (name, new_bytes) = writer.finish()?;
        // Published and durable (2.5): now the inputs go, indexes first so
        // that no index is ever without its pack.
        let removed: Vec<&&Arc<Pack>> = inputs.iter().filter(|p| p.name != name).collect();
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
        self.refresh_packs()?;
        Ok(MergeOutcome {
            merged_packs: packs.len(),
            objects: seen.len(),
            merged_bytes: packs.iter().map(|p| p.pack_len).sum(),
            new_pack: Some(name),
            new_bytes,
        })
    }
}

/// Pack rewrites: gc's sweep of a pack by live share (format-spec.md 2.7).
impl BlobStore {
    /// Rewrites pack `name` keeping only the objects for which `keep` is true:
    /// writes and publishes a new pack of those (unless none are kept), then
    /// removes the old index and the old pack. Object bytes are copied
    /// unchanged after their CRC-32 is checked; a damaged object aborts the
    /// rewrite and leaves the old pack in place.
    pub fn rewrite_pack(
        &self,
        name: &str,
        keep: &dyn Fn(&BlobId) -> bool,
    ) -> Result<RewriteOutcome> {
        self.ensure_writable()?;
        self.refresh_packs()?;
        let old = self.pack_by_name(name)?;
        let kept: Vec<PackEntry> = old.entries().filter(|e| keep(&e.id)).collect();
        let mut outcome = RewriteOutcome {
            removed_objects: old.len() - kept.len(),
            kept_objects: kept.len(),
            old_bytes: old.pack_len,
            new_pack: None,
            new_bytes: 0,
        };
        if kept.len() == old.len() {
            outcome.new_bytes = old.pack_len;
            outcome.new_pack = Some(old.name.clone());
            return Ok(outcome);
        }
        if !kept.is_empty() {
            let max = self
                .options()
                .max_blob_len
                .saturating_add(HEADER_LEN as u64);
            let mut writer = PackWriter::create(self)?;
            let file = self
                .pack_file(&old)
                .map_err(|err| self.io_error("open", &old.pack_path, err))?;
            for e in &kept {
                let stored = old
                    .read_stored(&*file, e, max)
                    .map_err(|err| self.pack_read_error(&old, e, err))?;
                writer.add(e.id, e.raw_len, &stored)?;
            }
            let (new_name, bytes) = writer.finish()?;
            outcome.new_pack = Some(new_name);
            outcome.new_bytes = bytes;
        }
        if outcome.new_pack.as_deref() != Some(name) {
            // Index first: a pack without an index is invisible, an index without
            // its pack would be damage.
            for path in [&old.index_path, &old.pack_path] {
                self.backend()
                    .delete(std::slice::from_ref(path))
                    .map_err(|e| self.backend_error(e))?;
            }
        }
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
