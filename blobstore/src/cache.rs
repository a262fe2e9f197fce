//! The group cache: decompressed groups of packs of version 2, least
//! recently used first out, bounded in bytes (format-spec.md 2.12,
//! "Reading").
//!
//! A read of an object in a group decompresses the whole group; the cache
//! keeps it so that reading the group's other objects (a conversation's
//! blobs, read one after the other) costs no more decompression. Entries
//! are keyed by the pack's load ([`crate::pack::Pack::serial`]) and the
//! group's number, and hold the content only after it was read whole from
//! a group that passed its checks. An object taken out of a cached group is
//! checked against its id on its first read from it; the group remembers
//! the objects that passed (the content is immutable), so reading them
//! again hashes nothing. It remembers too which of its ranges a reader
//! found to be UTF-8 ([`crate::Content::check_utf8`]), so that a process
//! that writes the same request body again (an agent, at each step) does
//! not read its texts once more only to check them.
//!
//! A read of a cached group costs two look-ups (the group, the object's
//! check), so both are made cheap: keys are numbers and SHA-256 digests,
//! hashed by [`FastHasher`](crate::fast_hash::FastHasher) (SipHash cost
//! more than the look-up; a pack crafted to make its keys collide slows
//! the look-ups of its own groups only); the cache's use order is brought
//! up to date when it evicts, not at each read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::fast_hash::{FastMap, FastSet};
use crate::BlobId;

/// A decompressed group: its raw content, the objects of it already
/// checked against their id (offset, length and id, as the index gave
/// them) and the ranges of it found to be UTF-8.
#[derive(Debug)]
pub(crate) struct CachedGroup {
    /// The group's raw content.
    pub(crate) content: Vec<u8>,
    verified: Mutex<FastSet<(u32, u32, BlobId)>>,
    utf8: Mutex<FastSet<(usize, usize)>>,
}

impl CachedGroup {
    /// A group of raw content `content`, nothing of it checked yet.
    pub(crate) fn new(content: Vec<u8>) -> Self {
        Self {
            content,
            verified: Mutex::new(FastSet::default()),
            utf8: Mutex::new(FastSet::default()),
        }
    }

    /// Whether the bytes `range` of the content (none, as [`Content`]
    /// derefs them, if it lies outside) are UTF-8: checked once,
    /// remembered when they are; the error of the check when they are not.
    ///
    /// [`Content`]: crate::Content
    pub(crate) fn check_utf8(
        &self,
        range: &std::ops::Range<usize>,
    ) -> Result<(), std::str::Utf8Error> {
        let key = (range.start, range.end);
        let lock = || self.utf8.lock().unwrap_or_else(|e| e.into_inner());
        if lock().contains(&key) {
            return Ok(());
        }
        std::str::from_utf8(self.content.get(range.clone()).unwrap_or_default())?;
        lock().insert(key);
        Ok(())
    }

    /// Whether the range `start..end` is remembered as UTF-8.
    #[cfg(test)]
    pub(crate) fn remembers_utf8(&self, start: usize, end: usize) -> bool {
        self.utf8
            .lock()
            .map(|set| set.contains(&(start, end)))
            .unwrap_or(false)
    }

    fn verified(&self) -> std::sync::MutexGuard<'_, FastSet<(u32, u32, BlobId)>> {
        self.verified.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the object `id` at `offset`, `len` bytes, was checked.
    pub(crate) fn is_verified(&self, offset: u32, len: u32, id: &BlobId) -> bool {
        self.verified().contains(&(offset, len, *id))
    }

    /// Records that the object `id` at `offset`, `len` bytes, hashes to its
    /// id.
    pub(crate) fn set_verified(&self, offset: u32, len: u32, id: &BlobId) {
        self.verified().insert((offset, len, *id));
    }
}

/// What the cache counts for a group beside its raw length, so that the
/// bound also bounds the number of groups (of empty objects, say).
pub(crate) const ENTRY_COST: u64 = 64;

/// A group: the pack's serial and the group's number.
pub(crate) type GroupKey = (u64, u32);

/// What the cache holds and has done, for tests and statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupCacheStats {
    /// Groups held.
    pub groups: usize,
    /// Bytes held: each group's raw length plus 64 bytes (`ENTRY_COST`) for its
    /// bookkeeping (never more than the bound).
    pub bytes: u64,
    /// Reads that found their group in the cache.
    pub hits: u64,
    /// Groups decompressed for reads (each a miss).
    pub decompressed: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: FastMap<GroupKey, Entry>,
    /// Use order, as of each entry's `queued` tick: an entry used since
    /// is put back at its `used` tick when it comes up for eviction.
    order: BTreeMap<u64, GroupKey>,
    tick: u64,
    stats: GroupCacheStats,
}

/// A held group, the tick of its last use and the tick it is queued under
/// in the use order (the same, or older).
#[derive(Debug)]
struct Entry {
    group: Arc<CachedGroup>,
    used: u64,
    queued: u64,
}

/// A bytes-bounded LRU of decompressed groups.
#[derive(Debug)]
pub(crate) struct GroupCache {
    bound: u64,
    inner: Mutex<Inner>,
}

impl GroupCache {
    /// A cache of at most `bound` raw bytes (0: nothing is kept).
    pub(crate) fn new(bound: u64) -> Self {
        Self {
            bound,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The group, if held; it becomes the most recently used.
    pub(crate) fn get(&self, key: GroupKey) -> Option<Arc<CachedGroup>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let entry = inner.entries.get_mut(&key)?;
        entry.used = tick;
        let group = Arc::clone(&entry.group);
        inner.stats.hits += 1;
        Some(group)
    }

    /// Counts a group decompressed for a read, and keeps it unless it is
    /// larger than a quarter of the bound (a large single object, which
    /// would push out every group of small ones), evicting the least
    /// recently used groups until it fits.
    pub(crate) fn insert(&self, key: GroupKey, content: Arc<CachedGroup>) {
        let len = content.content.len() as u64 + ENTRY_COST;
        let mut inner = self.lock();
        inner.stats.decompressed += 1;
        if len > self.bound / 4 {
            return;
        }
        inner.tick += 1;
        let tick = inner.tick;
        let entry = Entry {
            group: content,
            used: tick,
            queued: tick,
        };
        if let Some(old) = inner.entries.insert(key, entry) {
            inner.order.remove(&old.queued);
            inner.stats.bytes -= old.group.content.len() as u64 + ENTRY_COST;
        }
        inner.order.insert(tick, key);
        inner.stats.bytes += len;
        while inner.stats.bytes > self.bound {
            let Some((queued, oldest)) = inner.order.pop_first() else {
                break;
            };
            let Some(entry) = inner.entries.get_mut(&oldest) else {
                continue;
            };
            if entry.used != queued {
                // Used since it was queued: back in the order where its
                // last use puts it.
                entry.queued = entry.used;
                let used = entry.used;
                inner.order.insert(used, oldest);
                continue;
            }
            if let Some(gone) = inner.entries.remove(&oldest) {
                inner.stats.bytes -= gone.group.content.len() as u64 + ENTRY_COST;
            }
        }
        inner.stats.groups = inner.entries.len();
    }

    /// Forgets every group of the pack load `serial` (removed from the
    /// store).
    pub(crate) fn forget_pack(&self, serial: u64) {
        let mut inner = self.lock();
        let doomed: Vec<(GroupKey, u64)> = inner
            .entries
            .iter()
            .filter(|(k, _)| k.0 == serial)
            .map(|(k, entry)| (*k, entry.queued))
            .collect();
        for (key, queued) in doomed {
            inner.order.remove(&queued);
            if let Some(gone) = inner.entries.remove(&key) {
                inner.stats.bytes -= gone.group.content.len() as u64 + ENTRY_COST;
            }
        }
        inner.stats.groups = inner.entries.len();
    }

    /// What the cache holds and has done.
    pub(crate) fn stats(&self) -> GroupCacheStats {
        let inner = self.lock();
        GroupCacheStats {
            groups: inner.entries.len(),
            ..inner.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(len: usize, fill: u8) -> Arc<CachedGroup> {
        Arc::new(CachedGroup::new(vec![fill; len]))
    }

    #[test]
    fn the_least_recently_used_groups_go_first_and_the_bound_holds() {
        // Four groups of 25 bytes fit exactly.
        let bound = 4 * (25 + ENTRY_COST);
        let cache = GroupCache::new(bound);
        cache.insert((1, 0), group(25, 0));
        cache.insert((1, 1), group(25, 1));
        cache.insert((1, 2), group(25, 2));
        cache.insert((1, 3), group(25, 3));
        assert_eq!(cache.stats().bytes, bound);
        // Group 0 used: group 1 is now the oldest.
        assert!(cache.get((1, 0)).is_some());
        cache.insert((2, 0), group(20, 4));
        assert!(cache.get((1, 1)).is_none());
        assert!(cache.get((1, 0)).is_some());
        let s = cache.stats();
        assert!(s.bytes <= bound, "{s:?}");
        assert_eq!((s.groups, s.decompressed, s.hits), (4, 5, 2));
        // Larger than a quarter of the bound: counted, not kept.
        cache.insert((3, 0), group(26, 5));
        assert!(cache.get((3, 0)).is_none());
        cache.forget_pack(1);
        assert_eq!(cache.stats().groups, 1);
        assert_eq!(cache.stats().bytes, 20 + ENTRY_COST);
    }

    /// The cache against a model of an LRU (a list in use order, the least
    /// recently used evicted first) over a long run of inserts, reads and
    /// forgotten packs: the same groups are held after every step, so
    /// bringing the use order up to date only at eviction changes nothing
    /// a reader sees.
    #[test]
    fn the_cache_holds_what_a_plain_lru_holds() {
        let bound = 10 * (100 + ENTRY_COST);
        let cache = GroupCache::new(bound);
        let mut model: Vec<(GroupKey, u64)> = Vec::new();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for step in 0..20_000 {
            let key = (next(3), next(24) as u32);
            match next(10) {
                0..=3 => {
                    let len = 20 + next(200);
                    cache.insert(key, group(len as usize, 0));
                    let cost = len + ENTRY_COST;
                    model.retain(|(k, _)| *k != key);
                    if cost <= bound / 4 {
                        model.push((key, cost));
                        while model.iter().map(|(_, c)| c).sum::<u64>() > bound {
                            model.remove(0);
                        }
                    }
                }
                4..=8 => {
                    let held = cache.get(key).is_some();
                    let at = model.iter().position(|(k, _)| *k == key);
                    assert_eq!(held, at.is_some(), "step {step}: read of {key:?}");
                    if let Some(at) = at {
                        let used = model.remove(at);
                        model.push(used);
                    }
                }
                _ => {
                    let serial = key.0;
                    cache.forget_pack(serial);
                    model.retain(|(k, _)| k.0 != serial);
                }
            }
            let s = cache.stats();
            assert_eq!(s.groups, model.len(), "step {step}");
            assert_eq!(
                s.bytes,
                model.iter().map(|(_, c)| c).sum::<u64>(),
                "step {step}"
            );
        }
    }

    #[test]
    fn many_groups_of_every_size_never_exceed_the_bound() {
        let cache = GroupCache::new(8192);
        for i in 0..5000u32 {
            let len = (i as usize * 37) % 1100;
            cache.insert((u64::from(i % 7), i), group(len, 0));
            if i % 3 == 0 {
                let _ = cache.get((u64::from((i / 2) % 7), i / 2));
            }
            let s = cache.stats();
            assert!(s.bytes <= 8192, "{s:?}");
        }
        let zero = GroupCache::new(0);
        zero.insert((0, 0), group(1, 0));
        assert_eq!(zero.stats().groups, 0);
    }
}
