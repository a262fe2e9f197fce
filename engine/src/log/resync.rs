//! The search for the next whole record in bytes that are not one: after a
//! bad record header (format-spec.md 3, "Recovery and classification"), and
//! through the damaged regions of gc's tolerant walk (4.7), in time linear
//! in the bytes searched.
//!
//! Every offset may start a record (records are not aligned, and a record's
//! own header is its only mark), so every offset is a candidate: its header
//! checksum is computed (12 or 20 bytes). A header whose checksum matches,
//! within the limit and the bytes at hand, claims a content whose checksums
//! must be checked too, and a crafted file can hold a valid header at every
//! few bytes, each claiming to run to the end: hashing each claimed content
//! would take time quadratic in the bytes. Instead, the CRC-32 of any range
//! `[a, b)` follows from two running checksums, of `[base, a)` and of
//! `[base, b)`, as zlib's `crc32_combine` joins two checksums: the running
//! checksum is kept every [`STRIDE`] bytes (computed once over the bytes
//! searched, as far as candidates need), and each candidate costs at most
//! two extensions of fewer than [`STRIDE`] bytes and a combination of
//! checksums (a few dozen multiplications of 32-bit polynomials), however
//! long the record it claims.
//!
//! What the search finds is a *whole* record: a header whose checksum
//! matches, a length within the limit, and content in the bytes whose
//! checksums match (both sections of a version 2 record). Whether that
//! content also has its framing's shape (a batch; a consistent heads
//! section header) is told apart ([`Found::valid`]) but does not decide:
//! a record whose checksums match is one a writer wrote whole, which is
//! what tells damage from a torn tail, and a walk that resynchronizes
//! passes over one that is not of its framing's shape as damage, whole,
//! so that its structure is walked once.

use std::cell::Cell;

use super::record::{check_content, check_min_len, decode_record_header, Framing, RecordHeader};

/// Bytes between two running checksums kept by a search: a candidate costs
/// at most twice this many bytes hashed, and the checksums kept take 4
/// bytes per `STRIDE` bytes searched.
const STRIDE: usize = 128;

/// The CRC-32 of bytes `T`, from the CRC-32 `whole` of `S` followed by `T`,
/// the CRC-32 `before` of `S`, and the length of `T`: `crc(S‖T) =
/// crc(S)·x^(8|T|) + crc(T)` (zlib's `crc32_combine`), solved for `crc(T)`.
fn crc_of_rest(whole: u32, before: u32, len: u64) -> u32 {
    // `before` followed by `len` bytes whose CRC-32 is 0: `crc(S)·x^(8|T|)`.
    let mut shifted = crc32fast::Hasher::new_with_initial(before);
    shifted.combine(&crc32fast::Hasher::new_with_initial_len(0, len));
    whole ^ shifted.finalize()
}

/// Work done by searches, counted for tests and benchmarks: the search
/// must stay linear in the bytes it searches, whatever they hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchWork {
    /// Offsets looked at as the start of a record.
    pub offsets: u64,
    /// Of those, headers whose checksum matched, within the limit and the
    /// bytes: their contents' checksums were computed.
    pub candidates: u64,
    /// Bytes hashed for all of it (headers, running checksums, their
    /// extensions, and the structure of whole records walked).
    pub bytes_hashed: u64,
}

thread_local! {
    static WORK: Cell<SearchWork> = const { Cell::new(SearchWork {
        offsets: 0,
        candidates: 0,
        bytes_hashed: 0,
    }) };
}

/// The work of every search this thread ran so far (the searches of a
/// scan, a reader's walk, fsck's checks and gc's marking on this thread).
pub fn search_work() -> SearchWork {
    WORK.with(Cell::get)
}

fn count(offsets: u64, candidates: u64, bytes_hashed: u64) {
    WORK.with(|w| {
        let mut c = w.get();
        c.offsets += offsets;
        c.candidates += candidates;
        c.bytes_hashed += bytes_hashed;
        w.set(c);
    });
}

/// A whole record found ([`Resync::at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// Its length, header included.
    pub(crate) len: usize,
    /// Whether its content is of its framing's shape (a batch; a heads
    /// section header consistent with the sections): a valid record.
    pub(crate) valid: bool,
}

/// A search for whole records, over the bytes of one file, offsets looked
/// at in increasing order. It keeps the running checksums it computed;
/// they are dropped when a later look no longer has the bytes they start
/// from (a window of the file that moved on).
#[derive(Debug)]
pub(crate) struct Resync {
    framing: Framing,
    max: u32,
    /// Offset in the file from which the running checksums are computed.
    base: u64,
    /// `marks[i]`: the CRC-32 of the file's bytes `[base, base + i·STRIDE)`.
    marks: Vec<u32>,
}

impl Resync {
    /// A search for records of `framing` whose content is at most `max`
    /// bytes.
    pub(crate) fn new(framing: Framing, max: u32) -> Self {
        Resync {
            framing,
            max,
            base: 0,
            marks: Vec::new(),
        }
    }

    /// Whether a whole record starts at offset `at` of the file, of which
    /// `bytes` holds `[from, from + bytes.len())` (with `from <= at`): the
    /// record must lie in `bytes`.
    pub(crate) fn at(&mut self, bytes: &[u8], from: u64, at: u64) -> Option<Found> {
        let rel = usize::try_from(at.checked_sub(from)?).ok()?;
        let framing = self.framing;
        let header_len = framing.record_header_len() as usize;
        let here = bytes.get(rel..)?;
        count(1, 0, header_len.min(here.len()) as u64);
        let header = decode_record_header(framing, here)?;
        let content_len = usize::try_from(header.content_len()).ok()?;
        if header.content_len() > u64::from(self.max) || check_min_len(&header).is_err() {
            return None;
        }
        let start = rel + header_len;
        let end = start.checked_add(content_len)?;
        if end > bytes.len() {
            return None;
        }
        count(0, 1, 0);
        let whole = match header {
            RecordHeader::V1 { payload_crc, .. } => {
                self.range_crc(bytes, from, start, end) == payload_crc
            }
            RecordHeader::V2 {
                heads_len,
                heads_crc,
                body_crc,
                ..
            } => {
                let split = start + heads_len as usize;
                self.range_crc(bytes, from, start, split) == heads_crc
                    && self.range_crc(bytes, from, split, end) == body_crc
            }
        };
        if !whole {
            return None;
        }
        // Walked once per whole record: a walk passes over a whole record,
        // valid or not, so whole records found do not overlap.
        count(0, 0, content_len as u64);
        let valid = check_content(&header, &bytes[start..end], self.max, false).is_ok();
        Some(Found {
            len: header_len + content_len,
            valid,
        })
    }

    /// The CRC-32 of `bytes[a..b]`, where `bytes` holds the file from
    /// offset `from` on.
    fn range_crc(&mut self, bytes: &[u8], from: u64, a: usize, b: usize) -> u32 {
        if a == b {
            return 0;
        }
        let (abs_a, abs_b) = (from + a as u64, from + b as u64);
        // The running checksums must start at or before `a`, and `bytes`
        // must hold the bytes from the one they are extended from (the
        // last one kept, or the last one before `a`).
        let usable = !self.marks.is_empty() && self.base <= abs_a && {
            let before_a = ((abs_a - self.base) / STRIDE as u64) as usize;
            let first_used = before_a.min(self.marks.len() - 1);
            self.base + (first_used * STRIDE) as u64 >= from
        };
        if !usable {
            self.base = abs_a;
            self.marks.clear();
            self.marks.push(0);
        }
        let before = self.running(bytes, from, abs_a);
        let whole = self.running(bytes, from, abs_b);
        crc_of_rest(whole, before, abs_b - abs_a)
    }

    /// The CRC-32 of the file's bytes `[base, to)`, from the running
    /// checksums (extended as far as needed) and the bytes after the last
    /// one before `to`.
    fn running(&mut self, bytes: &[u8], from: u64, to: u64) -> u32 {
        let i = ((to - self.base) / STRIDE as u64) as usize;
        let mut hashed = 0u64;
        while self.marks.len() <= i {
            let at = self.base + (self.marks.len() as u64 - 1) * STRIDE as u64;
            let s = (at - from) as usize;
            let mut h = crc32fast::Hasher::new_with_initial(self.marks[self.marks.len() - 1]);
            h.update(&bytes[s..s + STRIDE]);
            self.marks.push(h.finalize());
            hashed += STRIDE as u64;
        }
        let at = self.base + i as u64 * STRIDE as u64;
        let s = (at - from) as usize;
        let e = (to - from) as usize;
        let mut h = crc32fast::Hasher::new_with_initial(self.marks[i]);
        h.update(&bytes[s..e]);
        hashed += (e - s) as u64;
        count(0, 0, hashed);
        h.finalize()
    }
}

/// Whether the bytes at a record boundary start a whole record of
/// `framing` (the record lying in `bytes`), checked directly: each byte of
/// its content hashed once. What [`Resync::at`] finds, for the one offset
/// a walk reaches at a record boundary.
pub(crate) fn whole_record(framing: Framing, bytes: &[u8], max: u32) -> Option<Found> {
    let header = decode_record_header(framing, bytes)?;
    if header.content_len() > u64::from(max) || check_min_len(&header).is_err() {
        return None;
    }
    let start = framing.record_header_len() as usize;
    let end = start.checked_add(usize::try_from(header.content_len()).ok()?)?;
    let content = bytes.get(start..end)?;
    match check_content(&header, content, max, true) {
        Ok(_) => Some(Found {
            len: end,
            valid: true,
        }),
        Err(super::record::ContentFault::Malformed(_)) => Some(Found {
            len: end,
            valid: false,
        }),
        Err(super::record::ContentFault::Checksum { .. }) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn combining_matches_hashing_the_joined_bytes() {
        let a = b"the first part, ".as_slice();
        let b = b"and the second".as_slice();
        let joined = [a, b].concat();
        let (ca, cb, cj) = (
            crc32fast::hash(a),
            crc32fast::hash(b),
            crc32fast::hash(&joined),
        );
        assert_eq!(crc_of_rest(cj, ca, b.len() as u64), cb);
        assert_eq!(crc_of_rest(cj, 0, joined.len() as u64), cj);
        assert_eq!(crc_of_rest(cj, cj, 0), 0);
    }

    proptest! {
        /// Ranges looked at in increasing order of their start, each in a
        /// window of the bytes that starts at or before it and moves on
        /// (as gc's walk reads a file).
        #[test]
        fn any_range_checksum_is_the_checksum_of_the_range(
            bytes in proptest::collection::vec(any::<u8>(), 0..3000),
            ranges in proptest::collection::vec(
                (any::<prop::sample::Index>(), 0usize..1500, 0usize..300),
                1..30,
            ),
        ) {
            let mut r = Resync::new(Framing::V1, u32::MAX);
            let mut ranges: Vec<(usize, usize, usize)> = ranges
                .iter()
                .map(|(a, len, back)| {
                    let a = a.index(bytes.len() + 1);
                    (a, (a + len).min(bytes.len()), (*back).min(a))
                })
                .collect();
            ranges.sort();
            let mut from = 0;
            for (a, b, back) in ranges {
                // The window never moves back.
                from = from.max(a - back);
                let got = r.range_crc(&bytes[from..], from as u64, a - from, b - from);
                prop_assert_eq!(got, crc32fast::hash(&bytes[a..b]));
            }
        }
    }
}
