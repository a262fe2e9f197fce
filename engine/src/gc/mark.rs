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

use jpstore_blobstore::backend::Backend;
use jpstore_blobstore::BlobId;

use crate::conversation::codec::{self, LogEntry};
use crate::conversation::sections::OpenHeads;
use crate::error::Result;
use crate::event::binary::decode::AuxFields;
use crate::log::{
    salvage_bytes, salvage_log, walk_batch_lossy, Framing, LogOptions, Piece, Salvage,
};

/// Entries of one log decoded on all cores from this many on.
const PARALLEL_ENTRIES: usize = 512;

/// Marks into `live` every blob the log at `path` may reference. Errors
/// only when the file cannot be read at all (or is of a format this build
/// does not know): then what it references is unknown.
pub(crate) fn mark_log(
    backend: &dyn Backend,
    path: &Path,
    options: LogOptions,
    live: &mut HashSet<BlobId>,
) -> Result<Salvage> {
    let mut entries = Vec::new();
    let salvage = salvage_log(backend, path, options, &mut |piece| {
        collect(piece, options.max_record_size, &mut entries, live)
    })?;
    mark_entries(&entries, options.max_record_size, live);
    Ok(salvage)
}

/// Marks into `live` every blob the bytes of part of a log (a tail copied
/// into quarantine, from a record boundary and without a file header) may
/// reference. Nothing says which framing the log had: the bytes are walked
/// as records of both.
pub(crate) fn mark_bytes(bytes: &[u8], options: LogOptions, live: &mut HashSet<BlobId>) {
    let mut entries = Vec::new();
    for framing in [Framing::V1, Framing::V2] {
        salvage_bytes(bytes, 0, framing, options, &mut |piece| {
            collect(piece, options.max_record_size, &mut entries, live)
        });
    }
    mark_entries(&entries, options.max_record_size, live);
}

/// Keeps a valid record's entry for decoding; marks what a damaged region
/// may reference at once.
fn collect(piece: Piece<'_>, max: u32, entries: &mut Vec<Vec<u8>>, live: &mut HashSet<BlobId>) {
    match piece {
        Piece::Entry { bytes, .. } => entries.push(bytes.to_vec()),
        Piece::Sections { heads, body, .. } => mark_heads(heads, body.len(), max, live),
        Piece::Damaged { bytes, .. } => {
            // Plain entries and plain heads hold their ids as they are;
            // compressed heads and packed entries are zstd frames.
            mark_id_shapes(bytes, live);
            mark_in_frames(bytes, max, live);
            // Packed entries must be decompressed first: the region read
            // as a record (it starts at a record boundary), as far as its
            // structure holds.
            if let Some(payload) = bytes.get(crate::log::RECORD_HEADER_LEN as usize..) {
                walk_batch_lossy(payload, |e| {
                    if codec::is_packed(e) {
                        mark_id_shapes(&codec::unpack_lossy(e, max), live);
                    }
                });
            }
        }
    }
}

/// Marks the references of a valid version 2 record, from its heads
/// section alone (every blob reference is in aux): read exactly, or, where
/// the section does not read, searched like damage.
fn mark_heads(heads: &[u8], body_len: usize, max: u32, live: &mut HashSet<BlobId>) {
    match heads_references(heads, body_len, max) {
        Ok(ids) => live.extend(ids),
        Err(_) => {
            mark_id_shapes(heads, live);
            mark_in_frames(heads, max, live);
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

/// Marks what the zstd frames found in damaged bytes still give (each
/// decompressed as far as it goes, at most `max` bytes): the compressed
/// heads of version 2 records and packed entries of version 1 ones.
fn mark_in_frames(bytes: &[u8], max: u32, live: &mut HashSet<BlobId>) {
    let mut at = 0;
    while let Some(p) = bytes[at..]
        .windows(ZSTD_MAGIC.len())
        .position(|w| w == ZSTD_MAGIC)
    {
        let start = at + p;
        let mut entry = vec![codec::KIND_PACKED];
        entry.extend_from_slice(&bytes[start..]);
        mark_id_shapes(&codec::unpack_lossy(&entry, max), live);
        at = start + 1;
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
            mark_id_shapes(bytes, &mut found);
            mark_id_shapes(&codec::unpack_lossy(bytes, max), &mut found);
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

/// Marks everything in `bytes` shaped like a blob id in MessagePack.
fn mark_id_shapes(bytes: &[u8], live: &mut HashSet<BlobId>) {
    for i in 0..bytes.len().saturating_sub(1) {
        let tag = [bytes[i], bytes[i + 1]];
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
