//! Packs: many objects in one immutable file, found through a sorted index.
//!
//! A pack is written once per batch (one fsync for the pack, one for the index)
//! and never modified after it is published. Its index is memory-mapped; a
//! lookup is a fanout-table read plus a binary search over at most the ids that
//! share the first byte. Layouts are in `format-spec.md` ("Packs", "Pack
//! indexes") and repeated in the constants below.

use std::path::{Path, PathBuf};

use crate::backend::{read_exact_at, Mapping, ObjectReader};
use crate::id::BlobId;
use crate::object::HEADER_LEN;

/// Magic of a pack file.
pub const PACK_MAGIC: [u8; 4] = *b"jpsP";
/// Magic of a pack index file.
pub const INDEX_MAGIC: [u8; 4] = *b"jpsI";
/// Format version of packs and indexes.
pub const PACK_VERSION: u8 = 1;
/// Length of the pack header.
pub const PACK_HEADER_LEN: u64 = 16;
/// Length of the pack trailer (BLAKE3 of everything before it).
pub const PACK_TRAILER_LEN: u64 = 32;
/// Length of the index header.
const INDEX_HEADER_LEN: usize = 16;
/// Length of the fanout table.
const FANOUT_LEN: usize = 256 * 4;
/// Length of one index entry (offset, stored length, raw length).
const ENTRY_LEN: usize = 24;
/// Length of the index trailer (pack checksum, index checksum).
const INDEX_TRAILER_LEN: usize = 64;

/// The pack header.
pub fn pack_header() -> [u8; PACK_HEADER_LEN as usize] {
    let mut h = [0u8; PACK_HEADER_LEN as usize];
    h[..4].copy_from_slice(&PACK_MAGIC);
    h[4] = PACK_VERSION;
    h
}

/// Checks a pack header; returns what is wrong.
pub fn check_pack_header(h: &[u8]) -> Result<(), (u64, String, String)> {
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
    if h[4] != PACK_VERSION {
        return Err((
            4,
            format!("pack format version {PACK_VERSION}"),
            format!("version {}", h[4]),
        ));
    }
    if h[5..16].iter().any(|b| *b != 0) {
        return Err((
            5,
            "reserved bytes to be zero".into(),
            format!("{:02x?}", &h[5..16]),
        ));
    }
    Ok(())
}

/// Where one object lives inside a pack.
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

/// Builds the bytes of an index for `entries` of a pack whose trailer is
/// `pack_checksum`. Sorts the entries by id; duplicates must have been removed.
pub fn build_index(entries: &mut [PackEntry], pack_checksum: &[u8; 32]) -> Vec<u8> {
    entries.sort_by_key(|e| e.id);
    let n = entries.len();
    let mut out = Vec::with_capacity(
        INDEX_HEADER_LEN + FANOUT_LEN + n * (32 + ENTRY_LEN) + INDEX_TRAILER_LEN,
    );
    out.extend_from_slice(&INDEX_MAGIC);
    out.push(PACK_VERSION);
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
    out
}

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
    count: usize,
}

/// What is wrong with an index: offset inside the index, expected, found.
pub type IndexError = (u64, String, String);

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

/// Checks an index's structure and checksum; returns the object count.
pub fn check_index(index: &[u8]) -> Result<usize, IndexError> {
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
    if index[4] != PACK_VERSION {
        return Err((
            4,
            format!("index format version {PACK_VERSION}"),
            format!("version {}", index[4]),
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
    let count = u32_at(index, 8) as usize;
    let expected_len = fixed + count * (32 + ENTRY_LEN);
    if index.len() != expected_len {
        return Err((
            8,
            format!("an index of {expected_len} bytes for {count} objects"),
            format!("{} bytes", index.len()),
        ));
    }
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
    Ok(count)
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
        let count = check_index(&index)?;
        Ok(Self {
            name,
            pack_path,
            index_path,
            pack_len,
            index,
            count,
        })
    }

    /// Number of objects in the pack.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the pack holds no objects.
    pub fn is_empty(&self) -> bool {
        self.count == 0
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

    /// The `i`-th entry in id order.
    pub fn entry(&self, i: usize) -> PackEntry {
        let mut id = [0u8; 32];
        id.copy_from_slice(self.id_at(i));
        let at = INDEX_HEADER_LEN + FANOUT_LEN + self.count * 32 + i * ENTRY_LEN;
        PackEntry {
            id: BlobId::from_bytes(id),
            offset: u64_at(&self.index, at),
            stored_len: u64_at(&self.index, at + 8),
            raw_len: u64_at(&self.index, at + 16),
        }
    }

    /// Byte offset of the `i`-th entry inside the index file (for messages).
    pub fn entry_offset_in_index(&self, i: usize) -> u64 {
        (INDEX_HEADER_LEN + FANOUT_LEN + self.count * 32 + i * ENTRY_LEN) as u64
    }

    /// Finds `id`: a fanout read and a binary search.
    pub fn find(&self, id: &BlobId) -> Option<PackEntry> {
        let first = id.as_bytes()[0] as usize;
        let lo = if first == 0 {
            0
        } else {
            u32_at(&self.index, INDEX_HEADER_LEN + (first - 1) * 4) as usize
        };
        let hi = u32_at(&self.index, INDEX_HEADER_LEN + first * 4) as usize;
        let (mut lo, mut hi) = (lo.min(self.count), hi.min(self.count));
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
                std::cmp::Ordering::Equal => return Some(self.entry(mid)),
            }
        }
        None
    }

    /// Checks that an entry lies inside the object area of the pack.
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

    /// Reads the stored bytes (header and payload) of an entry from `file`,
    /// this pack's file, and checks them with [`check_stored_entry`]. `max`
    /// bounds the allocation.
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

    /// Iterates all entries in id order.
    pub fn entries(&self) -> impl Iterator<Item = PackEntry> + '_ {
        (0..self.count).map(|i| self.entry(i))
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

/// Why reading an entry's stored bytes failed.
#[derive(Debug)]
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
        assert_eq!(check_index(&idx).expect("valid"), 1000);
        let pack = pack_with_index(idx, 16 + 20 * 1000 + 32);
        assert_eq!(pack.len(), 1000);
        for e in &entries {
            assert_eq!(pack.find(&e.id), Some(*e));
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
            assert_eq!(pack.find(&e.id), Some(*e));
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
