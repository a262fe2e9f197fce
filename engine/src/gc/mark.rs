//! gc's marking (format-spec.md 4.7): every blob a log references or may
//! reference, from everything in it that could still be recovered.
//!
//! A log is walked tolerantly ([`crate::log::salvage_log`]): the entries of
//! every valid record, before and after damage, are decoded and their
//! references marked; what cannot be decoded (a damaged region, a torn
//! tail, an entry that does not decode) is searched for anything shaped
//! like a blob id, packed entries decompressed as far as they go. Marking
//! an id that is not a reference only keeps a blob longer; missing one
//! loses content, so every doubt is resolved by marking.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use jpstore_blobstore::backend::Backend;
use jpstore_blobstore::BlobId;

use crate::conversation::codec::{self, LogEntry};
use crate::conversation::sections::OpenHeads;
use crate::error::Result;
use crate::event::binary::decode::AuxFields;
use crate::log::{salvage_log, walk_batch_lossy, Holds, LogOptions, Piece, Salvage};

/// Entries of one log decoded on all cores from this many on.
const PARALLEL_ENTRIES: usize = 512;

/// Entries of version 1 records are decoded (and their copies dropped) each
/// time this many of their bytes were collected: the walk's memory stays
/// bounded whatever the log's length.
const ENTRY_BYTES_PER_ROUND: usize = 64 << 20;

/// Marks into `live` every blob the file at `path`, which `holds` a log or
/// part of one (a tail copied into quarantine), may reference. Errors only
/// when the file cannot be read at all (or is of a format this build does
/// not know): then what it references is unknown; and
/// [`Error::Interrupted`](crate::error::Error::Interrupted) soon after
/// `interrupt` is set (looked at for every MiB walked and every zstd frame
/// decompressed), with what was marked so far.
pub fn mark_log(
    backend: &dyn Backend,
    path: &Path,
    holds: Holds,
    options: LogOptions,
    interrupt: &AtomicBool,
    live: &mut HashSet<BlobId>,
) -> Result<Salvage> {
    let mut marker = Marker::new(options.max_record_size, interrupt, live);
    let salvage = salvage_log(backend, path, holds, options, interrupt, &mut |piece| {
        marker.take(piece)
    })?;
    marker.finish();
    Ok(salvage)
}

/// Marks what the pieces of a tolerant walk may reference.
struct Marker<'a> {
    max: u32,
    /// Once set, nothing more is marked (the walk stops at its next look).
    interrupt: &'a AtomicBool,
    live: &'a mut HashSet<BlobId>,
    /// Entries of valid version 1 records not decoded yet, and their bytes.
    entries: Vec<Vec<u8>>,
    entry_bytes: usize,
}

impl<'a> Marker<'a> {
    fn new(max: u32, interrupt: &'a AtomicBool, live: &'a mut HashSet<BlobId>) -> Self {
        Marker {
            max,
            interrupt,
            live,
            entries: Vec::new(),
            entry_bytes: 0,
        }
    }

    /// Keeps a valid record's entry for decoding (decoded in rounds, on
    /// all cores); marks what anything else may reference at once.
    fn take(&mut self, piece: Piece<'_>) {
        if self.interrupt.load(Ordering::Relaxed) {
            return;
        }
        let (max, live, interrupt) = (self.max, &mut *self.live, self.interrupt);
        match piece {
            Piece::Entry { bytes, .. } => {
                self.entries.push(bytes.to_vec());
                self.entry_bytes += bytes.len();
                if self.entry_bytes >= ENTRY_BYTES_PER_ROUND {
                    self.finish();
                }
            }
            Piece::Sections { heads, body, .. } => {
                mark_heads(heads, body.len(), max, interrupt, live)
            }
            Piece::Damaged {
                bytes,
                own,
                starts_region,
                ..
            } => {
                // Plain entries and plain heads hold their ids as they are;
                // compressed heads and packed entries are zstd frames.
                mark_id_shapes(bytes, own, live);
                mark_in_frames(bytes, own, max, interrupt, live);
                // Packed entries must be decompressed first: the region read
                // as a record (it starts at a record boundary), as far as its
                // structure holds.
                let payload = bytes.get(crate::log::RECORD_HEADER_LEN as usize..);
                if let Some(payload) = payload.filter(|_| starts_region) {
                    walk_batch_lossy(payload, |e| {
                        if codec::is_packed(e) {
                            let plain = codec::unpack_lossy(e, max);
                            mark_id_shapes(&plain, plain.len(), live);
                        }
                    });
                }
            }
        }
    }

    /// Decodes and marks the entries collected so far.
    fn finish(&mut self) {
        if self.interrupt.load(Ordering::Relaxed) {
            self.entries.clear();
        }
        mark_entries(&self.entries, self.max, self.live);
        self.entries.clear();
        self.entry_bytes = 0;
    }
}

/// Marks the references of a valid version 2 record, from its heads
/// section alone (every blob reference is in aux): read exactly, or, where
/// the section does not read, searched like damage.
fn mark_heads(
    heads: &[u8],
    body_len: usize,
    max: u32,
    interrupt: &AtomicBool,
    live: &mut HashSet<BlobId>,
) {
    match heads_references(heads, body_len, max) {
        Ok(ids) => live.extend(ids),
        Err(_) => {
            mark_id_shapes(heads, heads.len(), live);
            mark_in_frames(heads, heads.len(), max, interrupt, live);
        }
    }
}

/// The blobs the entries of a valid version 2 record reference, read
/// exactly from its heads section (every blob reference is in aux); an
/// error when the section does not read.
pub(crate) fn heads_references(
    heads: &[u8],
    body_len: usize,
    max: u32,
) -> std::result::Result<Vec<BlobId>, String> {
    let body_len = u32::try_from(body_len).map_err(|_| "a huge body".to_string())?;
    let open = OpenHeads::open(heads, body_len, max)?;
    let mut ids = Vec::new();
    for i in 0..open.count() {
        let raw = open.raw(i)?;
        // The content references are taken as the aux is read and checked
        // (an error returns, dropping them all).
        let fields = AuxFields::read_visiting(raw.kind, raw.aux, &mut |r| ids.push(r.id))?;
        if let AuxFields::MetaPatch { base_config } = fields {
            ids.extend(base_config.map(|b| b.id));
        }
    }
    Ok(ids)
}

/// The blobs the entries of a valid version 1 batch reference, exactly
/// (packed entries unpacked); an error when an entry does not decode.
pub(crate) fn batch_references(
    entries: &[Vec<u8>],
    max: u32,
) -> std::result::Result<Vec<BlobId>, String> {
    let mut ids = Vec::new();
    let mut decoded = Vec::new();
    for bytes in entries {
        decoded.clear();
        codec::decode_all(bytes, max, &mut decoded)?;
        for entry in decoded.drain(..) {
            match entry {
                LogEntry::Event(entry) => entry.for_each_content(&mut |r| ids.push(r.id)),
                LogEntry::Meta(m) => ids.extend(m.base_config.map(|b| b.id)),
            }
        }
    }
    Ok(ids)
}

/// The first bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Marks what the zstd frames starting in the first `own` of damaged
/// `bytes` still give (each decompressed as far as it goes, at most `max`
/// bytes, and only that frame: the frames after it have their own turn):
/// the compressed heads of version 2 records and packed entries of version
/// 1 ones. Stops once `interrupt` is set.
fn mark_in_frames(
    bytes: &[u8],
    own: usize,
    max: u32,
    interrupt: &AtomicBool,
    live: &mut HashSet<BlobId>,
) {
    // A frame starting in the last bytes of `own` runs on past them.
    let starts = &bytes[..bytes.len().min(own.saturating_add(ZSTD_MAGIC.len() - 1))];
    for start in memchr::memmem::find_iter(starts, &ZSTD_MAGIC) {
        if interrupt.load(Ordering::Relaxed) {
            return;
        }
        let plain = codec::decompress_lossy(&bytes[start..], max);
        mark_id_shapes(&plain, plain.len(), live);
    }
}

/// Marks the references of entries of valid records: decoded exactly, or,
/// where an entry does not decode, searched like damage.
fn mark_entries(entries: &[Vec<u8>], max: u32, live: &mut HashSet<BlobId>) {
    let refs = |bytes: &Vec<u8>| {
        let mut out = Vec::new();
        let mut decoded = Vec::new();
        if codec::decode_all(bytes, max, &mut decoded).is_ok() {
            for entry in decoded {
                match entry {
                    LogEntry::Event(entry) => entry.for_each_content(&mut |r| out.push(r.id)),
                    LogEntry::Meta(m) => out.extend(m.base_config.map(|b| b.id)),
                }
            }
        } else {
            let mut found = HashSet::new();
            mark_id_shapes(bytes, bytes.len(), &mut found);
            let plain = codec::unpack_lossy(bytes, max);
            mark_id_shapes(&plain, plain.len(), &mut found);
            out.extend(found);
        }
        out
    };
    if entries.len() >= PARALLEL_ENTRIES {
        for ids in crate::parallel::map_ordered(entries, refs) {
            live.extend(ids);
        }
    } else {
        for e in entries {
            live.extend(refs(e));
        }
    }
}

/// MessagePack of a 32-byte binary (`bin 8`, length 32): how a `BlobId`
/// is written in an entry.
const BIN32: [u8; 2] = [0xc4, 0x20];
/// MessagePack of a 64-byte string (`str 8`, length 64): a `BlobId` as hex
/// digits, as a human-readable serializer writes it.
const STR64: [u8; 2] = [0xd9, 0x40];

/// Marks everything shaped like a blob id in MessagePack that starts in
/// the first `own` of `bytes` (and may run on past them).
fn mark_id_shapes(bytes: &[u8], own: usize, live: &mut HashSet<BlobId>) {
    let starts = &bytes[..own.min(bytes.len())];
    for i in memchr::memchr2_iter(BIN32[0], STR64[0], starts) {
        let tag = [bytes[i], bytes.get(i + 1).copied().unwrap_or(0)];
        if tag == BIN32 {
            if let Some(id) = bytes.get(i + 2..i + 34) {
                let mut raw = [0u8; 32];
                raw.copy_from_slice(id);
                live.insert(BlobId::from_bytes(raw));
            }
        } else if tag == STR64 {
            if let Some(id) = bytes
                .get(i + 2..i + 66)
                .and_then(|d| std::str::from_utf8(d).ok())
                .and_then(|d| BlobId::parse(d).ok())
            {
                live.insert(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::BlobRef;

    #[test]
    fn ids_are_found_in_entries_that_do_not_decode() {
        let id = BlobId::from_bytes([7; 32]);
        let r = rmp_serde::to_vec_named(&BlobRef { id, size: 1 }).expect("encode");
        let mut bytes = vec![codec::KIND_EVENT, 0xc1];
        bytes.extend_from_slice(&r);
        assert!(codec::decode(&bytes).is_err());
        let mut live = HashSet::new();
        mark_entries(&[bytes], u32::MAX, &mut live);
        assert_eq!(live, HashSet::from([id]));
    }

    #[test]
    fn ids_are_found_in_what_a_damaged_packed_entry_still_gives() {
        let id = BlobId::from_bytes([9; 32]);
        let r = rmp_serde::to_vec_named(&BlobRef { id, size: 1 }).expect("encode");
        let mut plain = vec![codec::KIND_EVENT];
        plain.extend_from_slice(&r);
        let mut entries = vec![plain];
        // Several zstd blocks (of 128 KiB each): the damage is in the last.
        entries.extend(
            (0..4000u32)
                .map(|i| format!("filler {i} {}", "x".repeat(i as usize % 97)).into_bytes()),
        );
        let mut packed = codec::pack(&entries).expect("packed");
        // Damage near the end of the frame: what comes before still
        // decompresses.
        let at = packed.len() - 3;
        packed[at] ^= 0xff;
        let mut live = HashSet::new();
        mark_entries(&[packed], u32::MAX, &mut live);
        assert!(live.contains(&id), "{live:?}");
    }
}
