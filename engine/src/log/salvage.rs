//! A tolerant walk over the bytes of a log, for callers that must see
//! everything that could still be recovered (gc's marking, format-spec.md
//! 4.7), not only what a reader may use.
//!
//! Unlike [`scan`](super::scan), it does not stop at damage: a damaged file
//! header is skipped (the records after it are walked as usual, in the
//! framings a damaged header leaves possible), and after a bad record the
//! walk resynchronizes on the next offset where a whole valid record starts
//! (a header whose checksum matches, a content within the limit whose
//! checksums match and whose structure is sound: the same test as the
//! search after a bad header in section 3). The bytes in between are handed
//! over as a damaged region, for best-effort use.
//!
//! What it hands over must never be shown as the conversation's content: a
//! record after a lost one may depend on it. It is only ever a reason to
//! keep something.

use std::path::Path;

use jpstore_blobstore::backend::Backend;

use super::record::{
    check_file_header, decode_record_header, walk_batch, Framing, HeaderProblem, FILE_HEADER_LEN,
};
use super::scan::valid_record_len;
use super::LogOptions;
use crate::error::{Error, Result};

/// One piece of a tolerant walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// An entry of a whole, valid version 1 record (both checksums match
    /// and the payload is a batch), at `offset` (the record's).
    Entry {
        /// Offset of the record holding it.
        offset: u64,
        /// The entry's bytes.
        bytes: &'a [u8],
    },
    /// The sections of a whole, valid version 2 record (every checksum
    /// matches and the heads section header is consistent), at `offset`.
    Sections {
        /// Offset of the record.
        offset: u64,
        /// The heads section.
        heads: &'a [u8],
        /// The body section, as stored.
        body: &'a [u8],
    },
    /// Bytes that are not a valid record (damage, or a torn tail), from
    /// `offset` up to the next valid record or the end of the file.
    Damaged {
        /// Offset of the first byte.
        offset: u64,
        /// The bytes.
        bytes: &'a [u8],
    },
}

/// What a tolerant walk found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Salvage {
    /// Valid records walked (before and after damage).
    pub records: usize,
    /// Damaged regions handed over (a torn tail counts as one).
    pub damaged: usize,
    /// Whether the file header was damaged (its records were walked anyway).
    pub bad_header: bool,
}

/// Walks the log at `path` tolerantly (see the module documentation),
/// handing every piece to `each`.
///
/// Errors: the file cannot be opened or read (missing, no permission, not a
/// regular file, an I/O error), or its header is valid but names a format
/// this build does not know ([`Error::Unsupported`]): its records cannot be
/// interpreted at all.
pub fn salvage_log(
    backend: &dyn Backend,
    path: &Path,
    options: LogOptions,
    each: &mut dyn FnMut(Piece<'_>),
) -> Result<Salvage> {
    let bytes = read_whole(backend, path)?;
    let start = FILE_HEADER_LEN.min(bytes.len() as u64);
    let out = match check_file_header(&bytes) {
        Ok(format) => salvage_bytes(&bytes, start, format.framing, options, each),
        // Whatever the version was, its records are walked in both
        // framings: marking more only keeps blobs longer.
        Err(HeaderProblem::Damaged(..)) => {
            let mut out = salvage_bytes(&bytes, start, Framing::V1, options, each);
            let v2 = salvage_bytes(&bytes, start, Framing::V2, options, each);
            out.records += v2.records;
            out.damaged += v2.damaged;
            out.bad_header = true;
            out
        }
        Err(HeaderProblem::Unsupported { version, flags }) => {
            return Err(Error::Unsupported {
                path: backend.display(path),
                version,
                flags,
                supported: super::FORMAT_VERSION,
            })
        }
    };
    Ok(out)
}

/// The whole file at `path`, read through the storage (which refuses
/// anything but a regular file).
pub fn read_whole(backend: &dyn Backend, path: &Path) -> Result<Vec<u8>> {
    let io = |op, source| Error::Io {
        op,
        path: backend.display(path),
        source,
    };
    let file = backend.open(path).map_err(|e| io("open", e))?;
    let len = file.len().map_err(|e| io("stat", e))?;
    super::reader::read_up_to(&*file, len).map_err(|e| io("read", e))
}

/// Walks `bytes` (a log, or a copy of part of one) from `start` tolerantly,
/// as records of `framing`, handing every piece to `each`. Offsets are
/// positions in `bytes`.
pub fn salvage_bytes(
    bytes: &[u8],
    start: u64,
    framing: Framing,
    options: LogOptions,
    each: &mut dyn FnMut(Piece<'_>),
) -> Salvage {
    let mut out = Salvage::default();
    let mut off = usize::try_from(start)
        .unwrap_or(bytes.len())
        .min(bytes.len());
    let mut damaged_from: Option<usize> = None;
    let mut flush = |from: &mut Option<usize>, to: usize, out: &mut Salvage| {
        if let Some(f) = from.take() {
            out.damaged += 1;
            each(Piece::Damaged {
                offset: f as u64,
                bytes: &bytes[f..to],
            });
        }
    };
    let mut records = Vec::new();
    while off < bytes.len() {
        match valid_record_len(framing, &bytes[off..], options.max_record_size) {
            Some(len) => {
                flush(&mut damaged_from, off, &mut out);
                records.push((off, len));
                out.records += 1;
                off += len;
            }
            None => {
                // The next candidate is the next byte: records are not
                // aligned, and a record's own header is its only mark.
                damaged_from.get_or_insert(off);
                off += 1;
            }
        }
    }
    flush(&mut damaged_from, bytes.len(), &mut out);
    let header_len = framing.record_header_len() as usize;
    for (off, len) in records {
        let content = &bytes[off + header_len..off + len];
        match decode_record_header(framing, &bytes[off..]) {
            Some(super::RecordHeader::V2 { heads_len, .. }) => {
                let (heads, body) = content.split_at((heads_len as usize).min(content.len()));
                each(Piece::Sections {
                    offset: off as u64,
                    heads,
                    body,
                });
            }
            // Checked to be a batch by `valid_record_len`.
            _ => {
                let _ = walk_batch(content, |e| {
                    each(Piece::Entry {
                        offset: off as u64,
                        bytes: e,
                    })
                });
            }
        }
    }
    out
}

/// Hands each entry of what may be a batch to `each`, as far as its
/// structure holds: an entry claiming more bytes than remain is handed over
/// cut short, and the walk stops there. For damaged records, whose entries
/// are used best-effort.
pub fn walk_batch_lossy<'a>(payload: &'a [u8], mut each: impl FnMut(&'a [u8])) {
    let Some(mut rest) = payload.get(4..) else {
        return;
    };
    while rest.len() >= 4 {
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let after = &rest[4..];
        let take = len.min(after.len());
        each(&after[..take]);
        rest = &after[take..];
        if take < len {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record::{encode_file_header, encode_record, LogFormat};

    fn log_of(batches: &[&[&[u8]]]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = encode_file_header(LogFormat::v1(0)).to_vec();
        let mut offsets = Vec::new();
        for b in batches {
            offsets.push(bytes.len());
            bytes.extend_from_slice(&encode_record(b));
        }
        (bytes, offsets)
    }

    fn pieces(bytes: &[u8], start: u64) -> (Vec<Vec<u8>>, Vec<u64>, Salvage) {
        let (mut entries, mut damaged) = (Vec::new(), Vec::new());
        let s = salvage_bytes(
            bytes,
            start,
            Framing::V1,
            LogOptions::default(),
            &mut |p| match p {
                Piece::Entry { bytes, .. } => entries.push(bytes.to_vec()),
                Piece::Sections { .. } => panic!("a version 2 record in a version 1 log"),
                Piece::Damaged { offset, .. } => damaged.push(offset),
            },
        );
        (entries, damaged, s)
    }

    #[test]
    fn every_valid_record_around_damage_is_walked() {
        let (mut bytes, offsets) = log_of(&[&[b"a"], &[b"b", b"c"], &[b"d"], &[b"e"]]);
        // A payload bit of record 1, and the header of record 2.
        bytes[offsets[1] + 12 + 9] ^= 1;
        bytes[offsets[2] + 2] ^= 4;
        let (entries, damaged, s) = pieces(&bytes, 16);
        assert_eq!(entries, vec![b"a".to_vec(), b"e".to_vec()]);
        assert_eq!(
            damaged,
            vec![offsets[1] as u64],
            "one region up to record 3"
        );
        assert_eq!(s.records, 2);
    }

    #[test]
    fn a_damaged_file_header_does_not_stop_the_walk() {
        let (mut bytes, _) = log_of(&[&[b"a"], &[b"b"]]);
        bytes[9] ^= 1;
        let (entries, damaged, _) = pieces(&bytes, 16);
        assert_eq!(entries, vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(damaged.is_empty());
        // A tail copy has no file header: walked from 0.
        let (entries, _, _) = pieces(&bytes[16..], 0);
        assert_eq!(entries, vec![b"a".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn a_torn_tail_is_one_damaged_region() {
        let (bytes, offsets) = log_of(&[&[b"a"], &[b"bbbbbbbb"]]);
        let cut = &bytes[..bytes.len() - 3];
        let (entries, damaged, _) = pieces(cut, 16);
        assert_eq!(entries, vec![b"a".to_vec()]);
        assert_eq!(damaged, vec![offsets[1] as u64]);
    }

    #[test]
    fn lossy_batches_give_what_their_structure_holds() {
        let mut got = Vec::new();
        // count 3; "ab"; an entry claiming 9 bytes where 2 remain.
        walk_batch_lossy(
            &[3, 0, 0, 0, 2, 0, 0, 0, b'a', b'b', 9, 0, 0, 0, b'c', b'd'],
            |e| got.push(e.to_vec()),
        );
        assert_eq!(got, vec![b"ab".to_vec(), b"cd".to_vec()]);
    }
}
