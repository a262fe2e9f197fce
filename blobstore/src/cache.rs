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
//! again hashes nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::BlobId;

/// A decompressed group: its raw content and the objects of it already
/// checked against their id (offset, length and id, as the index gave
/// them).
#[derive(Debug)]
pub(crate) struct CachedGroup {
    /// The group's raw content.
    pub(crate) content: Vec<u8>,
    verified: Mutex<HashSet<(u32, u32, BlobId)>>,
}

impl CachedGroup {
    /// A group of raw content `content`, nothing of it checked yet.
    pub(crate) fn new(content: Vec<u8>) -> Self {
        Self {
            content,
            verified: Mutex::new(HashSet::new()),
        }
    }

    fn verified(&self) -> std::sync::MutexGuard<'_, HashSet<(u32, u32, BlobId)>> {
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
pub const ENTRY_COST: u64 = 64;

/// A group: the pack's serial and the group's number.
pub(crate) type GroupKey = (u64, u32);

/// What the cache holds and has done, for tests and statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    entries: HashMap<GroupKey, (Arc<CachedGroup>, u64)>,
    /// Use order: the tick of each entry's last use.
    order: BTreeMap<u64, GroupKey>,
    tick: u64,
    stats: GroupCacheStats,
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
        let (content, old) = match inner.entries.get_mut(&key) {
            Some((content, used)) => {
                let old = std::mem::replace(used, tick);
                (Arc::clone(content), old)
            }
            None => return None,
        };
        inner.order.remove(&old);
        inner.order.insert(tick, key);
        inner.stats.hits += 1;
        Some(content)
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
        if let Some((old, used)) = inner.entries.insert(key, (content, tick)) {
            inner.order.remove(&used);
            inner.stats.bytes -= old.content.len() as u64 + ENTRY_COST;
        }
        inner.order.insert(tick, key);
        inner.stats.bytes += len;
        while inner.stats.bytes > self.bound {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            if let Some((gone, _)) = inner.entries.remove(&oldest) {
                inner.stats.bytes -= gone.content.len() as u64 + ENTRY_COST;
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
            .map(|(k, (_, used))| (*k, *used))
            .collect();
        for (key, used) in doomed {
            inner.order.remove(&used);
            if let Some((gone, _)) = inner.entries.remove(&key) {
                inner.stats.bytes -= gone.content.len() as u64 + ENTRY_COST;
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
