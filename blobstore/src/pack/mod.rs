//! Packs: many objects in one immutable file, found through a sorted index.
//!
//! A pack is written once per batch (one fsync for the pack, one for the index)
//! and never modified after it is published. Its index is memory-mapped; a
//! lookup is a fanout-table read plus a binary search over at most the ids that
//! share the first byte. Two versions are read (format-spec.md 2.3, 2.4 and
//! 2.12): in version 1 every object is encoded on its own (2.1); in version 2,
//! which writers produce, objects are compressed together in *groups*
//! ([`crate::group`]) and the index says where each object lies in its group
//! ([`v2`]). The layouts are repeated in the constants below.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{read_exact_at, Mapping, ObjectReader};
use crate::group::{self, GroupHeader, GroupSettings, GROUP_HEADER_LEN};
use crate::id::BlobId;
use crate::object::HEADER_LEN;

pub mod v2;

pub use v2::{GroupEntry, GroupedEntry};

/// Magic of a pack file.
pub const PACK_MAGIC: [u8; 4] = *b"jpsP";
/// Magic of a pack index file.
pub const INDEX_MAGIC: [u8; 4] = *b"jpsI";
/// Format version 1 of packs and indexes: objects encoded one by one.
pub const PACK_VERSION_1: u8 = 1;
/// Format version of the packs and indexes writers produce: objects in
/// groups (version 2).
pub const PACK_VERSION: u8 = v2::VERSION;
/// Length of the pack header.
pub const PACK_HEADER_LEN: u64 = 16;
/// Length of the pack trailer (BLAKE3 of everything before it).
pub const PACK_TRAILER_LEN: u64 = 32;
/// Length of the index header.
const INDEX_HEADER_LEN: usize = 16;
/// Length of the fanout table.
const FANOUT_LEN: usize = 256 * 4;
/// Length of one index entry of version 1 (offset, stored length, raw
/// length).
const ENTRY_LEN: usize = 24;
/// Length of the index trailer (pack checksum, index checksum).
const INDEX_TRAILER_LEN: usize = 64;

/// The header of a pack of version 1.
pub fn pack_header() -> [u8; PACK_HEADER_LEN as usize] {
    let mut h = [0u8; PACK_HEADER_LEN as usize];
    h[..4].copy_from_slice(&PACK_MAGIC);
    h[4] = PACK_VERSION_1;
    h
}

/// The header of a pack of version 2 whose writer grouped objects with
/// `settings` (recorded: byte 5 the zstd level, byte 6 log2 of the group
/// target).
pub fn pack_header_v2(settings: GroupSettings) -> [u8; PACK_HEADER_LEN as usize] {
    let settings = settings.clamped();
    let mut h = [0u8; PACK_HEADER_LEN as usize];
    h[..4].copy_from_slice(&PACK_MAGIC);
    h[4] = v2::VERSION;
    // Clamped to -7..=22: fits an i8.
    h[5] = (settings.level as i8) as u8;
    h[6] = settings.group_log2();
    h
}

/// What a pack header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackHeader {
    /// The format version (1 or 2).
    pub version: u8,
    /// Version 2: the settings its writer grouped objects with.
    pub settings: Option<GroupSettings>,
}

/// Checks a pack header of either version; returns what it says or what
/// is wrong.
pub fn check_pack_header(h: &[u8]) -> Result<PackHeader, (u64, String, String)> {
    if h.len() < PACK_HEADER_LEN as usize {
        return Err((
            0,
            "a 16-byte pack header".into(),
            format!("{} bytes", h.len()),
        ));
    }
    if h[..4] != PACK_MAGIC {
        return Err((0, "pack magic \"jpsP\"".into(), format!("{:02x?}", &h[..4])));
    }
    let reserved_from = match h[4] {
        PACK_VERSION_1 => 5,
        v2::VERSION => 7,
        other => {
            return Err((
                4,
                format!("pack format version {PACK_VERSION_1} or {}", v2::VERSION),
                format!("version {other}"),
            ))
        }
    };
    if h[reserved_from..16].iter().any(|b| *b != 0) {
        return Err((
            reserved_from as u64,
            "reserved bytes to be zero".into(),
            format!("{:02x?}", &h[reserved_from..16]),
        ));
    }
    if h[4] == PACK_VERSION_1 {
        return Ok(PackHeader {
            version: PACK_VERSION_1,
            settings: None,
        });
    }
    let log2 = h[6];
    if !(12..=26).contains(&log2) {
        return Err((
            6,
            "log2 of the group target, 12 to 26".into(),
            log2.to_string(),
        ));
    }
    Ok(PackHeader {
        version: v2::VERSION,
        settings: Some(GroupSettings {
            level: i32::from(h[5] as i8),
            group_bytes: 1 << log2,
        }),
    })
}

/// Where one object lives inside a pack of version 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackEntry {
    /// The object's id.
    pub id: BlobId,
    /// Offset of the object header from the start of the pack.
    pub offset: u64,
    /// Length of header plus payload.
    pub stored_len: u64,
    /// Length of the raw content.
    pub raw_len: u64,
}

/// Where an object found in a pack lies, by the pack's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// In a pack of version 1: its own object encoding.
    Object(PackEntry),
    /// In a pack of version 2: a slice of a group's raw content.
    Grouped(GroupedEntry),
}

impl Found {
    /// The object's id.
    pub fn id(&self) -> BlobId {
        match self {
            Found::Object(e) => e.id,
            Found::Grouped(e) => e.id,
        }
    }

    /// Length of its raw content.
    pub fn raw_len(&self) -> u64 {
        match self {
            Found::Object(e) => e.raw_len,
            Found::Grouped(e) => u64::from(e.raw_len),
        }
    }
}

/// Builds the bytes of an index of version 1 for `entries` of a pack whose
/// trailer is `pack_checksum`. Sorts the entries by id; duplicates must have
/// been removed.
pub fn build_index(entries: &mut [PackEntry], pack_checksum: &[u8; 32]) -> Vec<u8> {
    entries.sort_by_key(|e| e.id);
    // Each id once (a pass over the entries: checked in debug builds).
    debug_assert!(
        entries.windows(2).all(|w| w[0].id < w[1].id),
        "an id indexed twice"
    );
    let n = entries.len();
    let mut out = Vec::with_capacity(
        INDEX_HEADER_LEN + FANOUT_LEN + n * (32 + ENTRY_LEN) + INDEX_TRAILER_LEN,
    );
    out.extend_from_slice(&INDEX_MAGIC);
    out.push(PACK_VERSION_1);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let mut counts = [0u32; 256];
    for e in entries.iter() {
        counts[e.id.as_bytes()[0] as usize] += 1;
    }
    let mut total = 0u32;
    for c in counts {
        total += c;
        out.extend_from_slice(&total.to_le_bytes());
    }
    for e in entries.iter() {
        out.extend_from_slice(e.id.as_bytes());
    }
    for e in entries.iter() {
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.stored_len.to_le_bytes());
        out.extend_from_slice(&e.raw_len.to_le_bytes());
    }
    out.extend_from_slice(pack_checksum);
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    assert_eq!(
        out.len(),
        INDEX_HEADER_LEN + FANOUT_LEN + n * (32 + ENTRY_LEN) + INDEX_TRAILER_LEN,
        "an index of {n} objects"
    );
    out
}

/// Numbers pack loads, so that the group cache keys groups by load (a
/// pack's groups never change, and a pack loaded again is a new key).
static PACK_SERIAL: AtomicU64 = AtomicU64::new(0);

/// A loaded pack: its mapped index and where its pack file is. It holds no
/// descriptor: the pack file is opened when it is read, through the store's
/// bounded set of open pack files, so that the descriptors a process holds
/// do not grow with the number of packs (format-spec.md 2.6).
#[derive(Debug)]
pub struct Pack {
    /// The pack's name: the hex BLAKE3 of its contents.
    pub name: String,
    /// Path of the pack file (relative to the storage root).
    pub pack_path: PathBuf,
    /// Path of the index file (relative to the storage root).
    pub index_path: PathBuf,
    /// Length of the pack file.
    pub pack_len: u64,
    index: Mapping,
    shape: IndexShape,
    serial: u64,
}

/// What is wrong with an index: offset inside the index, expected, found.
pub type IndexError = (u64, String, String);

/// What an index that passed [`check_index`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexShape {
    /// Its format version (1 or 2).
    pub version: u8,
    /// Objects.
    pub objects: usize,
    /// Groups (0 in version 1).
    pub groups: usize,
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

/// The first 8 bytes of an id as a big-endian integer: ordered as the bytes.
fn prefix(id: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&id[..8]);
    u64::from_be_bytes(x)
}

/// The version of `index`, the bytes of a pack index, if it is an index of
/// a newer format than this build reads: its magic, a version above 2, and
/// in its last 32 bytes the BLAKE3 of all the bytes before them, which
/// every version keeps (format-spec.md 2.10). A version byte damaged into a
/// larger one fails that checksum: damage, not a newer format.
pub fn newer_index_version(index: &[u8]) -> Option<u8> {
    if index.len() < INDEX_HEADER_LEN + INDEX_TRAILER_LEN
        || index[..4] != INDEX_MAGIC
        || index[4] <= v2::VERSION
    {
        return None;
    }
    let body = index.len() - 32;
    (blake3::hash(&index[..body]).as_bytes()[..] == index[body..]).then_some(index[4])
}

/// Checks an index's structure and checksum, of either version; returns
/// its version, object count and group count.
pub fn check_index(index: &[u8]) -> Result<IndexShape, IndexError> {
    let fixed = INDEX_HEADER_LEN + FANOUT_LEN + INDEX_TRAILER_LEN;
    if index.len() < fixed {
        return Err((
            0,
            format!("an index of at least {fixed} bytes"),
            format!("{} bytes", index.len()),
        ));
    }
    if index[..4] != INDEX_MAGIC {
        return Err((
            0,
            "index magic \"jpsI\"".into(),
            format!("{:02x?}", &index[..4]),
        ));
    }
    let version = index[4];
    if version != PACK_VERSION_1 && version != v2::VERSION {
        return Err((
            4,
            format!("index format version {PACK_VERSION_1} or {}", v2::VERSION),
            format!("version {version}"),
        ));
    }
    // The length its counts give, before the checksum: an index with bytes
    // appended (a sparse tail) is refused without hashing all of them.
    let count = u32_at(index, 8) as usize;
    let groups = u32_at(index, 12) as usize;
    // u64 arithmetic: a forged count cannot overflow the expected length.
    let (expected_len, holding) = if version == v2::VERSION {
        (
            fixed as u64
                + count as u64 * (32 + v2::OBJECT_ENTRY_LEN) as u64
                + groups as u64 * v2::GROUP_ENTRY_LEN as u64,
            format!("{count} objects in {groups} groups"),
        )
    } else {
        (
            fixed as u64 + count as u64 * (32 + ENTRY_LEN) as u64,
            format!("{count} objects"),
        )
    };
    if index.len() as u64 != expected_len {
        return Err((
            8,
            format!("an index of {expected_len} bytes for {holding}"),
            format!("{} bytes", index.len()),
        ));
    }
    let body = index.len() - 32;
    let sum = blake3::hash(&index[..body]);
    if sum.as_bytes()[..] != index[body..] {
        return Err((
            body as u64,
            format!("index checksum {}", sum.to_hex()),
            hex::encode(&index[body..]),
        ));
    }
    if version == v2::VERSION {
        v2::check_shape(index, count, groups)?;
        return Ok(IndexShape {
            version,
            objects: count,
            groups,
        });
    }
    check_fanout(index, count)?;
    Ok(IndexShape {
        version,
        objects: count,
        groups: 0,
    })
}

/// Checks that the fanout table is non-decreasing and ends at `count`.
fn check_fanout(index: &[u8], count: usize) -> Result<(), IndexError> {
    let mut prev = 0u32;
    for i in 0..256 {
        let f = u32_at(index, INDEX_HEADER_LEN + i * 4);
        if f < prev {
            return Err((
                (INDEX_HEADER_LEN + i * 4) as u64,
                "a non-decreasing fanout table".into(),
                format!("{f} after {prev}"),
            ));
        }
        prev = f;
    }
    if prev as usize != count {
        return Err((
            (INDEX_HEADER_LEN + 255 * 4) as u64,
            format!("fanout total {count}"),
            prev.to_string(),
        ));
    }
    Ok(())
}

impl Pack {
    /// Wraps a mapped index (checked here) and the length of its pack file.
    pub fn new(
        name: String,
        pack_path: PathBuf,
        index_path: PathBuf,
        index: Mapping,
        pack_len: u64,
    ) -> Result<Self, IndexError> {
        let shape = check_index(&index)?;
        Ok(Self {
            name,
            pack_path,
            index_path,
            pack_len,
            index,
            shape,
            serial: PACK_SERIAL.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The format version of the pack (its index's).
    pub fn version(&self) -> u8 {
        self.shape.version
    }

    /// A number of this load of the pack, unique in the process.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// Number of objects in the pack.
    pub fn len(&self) -> usize {
        self.shape.objects
    }

    /// Whether the pack holds no objects.
    pub fn is_empty(&self) -> bool {
        self.shape.objects == 0
    }

    /// Number of groups (0 for a pack of version 1).
    pub fn group_count(&self) -> usize {
        self.shape.groups
    }

    /// The pack checksum recorded in the index.
    pub fn recorded_pack_checksum(&self) -> &[u8] {
        let end = self.index.len() - 32;
        &self.index[end - 32..end]
    }

    fn id_at(&self, i: usize) -> &[u8] {
        let at = INDEX_HEADER_LEN + FANOUT_LEN + i * 32;
        &self.index[at..at + 32]
    }

    /// The `i`-th id in id order.
    pub fn id(&self, i: usize) -> BlobId {
        let mut id = [0u8; 32];
        id.copy_from_slice(self.id_at(i));
        BlobId::from_bytes(id)
    }

    /// The raw length of the `i`-th object in id order.
    pub fn raw_len(&self, i: usize) -> u64 {
        match self.shape.version {
            PACK_VERSION_1 => self.entry(i).raw_len,
            _ => u64::from(v2::object_place(&self.index, self.shape.objects, i).2),
        }
    }

    /// The `i`-th entry in id order of a pack of version 1.
    pub fn entry(&self, i: usize) -> PackEntry {
        debug_assert_eq!(self.shape.version, PACK_VERSION_1);
        let at = INDEX_HEADER_LEN + FANOUT_LEN + self.shape.objects * 32 + i * ENTRY_LEN;
        PackEntry {
            id: self.id(i),
            offset: u64_at(&self.index, at),
            stored_len: u64_at(&self.index, at + 8),
            raw_len: u64_at(&self.index, at + 16),
        }
    }

    /// The `i`-th object in id order of a pack of version 2.
    pub fn grouped(&self, i: usize) -> GroupedEntry {
        debug_assert_eq!(self.shape.version, v2::VERSION);
        v2::object_entry(&self.index, self.shape.objects, i, self.id(i))
    }

    /// Group `g` (below [`Pack::group_count`]) of a pack of version 2.
    pub fn group(&self, g: usize) -> GroupEntry {
        v2::group_entry(&self.index, self.shape.objects, g)
    }

    /// The `i`-th object in id order, of either version.
    pub fn found(&self, i: usize) -> Found {
        match self.shape.version {
            PACK_VERSION_1 => Found::Object(self.entry(i)),
            _ => Found::Grouped(self.grouped(i)),
        }
    }

    /// Byte offset of the `i`-th object entry inside the index file (for
    /// messages).
    pub fn entry_offset_in_index(&self, i: usize) -> u64 {
        match self.shape.version {
            PACK_VERSION_1 => {
                (INDEX_HEADER_LEN + FANOUT_LEN + self.shape.objects * 32 + i * ENTRY_LEN) as u64
            }
            _ => v2::object_entry_at(self.shape.objects, i) as u64,
        }
    }

    /// Byte offset of group entry `g` inside the index file (for messages).
    pub fn group_offset_in_index(&self, g: usize) -> u64 {
        v2::group_entry_at(self.shape.objects, g) as u64
    }

    /// The position of `id` in id order: a fanout read and a binary search.
    pub fn position(&self, id: &BlobId) -> Option<usize> {
        let count = self.shape.objects;
        let first = id.as_bytes()[0] as usize;
        let lo = if first == 0 {
            0
        } else {
            u32_at(&self.index, INDEX_HEADER_LEN + (first - 1) * 4) as usize
        };
        let hi = u32_at(&self.index, INDEX_HEADER_LEN + first * 4) as usize;
        let (mut lo, mut hi) = (lo.min(count), hi.min(count));
        let key = &id.as_bytes()[..];
        // Ids are uniformly distributed: their first 8 bytes nearly always
        // decide, as one integer comparison.
        let key_prefix = prefix(key);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let at = self.id_at(mid);
            let order = prefix(at).cmp(&key_prefix).then_with(|| at.cmp(key));
            match order {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Finds `id`.
    pub fn find(&self, id: &BlobId) -> Option<Found> {
        self.position(id).map(|i| self.found(i))
    }

    /// Checks that an entry of version 1 lies inside the object area of the
    /// pack.
    pub fn check_entry_bounds(&self, e: &PackEntry) -> Result<(), String> {
        let end = e.offset.checked_add(e.stored_len);
        let limit = self.pack_len.saturating_sub(PACK_TRAILER_LEN);
        match end {
            Some(end)
                if e.offset >= PACK_HEADER_LEN
                    && e.stored_len >= HEADER_LEN as u64
                    && end <= limit =>
            {
                Ok(())
            }
            _ => Err(format!(
                "object at {}+{} outside the object area {}..{} of the pack",
                e.offset, e.stored_len, PACK_HEADER_LEN, limit
            )),
        }
    }

    /// Checks that group `g` lies inside the group area of the pack, that
    /// its payload is no longer than its raw content (a writer stores a
    /// group raw when zstd would not make it smaller) and that its raw
    /// length is at most `max_raw`; returns it.
    pub fn check_group_bounds(&self, g: usize, max_raw: u64) -> Result<GroupEntry, String> {
        if g >= self.shape.groups {
            return Err(format!(
                "group {g} of a pack of {} groups",
                self.shape.groups
            ));
        }
        let e = self.group(g);
        let limit = self.pack_len.saturating_sub(PACK_TRAILER_LEN);
        let end = e.offset.checked_add(e.stored_len());
        if e.offset < PACK_HEADER_LEN || end.is_none_or(|end| end > limit) {
            return Err(format!(
                "group {g} at {}+{} outside the group area {}..{} of the pack",
                e.offset,
                e.stored_len(),
                PACK_HEADER_LEN,
                limit
            ));
        }
        if e.payload_len > e.raw_len {
            return Err(format!(
                "group {g} with a payload of {} bytes for {} raw bytes",
                e.payload_len, e.raw_len
            ));
        }
        if u64::from(e.raw_len) > max_raw {
            return Err(format!(
                "group {g} of {} raw bytes, more than the limit of {max_raw}",
                e.raw_len
            ));
        }
        Ok(e)
    }

    /// Checks that an object of version 2 lies inside its group (the group
    /// itself checked by [`Pack::check_group_bounds`]); returns the group.
    pub fn check_grouped_bounds(
        &self,
        e: &GroupedEntry,
        max_raw: u64,
    ) -> Result<GroupEntry, String> {
        let g = self.check_group_bounds(e.group as usize, max_raw)?;
        if e.end() > u64::from(g.raw_len) {
            return Err(format!(
                "object at {}+{} outside the {} raw bytes of group {}",
                e.offset, e.raw_len, g.raw_len, e.group
            ));
        }
        Ok(g)
    }

    /// Reads the stored bytes (header and payload) of an entry of version 1
    /// from `file`, this pack's file, and checks them with
    /// [`check_stored_entry`]. `max` bounds the allocation.
    pub fn read_stored(
        &self,
        file: &dyn ObjectReader,
        e: &PackEntry,
        max: u64,
    ) -> Result<Vec<u8>, ReadError> {
        self.check_entry_bounds(e).map_err(ReadError::Bounds)?;
        if e.stored_len > max {
            return Err(ReadError::TooLarge(e.stored_len));
        }
        let len = usize::try_from(e.stored_len).map_err(|_| ReadError::TooLarge(e.stored_len))?;
        let mut buf = vec![0u8; len];
        read_exact_at(file, &mut buf, e.offset).map_err(ReadError::Io)?;
        check_stored_entry(e, &buf)?;
        Ok(buf)
    }

    /// Reads the stored bytes (header and payload) of group `g` from
    /// `file`, this pack's file, into `buf`, and checks them with
    /// [`check_stored_group`]. `max_raw` bounds the group's raw length (and
    /// so the allocation: a payload is never longer).
    pub fn read_group(
        &self,
        file: &dyn ObjectReader,
        g: usize,
        max_raw: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(GroupEntry, GroupHeader), ReadError> {
        let e = self
            .check_group_bounds(g, max_raw)
            .map_err(ReadError::Bounds)?;
        // At most max_raw plus a header (checked above), which the caller
        // chose to fit in memory.
        crate::object::set_len(buf, e.stored_len() as usize);
        read_exact_at(file, buf, e.offset).map_err(ReadError::Io)?;
        let header = check_stored_group(&e, buf)?;
        Ok((e, header))
    }

    /// Iterates all entries in id order of a pack of version 1.
    pub fn entries(&self) -> impl Iterator<Item = PackEntry> + '_ {
        (0..self.shape.objects).map(|i| self.entry(i))
    }

    /// Iterates all ids, in id order.
    pub fn ids(&self) -> impl Iterator<Item = BlobId> + '_ {
        (0..self.shape.objects).map(|i| self.id(i))
    }

    /// Iterates all ids with their raw lengths, in id order.
    pub fn id_sizes(&self) -> impl Iterator<Item = (BlobId, u64)> + '_ {
        (0..self.shape.objects).map(|i| (self.id(i), self.raw_len(i)))
    }

    /// The objects of each group of a pack of version 2, in group order,
    /// each group's in id order, each with its position in id order;
    /// objects whose group number is out of range apart (damage, for the
    /// caller to report).
    pub fn group_members(&self) -> GroupMembers {
        // A counting sort by group into one array (two passes over the
        // index in id order: the second copies each id beside its group's
        // others, so that who walks a group reads its members and their
        // ids front to back). Planning `fsck --read-data` does this for
        // every pack on one thread: sorting a vector per group of 56-byte
        // entries by offset was most of that time, and reading the ids
        // again in offset order (a cache miss each, in an index of
        // thousands of objects) the next most. Only the overlap check wants
        // offset order ([`GroupMembers::overlap`]).
        let count = self.shape.objects;
        let groups = self.shape.groups;
        let mut starts = vec![0usize; groups + 1];
        let mut stray = Vec::new();
        for i in 0..count {
            let g = v2::object_group(&self.index, count, i) as usize;
            if g < groups {
                starts[g + 1] += 1;
            } else {
                stray.push((i, self.grouped(i)));
            }
        }
        for g in 0..groups {
            starts[g + 1] += starts[g];
        }
        let mut next = starts.clone();
        let mut members = vec![GroupMember::default(); count - stray.len()];
        let mut ids = vec![BlobId::from_bytes([0; 32]); members.len()];
        for i in 0..count {
            let (g, offset, raw_len) = v2::object_place(&self.index, count, i);
            let g = g as usize;
            if g < groups {
                let slot = next[g];
                // Positions and slots fit in 32 bits: the fanout counts
                // are u32.
                members[slot] = GroupMember {
                    offset,
                    raw_len,
                    position: i as u32,
                    slot: slot as u32,
                };
                ids[slot] = self.id(i);
                next[g] += 1;
            }
        }
        GroupMembers {
            members,
            ids,
            starts,
            stray,
        }
    }
}

/// An object of a group of a pack of version 2, as
/// [`Pack::group_members`] lists it (its id: [`GroupMembers::id`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupMember {
    /// Offset of its first byte in the group's raw content.
    pub offset: u32,
    /// Length of its raw content.
    pub raw_len: u32,
    /// Its position in id order.
    pub position: u32,
    /// Where [`GroupMembers`] keeps its id (beside its group's others).
    slot: u32,
}

impl GroupMember {
    /// One past its last byte in the group's raw content.
    pub fn end(&self) -> u64 {
        u64::from(self.offset) + u64::from(self.raw_len)
    }

    /// Its position in id order, as an index.
    pub fn index(&self) -> usize {
        self.position as usize
    }
}

/// The objects of each group of a pack of version 2
/// ([`Pack::group_members`]).
#[derive(Clone, Debug, Default)]
pub struct GroupMembers {
    /// Every object in a group, group by group, each group's in id order.
    members: Vec<GroupMember>,
    /// The members' ids, by slot (`members[i]`'s at `i`).
    ids: Vec<BlobId>,
    /// Where each group's objects start in `members` (and, last, the end).
    starts: Vec<usize>,
    /// Objects whose group number is beyond the group table (damage), with
    /// their positions.
    pub stray: Vec<(usize, GroupedEntry)>,
}

impl GroupMembers {
    /// The objects of group `g`, in id order (none past the table).
    pub fn group(&self, g: usize) -> &[GroupMember] {
        match (self.starts.get(g), self.starts.get(g + 1)) {
            (Some(&from), Some(&to)) => &self.members[from..to],
            _ => &[],
        }
    }

    /// The objects of each group, in group order.
    pub fn groups(&self) -> impl Iterator<Item = &[GroupMember]> + '_ {
        self.starts.windows(2).map(|w| &self.members[w[0]..w[1]])
    }

    /// The first object of group `g`, in offset order, that starts before
    /// the one before it ends (damage of the index), with where that one
    /// ends.
    pub fn overlap(&self, g: usize) -> Option<(u64, GroupMember)> {
        let group = self.group(g);
        // Offsets and lengths sorted as one word each; the member found
        // again by them.
        let mut keys: Vec<u64> = group
            .iter()
            .map(|m| (u64::from(m.offset) << 32) | u64::from(m.raw_len))
            .collect();
        keys.sort_unstable();
        let place = |k: u64| ((k >> 32) as u32, k as u32);
        let (before, after) = keys.windows(2).find_map(|w| {
            let ((a_offset, a_len), (b_offset, b_len)) = (place(w[0]), place(w[1]));
            let end = u64::from(a_offset) + u64::from(a_len);
            (u64::from(b_offset) < end).then_some((end, (b_offset, b_len)))
        })?;
        let member = group
            .iter()
            .rev()
            .find(|m| (m.offset, m.raw_len) == after)?;
        Some((before, *member))
    }

    /// The id of `member`, one of these.
    pub fn id(&self, member: &GroupMember) -> BlobId {
        self.ids[member.slot as usize]
    }

    /// The entry of `member` of group `g` (as [`Pack::grouped`] reads it
    /// at its position).
    pub fn entry(&self, g: usize, member: &GroupMember) -> GroupedEntry {
        GroupedEntry {
            id: self.id(member),
            group: g as u32,
            offset: member.offset,
            raw_len: member.raw_len,
        }
    }
}

/// Checks the stored bytes of entry `e` with [`crate::object::check_stored`]
/// (header fields, CRC-32) and that the raw length equals the index's;
/// returns the object's header.
pub fn check_stored_entry(
    e: &PackEntry,
    stored: &[u8],
) -> Result<crate::object::Header, ReadError> {
    let header = crate::object::check_stored(stored).map_err(ReadError::Object)?;
    if header.raw_len != e.raw_len {
        return Err(ReadError::Object(crate::object::DecodeError {
            offset: 8,
            expected: format!("raw length {} as recorded in the index", e.raw_len),
            found: header.raw_len.to_string(),
        }));
    }
    Ok(header)
}

/// Checks the stored bytes of group `e` with [`group::check_group`] (header
/// fields, payload length, CRC-32) and that its raw and payload lengths are
/// the index's; returns the group's header.
pub fn check_stored_group(e: &GroupEntry, stored: &[u8]) -> Result<GroupHeader, ReadError> {
    let header = group::check_group(stored).map_err(ReadError::Object)?;
    if header.raw_len != e.raw_len {
        return Err(ReadError::Object(crate::object::DecodeError {
            offset: 8,
            expected: format!("raw length {} as recorded in the index", e.raw_len),
            found: header.raw_len.to_string(),
        }));
    }
    if header.payload_len != e.payload_len {
        return Err(ReadError::Object(crate::object::DecodeError {
            offset: 12,
            expected: format!("payload length {} as recorded in the index", e.payload_len),
            found: header.payload_len.to_string(),
        }));
    }
    debug_assert_eq!(stored.len(), GROUP_HEADER_LEN + e.payload_len as usize);
    Ok(header)
}

/// Why reading an entry's stored bytes failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadError {
    /// The entry points outside the pack.
    Bounds(String),
    /// The entry is larger than allowed.
    TooLarge(u64),
    /// The stored bytes are not a valid object (offset relative to the object).
    Object(crate::object::DecodeError),
    /// Reading failed.
    Io(std::io::Error),
}

/// `pack-<name>.pack` / `pack-<name>.idx` for a pack name.
pub fn pack_file_names(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("pack-{name}.pack")),
        dir.join(format!("pack-{name}.idx")),
    )
}

/// The pack name in an index file name `pack-<64 hex>.idx`, if it is one.
pub fn name_of_index_file(file_name: &str) -> Option<&str> {
    let name = file_name.strip_prefix("pack-")?.strip_suffix(".idx")?;
    (name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then_some(name)
}

/// The pack name in a pack file name `pack-<64 hex>.pack`, if it is one.
pub fn name_of_pack_file(file_name: &str) -> Option<&str> {
    let name = file_name.strip_prefix("pack-")?.strip_suffix(".pack")?;
    (name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seed: &[u8], offset: u64) -> PackEntry {
        PackEntry {
            id: BlobId::of(seed),
            offset,
            stored_len: 20,
            raw_len: 4,
        }
    }

    /// A pack of `pack_len` bytes (never read: only its index is) with
    /// index bytes `idx`.
    fn pack_with_index(idx: Vec<u8>, pack_len: u64) -> Pack {
        Pack::new(
            "n".into(),
            "p".into(),
            "i".into(),
            Mapping::Owned(idx),
            pack_len,
        )
        .expect("valid index")
    }

    #[test]
    fn index_round_trips_and_finds_every_id() {
        let entries: Vec<PackEntry> = (0..1000u32)
            .map(|i| entry(&i.to_le_bytes(), 16 + 20 * i as u64))
            .collect();
        let idx = build_index(&mut entries.clone(), &[9; 32]);
        assert_eq!(check_index(&idx).expect("valid").objects, 1000);
        let pack = pack_with_index(idx, 16 + 20 * 1000 + 32);
        assert_eq!(pack.len(), 1000);
        for e in &entries {
            assert_eq!(pack.find(&e.id), Some(Found::Object(*e)));
            assert!(pack.check_entry_bounds(e).is_ok());
        }
        for i in 1000..1100u32 {
            assert_eq!(pack.find(&BlobId::of(&i.to_le_bytes())), None);
        }
        let listed: Vec<BlobId> = pack.entries().map(|e| e.id).collect();
        assert!(listed.windows(2).all(|w| w[0] < w[1]), "entries are sorted");
    }

    #[test]
    fn ids_sharing_their_first_bytes_are_told_apart() {
        // Ids equal in their first 8 bytes (the fast comparison) and
        // differing only later.
        let ids: Vec<BlobId> = (0..64u8)
            .map(|i| {
                let mut b = [0x5a; 32];
                b[8 + usize::from(i % 24)] = i;
                b[31] = i;
                BlobId::from_bytes(b)
            })
            .collect();
        let mut entries: Vec<PackEntry> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| PackEntry {
                id: *id,
                offset: 16 + 20 * i as u64,
                stored_len: 20,
                raw_len: 4,
            })
            .collect();
        let idx = build_index(&mut entries, &[3; 32]);
        let pack = pack_with_index(idx, 16 + 20 * 64 + 32);
        for e in &entries {
            assert_eq!(pack.find(&e.id), Some(Found::Object(*e)));
        }
        let mut absent = [0x5a; 32];
        absent[31] = 200;
        assert_eq!(pack.find(&BlobId::from_bytes(absent)), None);
    }

    #[test]
    fn any_flipped_byte_in_an_index_is_detected() {
        let mut entries: Vec<PackEntry> = (0..20u32)
            .map(|i| entry(&i.to_le_bytes(), 16 + 20 * i as u64))
            .collect();
        let idx = build_index(&mut entries, &[1; 32]);
        for at in 0..idx.len() {
            let mut bad = idx.clone();
            bad[at] ^= 0x40;
            assert!(check_index(&bad).is_err(), "flip at {at} undetected");
        }
        for len in 0..idx.len() {
            assert!(
                check_index(&idx[..len]).is_err(),
                "truncation to {len} undetected"
            );
        }
    }

    /// An index of version 2 for `n` objects in groups of `per` objects of
    /// 10 bytes each, and the pack length it fits.
    fn v2_index(n: u32, per: u32) -> (Vec<GroupedEntry>, Vec<GroupEntry>, Vec<u8>, u64) {
        let objects: Vec<GroupedEntry> = (0..n)
            .map(|i| GroupedEntry {
                id: BlobId::of(&i.to_le_bytes()),
                group: i / per,
                offset: (i % per) * 10,
                raw_len: 10,
            })
            .collect();
        let groups: Vec<GroupEntry> = (0..n.div_ceil(per))
            .map(|g| GroupEntry {
                offset: 16 + u64::from(g) * 40,
                payload_len: 20,
                raw_len: per * 10,
            })
            .collect();
        let idx = v2::build_index(&mut objects.clone(), &groups, &[7; 32]);
        let pack_len = 16 + groups.len() as u64 * 40 + 32;
        (objects, groups, idx, pack_len)
    }

    #[test]
    fn a_version_2_index_round_trips_and_finds_every_id_in_its_group() {
        let (objects, groups, idx, pack_len) = v2_index(1000, 7);
        let shape = check_index(&idx).expect("valid");
        assert_eq!((shape.version, shape.objects, shape.groups), (2, 1000, 143));
        let pack = pack_with_index(idx, pack_len);
        for e in &objects {
            assert_eq!(pack.find(&e.id), Some(Found::Grouped(*e)));
            let g = pack.check_grouped_bounds(e, 1 << 20).expect("inside");
            assert_eq!(g, groups[e.group as usize]);
        }
        assert_eq!(pack.find(&BlobId::of(b"absent")), None);
        let members = pack.group_members();
        assert!(members.stray.is_empty());
        assert_eq!(members.groups().count(), 143);
        assert!(members
            .groups()
            .enumerate()
            .all(|(g, m)| !m.is_empty() && members.overlap(g).is_none()));
        // Each object once, in its group, as the index places it.
        let mut seen = vec![false; objects.len()];
        for (g, group) in members.groups().enumerate() {
            assert_eq!(group, members.group(g));
            for m in group {
                let e = pack.grouped(m.index());
                assert_eq!(
                    (e.group, e.offset, e.raw_len),
                    (g as u32, m.offset, m.raw_len)
                );
                assert!(!std::mem::replace(&mut seen[m.index()], true));
            }
        }
        assert!(seen.iter().all(|s| *s));
        assert!(members.group(143).is_empty());
        // Bounds: a group beyond the pack, an object beyond its group, a
        // raw length above the limit.
        let short = pack_with_index(v2_index(1000, 7).2, pack_len - 1);
        assert!(short.check_group_bounds(142, 1 << 20).is_err());
        assert!(short.check_group_bounds(143, 1 << 20).is_err());
        assert!(pack.check_group_bounds(0, 69).is_err());
        let outside = GroupedEntry {
            offset: 65,
            ..objects[0]
        };
        assert!(pack.check_grouped_bounds(&outside, 1 << 20).is_err());
    }

    #[test]
    fn any_flipped_byte_or_truncation_of_a_version_2_index_is_detected() {
        let (_, _, idx, _) = v2_index(20, 3);
        for at in 0..idx.len() {
            let mut bad = idx.clone();
            bad[at] ^= 0x40;
            assert!(check_index(&bad).is_err(), "flip at {at} undetected");
        }
        for len in 0..idx.len() {
            assert!(check_index(&idx[..len]).is_err(), "truncation to {len}");
        }
    }

    #[test]
    fn an_index_with_bytes_appended_is_refused_by_its_length_before_its_checksum() {
        let (_, _, idx, _) = v2_index(20, 3);
        let len = idx.len();
        let mut long = idx.clone();
        long.resize(len + (1 << 20), 0);
        let (at, expected, found) = check_index(&long).expect_err("refused");
        assert_eq!(at, 8);
        assert!(
            expected.starts_with(&format!("an index of {len} bytes for 20 objects")),
            "{expected}"
        );
        assert_eq!(found, format!("{} bytes", len + (1 << 20)));
    }

    /// `idx` with its checksum fixed after a change, as a hostile writer
    /// would make it.
    fn rehash(mut idx: Vec<u8>) -> Vec<u8> {
        let body = idx.len() - 32;
        let sum = blake3::hash(&idx[..body]);
        idx[body..].copy_from_slice(sum.as_bytes());
        idx
    }

    #[test]
    fn hostile_counts_in_a_checksummed_version_2_index_are_errors() {
        let (_, _, idx, _) = v2_index(20, 3);
        for (at, value) in [(8, u32::MAX), (12, u32::MAX), (12, 21), (12, 0), (8, 0)] {
            let mut bad = idx.clone();
            bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
            assert!(
                check_index(&rehash(bad)).is_err(),
                "count {value} at {at} accepted"
            );
        }
        // More groups than objects, with a matching length.
        let objects = vec![GroupedEntry {
            id: BlobId::of(b"a"),
            group: 0,
            offset: 0,
            raw_len: 1,
        }];
        let groups = vec![
            GroupEntry {
                offset: 16,
                payload_len: 1,
                raw_len: 1,
            };
            2
        ];
        let idx = v2::build_index(&mut objects.clone(), &groups, &[0; 32]);
        assert!(check_index(&idx).is_err());
    }

    #[test]
    fn an_index_of_a_newer_version_is_told_from_a_damaged_one_by_its_checksum() {
        let (_, _, mut idx, _) = v2_index(10, 3);
        assert_eq!(newer_index_version(&idx), None, "a current index");
        idx[4] = 3;
        assert_eq!(newer_index_version(&idx), None, "its checksum fails");
        let body = idx.len() - 32;
        let sum = *blake3::hash(&idx[..body]).as_bytes();
        idx[body..].copy_from_slice(&sum);
        assert_eq!(newer_index_version(&idx), Some(3));
        assert!(check_index(&idx).is_err(), "never read as a known version");
        assert_eq!(newer_index_version(&idx[..40]), None, "too short");
    }

    #[test]
    fn pack_headers_of_both_versions_are_checked() {
        let v1 = pack_header();
        assert_eq!(check_pack_header(&v1).expect("v1").version, 1);
        let settings = crate::group::Compression::Max.settings();
        let v2h = pack_header_v2(settings);
        let h = check_pack_header(&v2h).expect("v2");
        assert_eq!((h.version, h.settings), (2, Some(settings)));
        for at in 0..16 {
            let mut bad = v2h;
            bad[at] ^= 0x80;
            // Byte 5, the level, is informational: any value reads.
            if at != 5 {
                assert!(check_pack_header(&bad).is_err(), "flip at {at}");
            }
        }
    }

    #[test]
    fn file_names_parse_only_well_formed_pack_names() {
        let name = "ab".repeat(32);
        assert_eq!(
            name_of_index_file(&format!("pack-{name}.idx")),
            Some(name.as_str())
        );
        assert_eq!(
            name_of_pack_file(&format!("pack-{name}.pack")),
            Some(name.as_str())
        );
        assert_eq!(name_of_index_file("pack-../x.idx"), None);
        assert_eq!(name_of_index_file(&format!("pack-{name}.pack")), None);
    }
}
