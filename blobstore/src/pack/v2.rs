//! The index of a pack of format version 2 (format-spec.md 2.12): the ids,
//! where each object lies in its group, and where each group lies in the
//! pack.
//!
//! ```text
//! offset          size   field
//!      0             4   magic "jpsI"
//!      4             1   version 2
//!      5             3   reserved, zero
//!      8             4   N, objects (u32)
//!     12             4   G, groups (u32)
//!     16          1024   fanout, as version 1
//!   1040          32·N   ids, sorted, no duplicates
//!   1040 + 32·N   12·N   per object, in id order: group (u32), offset in the
//!                        group's raw content (u32), raw length (u32)
//!   1040 + 44·N   16·G   per group, in pack order: offset of its header in
//!                        the pack (u64), payload length (u32), raw length (u32)
//!   …               32   the pack's trailer
//!   …               32   BLAKE3 of all preceding bytes of the index
//! ```

use crate::id::BlobId;

use super::{IndexError, FANOUT_LEN, INDEX_HEADER_LEN, INDEX_MAGIC, INDEX_TRAILER_LEN};

/// Format version of the packs and indexes this module describes.
pub const VERSION: u8 = 2;
/// Length of one object entry (group, offset, raw length).
pub const OBJECT_ENTRY_LEN: usize = 12;
/// Length of one group entry (pack offset, payload length, raw length).
pub const GROUP_ENTRY_LEN: usize = 16;

/// Where one object of a pack of version 2 lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupedEntry {
    /// The object's id.
    pub id: BlobId,
    /// Its group: the group's position in the pack (and the index's group
    /// table).
    pub group: u32,
    /// Offset of its first byte in the group's raw content.
    pub offset: u32,
    /// Length of its raw content.
    pub raw_len: u32,
}

impl GroupedEntry {
    /// One past its last byte in the group's raw content.
    pub fn end(&self) -> u64 {
        u64::from(self.offset) + u64::from(self.raw_len)
    }
}

/// Where one group of a pack of version 2 lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupEntry {
    /// Offset of the group's header from the start of the pack.
    pub offset: u64,
    /// Length of its payload (after the 20-byte header).
    pub payload_len: u32,
    /// Length of its raw content.
    pub raw_len: u32,
}

impl GroupEntry {
    /// Header plus payload.
    pub fn stored_len(&self) -> u64 {
        crate::group::GROUP_HEADER_LEN as u64 + u64::from(self.payload_len)
    }

    /// One past its last byte in the pack (saturating: bounds are checked
    /// before it is read).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.stored_len())
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Builds the bytes of an index of version 2 for `objects` (sorted here by
/// id; duplicates must have been removed) in `groups` (in pack order) of a
/// pack whose trailer is `pack_checksum`.
pub fn build_index(
    objects: &mut [GroupedEntry],
    groups: &[GroupEntry],
    pack_checksum: &[u8; 32],
) -> Vec<u8> {
    objects.sort_unstable_by_key(|e| e.id);
    // Each object in a group of the pack; each id once (a pass over the
    // objects: checked in debug builds).
    debug_assert!(
        objects.windows(2).all(|w| w[0].id < w[1].id),
        "an id indexed twice"
    );
    debug_assert!(
        objects.iter().all(|e| (e.group as usize) < groups.len()),
        "an object of a group the pack does not have"
    );
    let n = objects.len();
    let mut out = Vec::with_capacity(
        INDEX_HEADER_LEN
            + FANOUT_LEN
            + n * (32 + OBJECT_ENTRY_LEN)
            + groups.len() * GROUP_ENTRY_LEN
            + INDEX_TRAILER_LEN,
    );
    out.extend_from_slice(&INDEX_MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(&(groups.len() as u32).to_le_bytes());
    let mut counts = [0u32; 256];
    for e in objects.iter() {
        counts[e.id.as_bytes()[0] as usize] += 1;
    }
    let mut total = 0u32;
    for c in counts {
        total += c;
        out.extend_from_slice(&total.to_le_bytes());
    }
    for e in objects.iter() {
        out.extend_from_slice(e.id.as_bytes());
    }
    for e in objects.iter() {
        out.extend_from_slice(&e.group.to_le_bytes());
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.raw_len.to_le_bytes());
    }
    for g in groups {
        out.extend_from_slice(&g.offset.to_le_bytes());
        out.extend_from_slice(&g.payload_len.to_le_bytes());
        out.extend_from_slice(&g.raw_len.to_le_bytes());
    }
    out.extend_from_slice(pack_checksum);
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    assert_eq!(
        out.len(),
        INDEX_HEADER_LEN
            + FANOUT_LEN
            + n * (32 + OBJECT_ENTRY_LEN)
            + groups.len() * GROUP_ENTRY_LEN
            + INDEX_TRAILER_LEN,
        "an index of {n} objects and {} groups",
        groups.len()
    );
    out
}

/// Checks the structure of an index of version 2 whose checksum, magic,
/// version and length for its `count` objects in `groups` groups were
/// checked already: its reserved bytes, the group count, and the fanout.
pub(super) fn check_shape(index: &[u8], count: usize, groups: usize) -> Result<(), IndexError> {
    if index[5..8] != [0, 0, 0] {
        return Err((
            5,
            "reserved bytes to be zero".into(),
            format!("{:02x?}", &index[5..8]),
        ));
    }
    // Every group holds at least one object of the index.
    if groups > count || (count > 0 && groups == 0) {
        return Err((
            12,
            format!("between 1 and {count} groups for {count} objects"),
            groups.to_string(),
        ));
    }
    super::check_fanout(index, count)
}

/// Offset in the index of object entry `i` of an index of `count` objects.
pub(super) fn object_entry_at(count: usize, i: usize) -> usize {
    INDEX_HEADER_LEN + FANOUT_LEN + count * 32 + i * OBJECT_ENTRY_LEN
}

/// Offset in the index of group entry `g` of an index of `count` objects.
pub(super) fn group_entry_at(count: usize, g: usize) -> usize {
    INDEX_HEADER_LEN + FANOUT_LEN + count * (32 + OBJECT_ENTRY_LEN) + g * GROUP_ENTRY_LEN
}

/// Object entry `i` of an index of `count` objects (`id` read by the
/// caller).
pub(super) fn object_entry(index: &[u8], count: usize, i: usize, id: BlobId) -> GroupedEntry {
    let at = object_entry_at(count, i);
    GroupedEntry {
        id,
        group: u32_at(index, at),
        offset: u32_at(index, at + 4),
        raw_len: u32_at(index, at + 8),
    }
}

/// The group of object entry `i` of an index of `count` objects.
pub(super) fn object_group(index: &[u8], count: usize, i: usize) -> u32 {
    u32_at(index, object_entry_at(count, i))
}

/// Object entry `i` of an index of `count` objects without its id: its
/// group, offset and raw length.
pub(super) fn object_place(index: &[u8], count: usize, i: usize) -> (u32, u32, u32) {
    let at = object_entry_at(count, i);
    (
        u32_at(index, at),
        u32_at(index, at + 4),
        u32_at(index, at + 8),
    )
}

/// Group entry `g` of an index of `count` objects.
pub(super) fn group_entry(index: &[u8], count: usize, g: usize) -> GroupEntry {
    let at = group_entry_at(count, g);
    GroupEntry {
        offset: u64_at(index, at),
        payload_len: u32_at(index, at + 8),
        raw_len: u32_at(index, at + 12),
    }
}
