//! A tolerant walk over the bytes of a log, for callers that must see
//! everything that could still be recovered (gc's marking, format-spec.md
//! 4.7), not only what a reader may use.
//!
//! Unlike [`scan`](super::scan), it does not stop at damage: a damaged file
//! header is skipped (the records after it are walked as usual, in the
//! framings a damaged header leaves possible), and after a bad record the
//! walk resynchronizes on the next offset where a whole valid record starts
//! (a header whose checksum matches, a content within the limit whose
//! checksums match and whose structure is sound), found by the search after
//! a bad header of section 3 ([`resync`](super::resync)), in time linear in
//! the bytes however many valid headers they hold; a whole record that is
//! not of its framing's shape is passed over whole. The bytes in between
//! are handed over as a damaged region, for best-effort use.
//!
//! The file is read in windows, never whole: a window holds [`STEP`] bytes
//! of walk and, after them, the longest record the limit allows, so that a
//! record starting anywhere in the step is seen whole. Memory stays within
//! about twice the record limit whatever the file's length (a log with
//! gigabytes of damage after its records, a sparse tail). A damaged region
//! longer than a step is handed over in pieces, each with the bytes after it
//! in the window, so that what starts in a piece and runs on (an id, a zstd
//! frame, an entry) is seen whole too.
//!
//! What it hands over must never be shown as the conversation's content: a
//! record after a lost one may depend on it. It is only ever a reason to
//! keep something.

use std::io;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use jpstore_blobstore::backend::{read_at_most, Backend, ObjectReader};

use super::record::{
    check_file_header, decode_record_header, walk_batch, Framing, HeaderProblem, FILE_HEADER_LEN,
};
use super::resync::{whole_record, Found, Resync};
use super::LogOptions;
use crate::error::{Error, Result};

/// Bytes walked per window (the window also holds one record's worth
/// after them).
pub(crate) const STEP: usize = 64 << 20;

/// Bytes walked between two looks at the interrupt flag.
const LOOK_EVERY: u64 = 1 << 20;

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
    /// `offset`: the first `own` bytes of `bytes`. A region that ends in
    /// this piece (at the next valid record, or at the end of the file) is
    /// handed over whole: `own` is all of `bytes`. A longer one is handed
    /// over in several pieces, the next one starting at `offset + own`;
    /// then `bytes` goes on past `own` with what follows in the file (at
    /// least a record's worth, or up to the end), for what starts in the
    /// piece and runs on.
    Damaged {
        /// Offset of the first byte.
        offset: u64,
        /// The bytes: this piece's, then what follows them, if anything.
        bytes: &'a [u8],
        /// How many of `bytes` are this piece's.
        own: usize,
        /// Whether the piece is the start of its region (the bytes at a
        /// record boundary, to be read as a record).
        starts_region: bool,
    },
}

/// What a tolerant walk found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Salvage {
    /// Valid records walked (before and after damage).
    pub records: usize,
    /// Damaged regions found (a torn tail counts as one).
    pub damaged: usize,
    /// Whether the file header was damaged (its records were walked anyway).
    pub bad_header: bool,
}

/// What a file walked tolerantly holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// A log, from its file header.
    Log,
    /// A copy of part of a log (a tail copied into quarantine): from a
    /// record boundary, without a file header. Nothing says which framing
    /// the log had: the bytes are walked as records of both, from offset 0.
    Part,
}

/// Walks the file at `path`, which `holds` a log or part of one,
/// tolerantly (see the module documentation), handing every piece to
/// `each`.
///
/// Errors: the file cannot be opened or read (missing, no permission, not a
/// regular file, an I/O error), or its header is valid but names a format
/// this build does not know ([`Error::Unsupported`]): its records cannot be
/// interpreted at all; and [`Error::Interrupted`] soon after `interrupt` is
/// set (it is looked at for every MiB walked).
pub fn salvage_log(
    backend: &dyn Backend,
    path: &Path,
    holds: Holds,
    options: LogOptions,
    interrupt: &AtomicBool,
    each: &mut dyn FnMut(Piece<'_>),
) -> Result<Salvage> {
    let (file, len) = open(backend, path)?;
    let io = |e| super::read_error("read", backend.display(path), e);
    let interrupt = Some(interrupt);
    if holds == Holds::Part {
        return salvage_both(&*file, len, 0, options, interrupt, each).map_err(io);
    }
    let mut header = [0u8; FILE_HEADER_LEN as usize];
    let got = read_at_most(&*file, &mut header, 0).map_err(io)?;
    let start = FILE_HEADER_LEN.min(got as u64);
    match check_file_header(&header[..got]) {
        Ok(format) => salvage_file(
            &*file,
            len,
            start,
            format.framing,
            options,
            STEP,
            interrupt,
            each,
        )
        .map_err(io),
        // Whatever the version was, its records are walked in both
        // framings: marking more only keeps blobs longer.
        Err(HeaderProblem::Damaged(..)) => {
            let mut out = salvage_both(&*file, len, start, options, interrupt, each).map_err(io)?;
            out.bad_header = true;
            Ok(out)
        }
        Err(HeaderProblem::Unsupported { version, flags }) => Err(Error::Unsupported {
            path: backend.display(path),
            version,
            flags,
            supported: super::FORMAT_VERSION,
        }),
    }
}

/// The file at `path`, opened through the storage (which refuses anything
/// but a regular file), and its length.
fn open(backend: &dyn Backend, path: &Path) -> Result<(Box<dyn ObjectReader>, u64)> {
    let file = backend
        .open(path)
        .map_err(|e| io_error(backend, path, "open", e))?;
    let len = file.len().map_err(|e| io_error(backend, path, "stat", e))?;
    Ok((file, len))
}

fn io_error(backend: &dyn Backend, path: &Path, op: &'static str, source: io::Error) -> Error {
    Error::Io {
        op,
        path: backend.display(path),
        source,
    }
}

/// Walks `[start, len)` of `file` as records of each framing in turn.
fn salvage_both(
    file: &dyn ObjectReader,
    len: u64,
    start: u64,
    options: LogOptions,
    interrupt: Option<&AtomicBool>,
    each: &mut dyn FnMut(Piece<'_>),
) -> io::Result<Salvage> {
    let mut out = Salvage::default();
    for framing in [Framing::V1, Framing::V2] {
        let s = salvage_file(file, len, start, framing, options, STEP, interrupt, each)?;
        out.records += s.records;
        out.damaged += s.damaged;
    }
    Ok(out)
}

/// Walks the bytes `[start, len)` of `file` tolerantly, as records of
/// `framing`, handing every piece to `each`, in windows of `step` bytes of
/// walk (see the module documentation). A file that is shorter than `len`
/// by now (a writer cut a torn tail) is walked as far as it goes. Stops
/// with the error of [`check_interrupt`](super::check_interrupt) soon after
/// `interrupt` is set: it is looked at for every [`LOOK_EVERY`] bytes
/// walked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn salvage_file(
    file: &dyn ObjectReader,
    len: u64,
    start: u64,
    framing: Framing,
    options: LogOptions,
    step: usize,
    interrupt: Option<&AtomicBool>,
    each: &mut dyn FnMut(Piece<'_>),
) -> io::Result<Salvage> {
    let step = u64::try_from(step.max(1)).unwrap_or(u64::MAX);
    let lookahead = framing.record_header_len() + u64::from(options.max_record_size);
    let max = options.max_record_size;
    let mut search = Resync::new(framing, max);
    let mut out = Salvage::default();
    let mut window = Window::default();
    let mut off = start.min(len);
    // Where the damaged region being walked started, and whether a piece
    // of it was handed over already.
    let mut damaged: Option<(u64, bool)> = None;
    let mut next_look = off;
    while off < len {
        super::check_interrupt(interrupt)?;
        window.cover(
            file,
            off,
            len.min(off.saturating_add(step).saturating_add(lookahead)),
        )?;
        let end = window.end();
        if end <= off {
            break; // The file shrank.
        }
        let stop = end.min(off.saturating_add(step));
        while off < stop {
            if off >= next_look {
                super::check_interrupt(interrupt)?;
                next_look = off.saturating_add(LOOK_EVERY);
            }
            // At a record boundary the record there is checked directly;
            // inside a damaged region, by the search that keeps the work
            // linear in the bytes however many valid headers they hold.
            let found = match damaged {
                None => whole_record(framing, window.at(off), max),
                Some(_) => search.at(&window.bytes, window.base, off),
            };
            match found {
                Some(Found { len, valid: true }) => {
                    if let Some((from, continued)) = damaged.take() {
                        if from < off {
                            let region = window.range(from, off);
                            out.damaged += usize::from(!continued);
                            each(Piece::Damaged {
                                offset: from,
                                bytes: region,
                                own: region.len(),
                                starts_region: !continued,
                            });
                        }
                    }
                    out.records += 1;
                    hand_record(framing, off, &window.at(off)[..len], each);
                    off += len as u64;
                }
                // A record whose checksums match but that is not of its
                // framing's shape: damage, passed over whole (its
                // structure walked once).
                Some(Found { len, valid: false }) => {
                    damaged.get_or_insert((off, false));
                    off += len as u64;
                }
                None => {
                    damaged.get_or_insert((off, false));
                    // The next candidate is the next byte (records are not
                    // aligned, and a record's own header is its only mark),
                    // except in a run of zeros: a header of zeros is never
                    // valid (its checksum is not 0), so none starts where
                    // a whole header's worth of zeros follows.
                    off += skip_zeros(window.at(off), framing.record_header_len() as usize)
                        .clamp(1, (stop - off) as usize) as u64;
                }
            }
        }
        if let Some((from, continued)) = damaged {
            // The region goes on into the next window: this piece is
            // handed over with the bytes after it.
            let goes_on = off < len;
            let bytes = window.range(from, if goes_on { end } else { off });
            out.damaged += usize::from(!continued);
            each(Piece::Damaged {
                offset: from,
                bytes,
                own: (off - from) as usize,
                starts_region: !continued,
            });
            damaged = goes_on.then_some((off, true));
        }
    }
    Ok(out)
}

/// How many offsets from the start of `bytes` cannot start a record whose
/// header is `header_len` bytes because their header would be all zeros:
/// the run of zeros there, less a header's length (0 if none).
fn skip_zeros(bytes: &[u8], header_len: usize) -> usize {
    (zero_run(bytes) + 1).saturating_sub(header_len)
}

/// The number of zero bytes `bytes` starts with.
fn zero_run(bytes: &[u8]) -> usize {
    let mut run = 0;
    // In blocks a compiler turns into vector instructions.
    for block in bytes.chunks(64) {
        if block.iter().fold(0, |all, &b| all | b) != 0 {
            return run + block.iter().take_while(|&&b| b == 0).count();
        }
        run += block.len();
    }
    run
}

/// Hands over the content of the whole, valid record `record` at `offset`.
fn hand_record(framing: Framing, offset: u64, record: &[u8], each: &mut dyn FnMut(Piece<'_>)) {
    let content = &record[framing.record_header_len() as usize..];
    match decode_record_header(framing, record) {
        Some(super::RecordHeader::V2 { heads_len, .. }) => {
            let (heads, body) = content.split_at((heads_len as usize).min(content.len()));
            each(Piece::Sections {
                offset,
                heads,
                body,
            });
        }
        // Checked to be a batch by `whole_record` or the search.
        _ => {
            let _ = walk_batch(content, |e| each(Piece::Entry { offset, bytes: e }));
        }
    }
}

/// The bytes of a file from `base` on, as far as they were read.
#[derive(Debug, Default)]
struct Window {
    base: u64,
    bytes: Vec<u8>,
}

impl Window {
    /// Makes the window hold `[from, to)` of `file` (less at its end):
    /// what it held from `from` on is kept, the rest read.
    fn cover(&mut self, file: &dyn ObjectReader, from: u64, to: u64) -> io::Result<()> {
        let keep = usize::try_from(from.saturating_sub(self.base))
            .map_or(self.bytes.len(), |k| k.min(self.bytes.len()));
        self.bytes.drain(..keep);
        self.base = from;
        let have = self.bytes.len();
        let want = usize::try_from(to.saturating_sub(from)).map_err(|_| {
            io::Error::new(io::ErrorKind::OutOfMemory, "a window larger than memory")
        })?;
        if want > have {
            self.bytes.resize(want, 0);
            let got = read_at_most(file, &mut self.bytes[have..], from + have as u64)?;
            self.bytes.truncate(have + got);
        }
        Ok(())
    }

    /// The offset after the last byte held.
    fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    /// The bytes held from `offset` (at least `self.base`) on.
    fn at(&self, offset: u64) -> &[u8] {
        &self.bytes[(offset - self.base) as usize..]
    }

    /// The bytes `[from, to)`, both within the window.
    fn range(&self, from: u64, to: u64) -> &[u8] {
        &self.bytes[(from - self.base) as usize..(to - self.base) as usize]
    }
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
    use proptest::prelude::*;

    fn log_of(batches: &[&[&[u8]]]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = encode_file_header(LogFormat::v1(0)).to_vec();
        let mut offsets = Vec::new();
        for b in batches {
            offsets.push(bytes.len());
            bytes.extend_from_slice(&encode_record(b));
        }
        (bytes, offsets)
    }

    /// A file in memory that counts the bytes asked of it at once.
    #[derive(Debug)]
    struct Mem {
        bytes: Vec<u8>,
        largest_read: std::sync::atomic::AtomicUsize,
    }

    impl Mem {
        fn new(bytes: &[u8]) -> Self {
            Mem {
                bytes: bytes.to_vec(),
                largest_read: 0.into(),
            }
        }
    }

    impl ObjectReader for Mem {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            self.largest_read
                .fetch_max(buf.len(), std::sync::atomic::Ordering::Relaxed);
            let start = (offset as usize).min(self.bytes.len());
            let n = buf.len().min(self.bytes.len() - start);
            buf[..n].copy_from_slice(&self.bytes[start..start + n]);
            Ok(n)
        }

        fn len(&self) -> io::Result<u64> {
            Ok(self.bytes.len() as u64)
        }
    }

    /// What a walk handed over: entries with their record's offset, and
    /// damaged regions as (offset, their bytes), pieces joined.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Walked {
        entries: Vec<(u64, Vec<u8>)>,
        regions: Vec<(u64, Vec<u8>)>,
        salvage: Salvage,
    }

    fn walk(bytes: &[u8], start: u64, options: LogOptions, step: usize) -> Walked {
        let file = Mem::new(bytes);
        let lookahead = 12 + options.max_record_size as usize;
        let mut w = Walked::default();
        let mut went_on = 0;
        let salvage = salvage_file(
            &file,
            bytes.len() as u64,
            start,
            Framing::V1,
            options,
            step,
            None,
            &mut |p| {
                match p {
                    Piece::Entry { offset, bytes } => w.entries.push((offset, bytes.to_vec())),
                    Piece::Sections { .. } => panic!("a version 2 record in a version 1 log"),
                    Piece::Damaged {
                        offset,
                        bytes: piece,
                        own,
                        starts_region,
                    } => {
                        let end = offset as usize + own;
                        assert_eq!(
                            piece,
                            &bytes[offset as usize..offset as usize + piece.len()]
                        );
                        match w.regions.last_mut() {
                            Some((o, region)) if !starts_region => {
                                assert_eq!(*o as usize + region.len(), offset as usize);
                                // The piece before went on with what follows
                                // in the file: all of it, or a record's worth.
                                assert!(went_on >= lookahead.min(bytes.len() - offset as usize));
                                region.extend_from_slice(&piece[..own]);
                            }
                            _ => {
                                assert!(starts_region);
                                w.regions.push((offset, piece[..own].to_vec()));
                            }
                        }
                        went_on = piece.len() - own;
                        assert!(end <= bytes.len());
                    }
                }
            },
        )
        .expect("read");
        w.salvage = salvage;
        w
    }

    fn pieces(bytes: &[u8], start: u64) -> (Vec<Vec<u8>>, Vec<u64>, Salvage) {
        let w = walk(bytes, start, LogOptions::default(), STEP);
        let entries = w.entries.into_iter().map(|(_, e)| e).collect();
        let damaged = w.regions.iter().map(|(o, _)| *o).collect();
        (entries, damaged, w.salvage)
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

    #[test]
    fn a_header_of_zeros_is_never_valid() {
        for framing in [Framing::V1, Framing::V2] {
            assert_eq!(whole_record(framing, &[0; 64], u32::MAX), None);
        }
    }

    #[test]
    fn a_long_damaged_tail_is_read_in_windows() {
        let (mut bytes, _) = log_of(&[&[b"a"], &[b"b"]]);
        let records_end = bytes.len();
        // A tail of zeros with stray bytes (as a sparse file, or one
        // overwritten), 40 times the window.
        bytes.resize(records_end + 40 * 1024, 0);
        for i in (records_end..bytes.len()).step_by(999) {
            bytes[i] = 0x5a;
        }
        let options = LogOptions {
            max_record_size: 256,
        };
        let file = Mem::new(&bytes);
        let mut pieces = 0;
        let s = salvage_file(
            &file,
            bytes.len() as u64,
            16,
            Framing::V1,
            options,
            1024,
            None,
            &mut |p| {
                pieces += usize::from(matches!(p, Piece::Damaged { .. }));
            },
        )
        .expect("read");
        assert_eq!((s.records, s.damaged), (2, 1));
        assert!(pieces >= 40, "{pieces} pieces");
        let largest = file.largest_read.load(std::sync::atomic::Ordering::Relaxed);
        assert!(largest <= 1024 + 12 + 256, "a read of {largest} bytes");
        // The same walk as in one window.
        assert_eq!(
            walk(&bytes, 16, options, 1024),
            walk(&bytes, 16, options, usize::MAX)
        );
    }

    /// A part of a generated log.
    #[derive(Debug, Clone)]
    enum Part {
        Record(Vec<Vec<u8>>),
        Garbage(Vec<u8>),
        Zeros(usize),
    }

    fn part() -> impl Strategy<Value = Part> {
        prop_oneof![
            4 => proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..4)
                .prop_map(Part::Record),
            1 => proptest::collection::vec(any::<u8>(), 1..60).prop_map(Part::Garbage),
            1 => (1usize..200).prop_map(Part::Zeros),
        ]
    }

    proptest! {
        /// The walk in windows of any size hands over what one walk of the
        /// whole file does: the same records, the same damaged regions.
        #[test]
        fn windows_of_any_size_walk_as_the_whole_file(
            parts in proptest::collection::vec(part(), 0..30),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..), 0..4),
            step in 1usize..300,
            max in 16u32..200,
        ) {
            let mut bytes = encode_file_header(LogFormat::v1(0)).to_vec();
            for p in &parts {
                match p {
                    Part::Record(entries) => bytes.extend_from_slice(&encode_record(entries)),
                    Part::Garbage(g) => bytes.extend_from_slice(g),
                    Part::Zeros(n) => bytes.resize(bytes.len() + n, 0),
                }
            }
            for (at, x) in &flips {
                let i = at.index(bytes.len());
                bytes[i] ^= x;
            }
            let options = LogOptions { max_record_size: max };
            let whole = walk(&bytes, 16, options, usize::MAX);
            prop_assert_eq!(walk(&bytes, 16, options, step), whole);
        }
    }
}
