//! The blobs of the store as fsck resolves references against them: one
//! listing in id order, looked up through a table of the ids' first two
//! bytes.
//!
//! A hash map of 100,000 ids cost fsck a cache miss or two per reference
//! and per listed id (the ids are SHA-256 digests: no two neighbouring
//! lookups touch the same memory). Here the listing comes in id order, as
//! the pack indexes keep it ([`IdListing::in_id_order`]); the references
//! are put in id order by a radix sort (two passes over the first two
//! bytes, each writing to 256 sequential streams, then the few ids sharing
//! those bytes sorted among themselves); the two are walked side by side
//! once.

use std::collections::HashMap;

use jpstore_blobstore::{BlobId, IdListing};

/// Entries of the table of first bytes (16 bits of prefix).
const FANOUT: usize = 1 << 16;

/// The table's slot of an id.
fn prefix(id: &BlobId) -> usize {
    let b = id.as_bytes();
    usize::from(u16::from_be_bytes([b[0], b[1]]))
}

/// Every id of the store with its size where the listing has it, and
/// whether a reference to it was seen; ids referenced but not listed
/// (missing, or published since the listing) beside them.
pub(super) struct KnownBlobs {
    /// Distinct listed ids in increasing order, with their sizes.
    listed: Vec<(BlobId, Option<u64>)>,
    /// Whether `listed[i]` was referenced.
    seen: Vec<bool>,
    /// `listed[fanout[p]..fanout[p + 1]]` are the ids whose first two bytes
    /// are `p`.
    fanout: Vec<u32>,
    /// Referenced ids that are not listed, with their size if it was found.
    unlisted: HashMap<BlobId, Option<u64>>,
}

/// `items` in increasing order of their ids (stable: equal ids keep their
/// order), by a least-significant-digit radix sort on the ids' first two
/// bytes, then a sort of each run of items sharing them.
fn sort_by_id<T: Copy>(items: Vec<T>, id: impl Fn(&T) -> &BlobId) -> Vec<T> {
    let Some(&first) = items.first() else {
        return items;
    };
    // Both bytes counted in one pass over the items.
    let mut counts = [[0usize; 256]; 2];
    for item in &items {
        let b = id(item).as_bytes();
        counts[0][usize::from(b[0])] += 1;
        counts[1][usize::from(b[1])] += 1;
    }
    let mut from = items;
    let mut to = vec![first; from.len()];
    for byte in [1, 0] {
        let mut next = [0usize; 256];
        let mut start = 0;
        for (slot, count) in next.iter_mut().zip(&counts[byte]) {
            *slot = start;
            start += count;
        }
        for item in &from {
            let slot = &mut next[usize::from(id(item).as_bytes()[byte])];
            to[*slot] = *item;
            *slot += 1;
        }
        std::mem::swap(&mut from, &mut to);
    }
    let mut start = 0;
    while start < from.len() {
        let p = prefix(id(&from[start]));
        let end = start
            + from[start..]
                .iter()
                .take_while(|item| prefix(id(item)) == p)
                .count();
        if end - start > 1 {
            from[start..end].sort_by(|a, b| id(a).cmp(id(b)));
        }
        start = end;
    }
    from
}

impl KnownBlobs {
    /// The store's listing (an id may appear more than once, e.g. loose
    /// and packed: its first size counts).
    pub(super) fn new(listing: &IdListing) -> Self {
        Self::from_ordered(listing.in_id_order(), listing.len())
    }

    /// A listing of `len` ids that should come in id order (the first size
    /// of an id counts); sorted here if it does not.
    fn from_ordered(ids: impl Iterator<Item = (BlobId, Option<u64>)>, len: usize) -> Self {
        let mut listed: Vec<(BlobId, Option<u64>)> = Vec::with_capacity(len);
        let mut in_order = true;
        for (id, size) in ids {
            match listed.last() {
                // The same id again, in a later place: the first counts.
                Some((last, _)) if *last == id => continue,
                Some((last, _)) if *last > id => in_order = false,
                _ => {}
            }
            listed.push((id, size));
        }
        // An index whose ids are out of order (no writer makes one) still
        // has every id it lists looked at.
        match in_order {
            true => Self::of_sorted(listed),
            false => Self::from_unsorted(listed),
        }
    }

    /// A listing in any order, an id perhaps more than once (its first
    /// size counts).
    fn from_unsorted(listed: Vec<(BlobId, Option<u64>)>) -> Self {
        let mut listed = sort_by_id(listed, |(id, _)| id);
        listed.dedup_by(|later, first| later.0 == first.0);
        Self::of_sorted(listed)
    }

    /// The listing `listed`, sorted by id without duplicates.
    fn of_sorted(listed: Vec<(BlobId, Option<u64>)>) -> Self {
        let mut fanout = vec![0u32; FANOUT + 1];
        for (id, _) in &listed {
            fanout[prefix(id) + 1] += 1;
        }
        for p in 0..FANOUT {
            fanout[p + 1] += fanout[p];
        }
        KnownBlobs {
            seen: vec![false; listed.len()],
            listed,
            fanout,
            unlisted: HashMap::new(),
        }
    }

    fn find(&self, id: &BlobId) -> Option<usize> {
        let p = prefix(id);
        let (start, end) = (self.fanout[p] as usize, self.fanout[p + 1] as usize);
        self.listed[start..end]
            .binary_search_by(|(listed, _)| listed.cmp(id))
            .ok()
            .map(|i| start + i)
    }

    /// The listed sizes of the referenced blobs `refs`, in their order
    /// (`None` where the listing has no size: loose or not listed, for
    /// [`KnownBlobs::resolve`]), marking the listed ones referenced.
    pub(super) fn listed_sizes<'a>(
        &mut self,
        refs: impl Iterator<Item = &'a BlobId>,
    ) -> Vec<Option<u64>> {
        let by_id = sort_by_id(
            refs.enumerate().map(|(i, id)| (*id, i)).collect(),
            |(id, _)| id,
        );
        let mut sizes = vec![None; by_id.len()];
        let mut at = 0;
        for (id, i) in &by_id {
            while self.listed.get(at).is_some_and(|(listed, _)| listed < id) {
                at += 1;
            }
            if let Some((listed, size)) = self.listed.get(at) {
                if listed == id {
                    self.seen[at] = true;
                    sizes[*i] = *size;
                }
            }
        }
        sizes
    }

    /// The size of referenced blob `id`: as listed, or else from `look_up`
    /// (called at most once per id while it succeeds). Marks `id`
    /// referenced.
    pub(super) fn resolve<E>(
        &mut self,
        id: &BlobId,
        look_up: impl FnOnce() -> Result<u64, E>,
    ) -> Result<u64, E> {
        let size = match self.find(id) {
            Some(i) => {
                self.seen[i] = true;
                &mut self.listed[i].1
            }
            None => self.unlisted.entry(*id).or_insert(None),
        };
        match *size {
            Some(s) => Ok(s),
            None => {
                let found = look_up();
                *size = found.as_ref().ok().copied();
                found
            }
        }
    }

    /// Distinct blobs referenced.
    pub(super) fn referenced(&self) -> usize {
        self.seen.iter().filter(|s| **s).count() + self.unlisted.len()
    }

    /// Listed blobs referenced by nothing.
    pub(super) fn orphans(&self) -> usize {
        self.seen.iter().filter(|s| !**s).count()
    }

    /// The listed blobs referenced by nothing, in id order.
    pub(super) fn orphan_ids(&self) -> impl Iterator<Item = &BlobId> {
        self.listed
            .iter()
            .zip(&self.seen)
            .filter(|(_, seen)| !**seen)
            .map(|((id, _), _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> BlobId {
        BlobId::of(&n.to_le_bytes())
    }

    #[test]
    fn resolves_like_a_map_of_the_listing() {
        // Two "packs" (each sorted), loose objects without sizes, and one id
        // listed twice: the first listing's size counts.
        let mut pack_a: Vec<_> = (0..500).map(|n| (id(n), Some(u64::from(n)))).collect();
        let mut pack_b: Vec<_> = (500..900).map(|n| (id(n), Some(u64::from(n)))).collect();
        pack_a.sort();
        pack_b.sort();
        let mut listed = pack_a;
        listed.extend(pack_b);
        listed.push((id(3), Some(77)));
        listed.extend((900..1000).map(|n| (id(n), None)));
        let mut known = KnownBlobs::from_unsorted(listed);
        let look_ups = std::cell::Cell::new(0);
        let look_up = |n: u32| {
            look_ups.set(look_ups.get() + 1);
            if n < 1000 {
                Ok(u64::from(n) + 1)
            } else {
                Err(n)
            }
        };
        assert_eq!(known.resolve(&id(3), || look_up(3)), Ok(3));
        assert_eq!(known.resolve(&id(899), || look_up(899)), Ok(899));
        // Loose: looked up once, then known.
        assert_eq!(known.resolve(&id(950), || look_up(950)), Ok(951));
        assert_eq!(known.resolve(&id(950), || look_up(950)), Ok(951));
        assert_eq!(look_ups.get(), 1);
        // Not listed: looked up until found.
        assert_eq!(known.resolve(&id(5000), || look_up(5000)), Err(5000));
        assert_eq!(known.resolve(&id(5000), || look_up(5000)), Err(5000));
        assert_eq!(look_ups.get(), 3);
        assert_eq!(known.referenced(), 4);
        assert_eq!(known.orphans(), 1000 - 3);
    }

    #[test]
    fn sorts_by_id_stably() {
        // Ids sharing their first two bytes (few among 70,000) and repeated
        // ids (their order kept).
        let items: Vec<(BlobId, u32)> = (0..70_000u32).map(|n| (id(n % 50_000), n)).collect();
        let mut expected = items.clone();
        expected.sort_by_key(|(id, _)| *id);
        assert_eq!(sort_by_id(items, |(id, _)| id), expected);
        assert_eq!(
            sort_by_id(Vec::<(BlobId, u32)>::new(), |(id, _)| id),
            vec![]
        );
    }

    #[test]
    fn a_listing_out_of_order_is_sorted_and_one_in_order_is_taken_as_it_comes() {
        let mut ordered: Vec<_> = (0..6000).map(|n| (id(n), Some(u64::from(n)))).collect();
        ordered.sort();
        // Ids listed again, in a later place: the first size counts.
        let (nine, ten) = (ordered[9], ordered[10]);
        ordered.insert(10, (nine.0, None));
        ordered.insert(12, (ten.0, Some(99)));
        let mut shuffled = ordered.clone();
        shuffled.swap(100, 5000);
        for listing in [ordered, shuffled] {
            let len = listing.len();
            let mut known = KnownBlobs::from_ordered(listing.into_iter(), len);
            assert_eq!(known.listed.len(), 6000);
            assert!(known.listed.windows(2).all(|w| w[0].0 < w[1].0));
            assert_eq!((known.listed[9], known.listed[10]), (nine, ten));
            for n in 0..6000 {
                assert!(known.resolve(&id(n), || Err(())).is_ok(), "id {n}");
            }
        }
    }

    #[test]
    fn listed_sizes_are_those_a_lookup_finds() {
        let mut listed: Vec<_> = (0..3000).map(|n| (id(n), Some(u64::from(n)))).collect();
        listed.extend((3000..3100).map(|n| (id(n), None)));
        let mut known = KnownBlobs::from_unsorted(listed);
        // Each of the first 1000 twice, loose ones, unlisted ones.
        let refs: Vec<BlobId> = (0..1000)
            .chain(0..1000)
            .chain(3050..3060)
            .chain(9000..9010)
            .map(id)
            .collect();
        let sizes = known.listed_sizes(refs.iter());
        assert_eq!(sizes.len(), refs.len());
        for (i, size) in sizes.iter().enumerate() {
            let expected = (i < 2000).then_some((i % 1000) as u64);
            assert_eq!(*size, expected, "reference {i}");
        }
        // Listed ones are referenced, whether their size is known or not.
        assert_eq!(known.referenced(), 1010);
        assert_eq!(known.orphans(), 3100 - 1010);
    }

    #[test]
    fn finds_every_listed_id_and_no_other() {
        let listed: Vec<_> = (0..20_000).map(|n| (id(n), Some(1))).collect();
        let mut known = KnownBlobs::from_unsorted(listed);
        for n in 0..20_000 {
            assert_eq!(known.resolve(&id(n), || Err(())), Ok(1), "id {n}");
        }
        for n in 20_000..21_000 {
            assert_eq!(known.resolve(&id(n), || Err(())), Err(()), "id {n}");
        }
        assert_eq!(known.orphans(), 0);
        assert_eq!(known.referenced(), 21_000);
    }
}
