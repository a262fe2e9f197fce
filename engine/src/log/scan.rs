//! Walking the records of a log and classifying where they end.
//!
//! Shared by the reader (which stops at the end), the writer's recovery (which
//! cuts a torn tail) and `scan` (which reports everything). The rules are those
//! of "Recovery" in `format-spec.md` (section 3), for both framings:
//!
//! - a record is *valid* when its header checksum matches, its length is within
//!   the limit, all its bytes lie before the end, the checksum of every section
//!   matches (version 1: the payload; version 2: heads and body) and the content
//!   has its framing's shape (a batch; a consistent heads section header);
//! - what follows the last valid record is a *torn tail* when it can be the
//!   prefix of the one record a writer had in flight: nothing valid after it and
//!   no more bytes than one record can hold;
//! - anything else is *damage*, reported at the offset of the first bad record.
//!
//! A walk may leave the body sections of version 2 records before the proven
//! end unchecked ([`Walker::with_lazy_bodies`]): those records were whole once,
//! and a reader that uses a body checks it when it reads it (format-spec.md 3,
//! "What the checksums cover").

use std::io;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use jpstore_blobstore::backend::{read_at_most, ObjectReader};

use super::record::{
    check_content, check_min_len, decode_record_header, ContentFault, Framing, HeadsSection,
    RecordHeader, Section,
};
use super::resync::Resync;
use crate::error::Error;

/// How a walk over the records of a log ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEnd {
    /// The last valid record ends exactly at the end of the file (or at the
    /// end of what the reader looked at).
    Clean {
        /// Where the next record will be written.
        offset: u64,
    },
    /// Bytes after the last valid record that are the prefix of one record
    /// in flight: a write cut short by a crash, or (for a reader) a record a
    /// concurrent writer is writing right now.
    TornTail {
        /// Offset of the incomplete record (the end of the valid records).
        offset: u64,
        /// Bytes from there to the end of the file.
        len: u64,
    },
    /// A record that is not valid and cannot be a torn tail.
    Damaged {
        /// Offset of the bad record (the end of the valid records).
        offset: u64,
        /// What is wrong there.
        damage: Damage,
    },
}

impl LogEnd {
    /// Offset just after the last valid record.
    pub fn valid_end(&self) -> u64 {
        match *self {
            LogEnd::Clean { offset }
            | LogEnd::TornTail { offset, .. }
            | LogEnd::Damaged { offset, .. } => offset,
        }
    }
}

/// Bytes after the last whole record of a log that a read leaves out: a
/// record another process is writing right now, or what an append that
/// did not complete left (format-spec.md 3, "Recovery and
/// classification"). A reader shows the conversation without them, and
/// says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Where they start: the end of the whole records.
    pub offset: u64,
    /// How many bytes there are.
    pub len: u64,
}

impl TornTail {
    /// The tail a walk ended at, if it ended at one.
    pub(crate) fn of(end: Option<&LogEnd>) -> Option<TornTail> {
        match end {
            Some(&LogEnd::TornTail { offset, len }) => Some(TornTail { offset, len }),
            _ => None,
        }
    }

    /// What a command says of it for conversation `id`, on standard error.
    pub fn warning(&self, id: &dyn std::fmt::Display) -> String {
        format!(
            "conversation {id}: {} bytes after its last whole record (offset {}) are left out: a record being appended right now, or an incomplete record left by an append that did not complete (the next append or `jp-store fsck --repair` copies them into quarantine/ and cuts them)",
            self.len, self.offset
        )
    }
}

/// What is wrong with a damaged record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// The header checksum does not match, so its length cannot be trusted,
    /// and the bytes after it cannot all belong to one torn record.
    HeaderChecksum {
        /// Offset of a whole record (its checksums match) found after the
        /// bad header, if any (if none, more bytes follow than one record
        /// can hold).
        valid_record_at: Option<u64>,
    },
    /// The payload checksum does not match, and more bytes follow the record.
    PayloadChecksum {
        /// The checksum in the record header.
        stored: u32,
        /// The checksum of the payload as read.
        computed: u32,
    },
    /// A section checksum of a version 2 record does not match, and more
    /// bytes follow the record.
    SectionChecksum {
        /// The section: heads or body.
        section: Section,
        /// The checksum in the record header.
        stored: u32,
        /// The checksum of the section as read.
        computed: u32,
    },
    /// The header (checksum valid) claims a payload larger than the limit.
    TooLarge {
        /// Claimed payload length.
        size: u64,
        /// The configured limit.
        max: u64,
    },
    /// The checksums match but the payload is not a batch.
    Malformed(String),
    /// What would be a torn tail lies inside the part of the log known to
    /// have been whole (`Walker::with_proven_end`: records acknowledged
    /// after their sync, or published with the log), so it is damage to a
    /// complete record, not a write cut short.
    ProvenWhole {
        /// End of the part known to have been whole.
        proven_end: u64,
        /// Bytes from the bad record to the end of the file.
        len: u64,
    },
    /// The log ends before the end of the part known to have been whole:
    /// complete records were lost.
    Truncated {
        /// End of the part known to have been whole.
        proven_end: u64,
    },
}

impl Damage {
    /// The error that reports this damage at `offset` of the file `path`.
    pub fn to_error(&self, path: &Path, offset: u64) -> Error {
        let (expected, found) = match self {
            Damage::HeaderChecksum {
                valid_record_at: Some(next),
            } => (
                "a record header with a matching checksum".to_string(),
                format!("a damaged header, followed by a whole record (its checksums match) at offset {next}"),
            ),
            Damage::HeaderChecksum {
                valid_record_at: None,
            } => (
                "a record header with a matching checksum".to_string(),
                "a damaged header, followed by more bytes than one record can hold".to_string(),
            ),
            Damage::PayloadChecksum { stored, computed } => (
                format!("a payload with checksum {stored:#010x}"),
                format!("checksum {computed:#010x}, and more records after it"),
            ),
            Damage::SectionChecksum {
                section,
                stored,
                computed,
            } => (
                format!("a {} with checksum {stored:#010x}", section.name()),
                format!("checksum {computed:#010x}, and more records after it"),
            ),
            Damage::TooLarge { size, max } => {
                return Error::RecordTooLarge {
                    path: path.to_path_buf(),
                    offset: Some(offset),
                    size: *size,
                    max: *max,
                }
            }
            Damage::Malformed(found) => (
                "a record content of its framing's shape (a batch of length-prefixed entries, or a heads section consistent with its header)".into(),
                found.clone(),
            ),
            Damage::ProvenWhole { proven_end, len } => (
                format!("whole records up to offset {proven_end} (they were acknowledged or published whole)"),
                format!("{len} bytes that are not a valid record: damage to a complete record, not a write cut short; run `jp-store fsck --repair`"),
            ),
            Damage::Truncated { proven_end } => (
                format!("whole records up to offset {proven_end} (they were acknowledged or published whole)"),
                "the end of the file: acknowledged records are missing; run `jp-store fsck --repair`".to_string(),
            ),
        };
        Error::Corrupt {
            path: path.to_path_buf(),
            offset,
            expected,
            found,
        }
    }
}

/// One step of a walk.
pub(crate) enum Step {
    /// A valid record: its header (checked) and whether its body section
    /// was checked too (always, except for version 2 records before the
    /// proven end of a walk with lazy bodies). Its bytes are in the
    /// walker's buffer ([`Walker::get`]).
    Record {
        header: RecordHeader,
        body_checked: bool,
        /// The heads section header (version 2), checked.
        section: Option<HeadsSection>,
    },
    /// The walk is over.
    End(LogEnd),
}

/// Bytes read ahead when the next record is small.
const READ_AHEAD: usize = 64 * 1024;

/// Where a walk reads from.
enum Source<'f> {
    /// A file, read in chunks into the walker's buffer.
    File(&'f dyn ObjectReader),
    /// The bytes of a whole file, already in memory (offsets are positions
    /// in it).
    Memory(&'f [u8]),
}

/// A buffered, bounded view of a file: reads only below `limit` (the length
/// observed when the walk started), in chunks, one record in memory at most.
pub(crate) struct Walker<'f> {
    source: Source<'f>,
    framing: Framing,
    limit: u64,
    max_payload: u32,
    proven_end: u64,
    lazy_bodies: bool,
    buf: Vec<u8>,
    buf_start: u64,
    interrupt: Option<&'f AtomicBool>,
}

/// Offsets the search after a bad header looks at between two looks at
/// the interrupt flag.
const OFFSETS_PER_LOOK: u64 = 1 << 16;

impl std::fmt::Debug for Walker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Walker")
            .field("framing", &self.framing)
            .field("limit", &self.limit)
            .field(
                "buffered",
                &(self.buf_start..self.buf_start + self.buf.len() as u64),
            )
            .finish_non_exhaustive()
    }
}

impl<'f> Walker<'f> {
    /// A walk of the records of `framing` in `file`, below `limit`.
    pub(crate) fn new(
        file: &'f dyn ObjectReader,
        framing: Framing,
        limit: u64,
        max_payload: u32,
    ) -> Self {
        Walker {
            source: Source::File(file),
            framing,
            limit,
            max_payload,
            proven_end: 0,
            lazy_bodies: false,
            buf: Vec::new(),
            buf_start: 0,
            interrupt: None,
        }
    }

    /// A walk of the records of `framing` in `bytes`, the first bytes of a
    /// file of `len` bytes as read into memory: all of them, or as many as
    /// a walk can read ([`read_for_walk`](super::reader::read_for_walk)).
    /// A walk that would read past them finds a torn tail there.
    pub(crate) fn in_memory(bytes: &'f [u8], len: u64, framing: Framing, max_payload: u32) -> Self {
        Walker {
            source: Source::Memory(bytes),
            framing,
            limit: len.max(bytes.len() as u64),
            max_payload,
            proven_end: 0,
            lazy_bodies: false,
            buf: Vec::new(),
            buf_start: 0,
            interrupt: None,
        }
    }

    /// Declares that every record ending at or before `proven_end` was once
    /// whole (acknowledged after its sync, or published with the log), so
    /// that what would be a torn tail before it is damage instead
    /// (format-spec.md 3, "Recovery and classification").
    pub(crate) fn with_proven_end(mut self, proven_end: u64) -> Self {
        self.proven_end = proven_end;
        self
    }

    /// Leaves the body sections of version 2 records that end at or before
    /// the proven end unchecked: whoever uses such a body checks it first
    /// (format-spec.md 3, "Reading"). Records from the proven end on, and
    /// every record of a version 1 log, are checked whole.
    pub(crate) fn with_lazy_bodies(mut self) -> Self {
        self.lazy_bodies = true;
        self
    }

    /// Makes every step look at `interrupt` (if any) first, and the search
    /// after a bad header as it goes: once it is set, a step fails with an
    /// error that [`read_error`](super::read_error) reports as
    /// [`Error::Interrupted`].
    pub(crate) fn with_interrupt(mut self, interrupt: Option<&'f AtomicBool>) -> Self {
        self.interrupt = interrupt;
        self
    }

    /// The length the walk is bounded by.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes `[off, off + n)`, or `None` if they are not all below the limit
    /// or the file shrank under us (a writer cut a torn tail we were reading).
    pub(crate) fn get(&mut self, off: u64, n: u64) -> io::Result<Option<&[u8]>> {
        let Some(end) = off.checked_add(n).filter(|&e| e <= self.limit) else {
            return Ok(None);
        };
        let file = match self.source {
            Source::Memory(bytes) => {
                // Below the limit, which is the length of `bytes`.
                return Ok(bytes.get(off as usize..end as usize));
            }
            Source::File(file) => file,
        };
        let buf_end = self.buf_start + self.buf.len() as u64;
        if off < self.buf_start || end > buf_end {
            // `n` is at most one record (bounded by the limit of the caller),
            // so the buffer never holds more than that or READ_AHEAD.
            let want = n.max(READ_AHEAD as u64).min(self.limit - off);
            let want = usize::try_from(want)
                .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "record too large"))?;
            // Bytes left from the previous chunk are overwritten by the read
            // (and cut off after it): only a grown tail is zeroed.
            self.buf.resize(want, 0);
            // Read what is there: the file may have shrunk below `limit`
            // since the walk started (a writer cut a torn tail). Bytes below
            // the cut are whole records and must still be seen, so a short
            // read is only a miss if it does not cover `[off, end)`.
            let got = match read_at_most(file, &mut self.buf, off) {
                Ok(got) => got,
                Err(e) => {
                    self.buf.clear();
                    return Err(e);
                }
            };
            self.buf.truncate(got);
            self.buf_start = off;
            if (got as u64) < n {
                self.buf.clear();
                return Ok(None);
            }
        }
        // Inside the buffer: `buf_start <= off` and `end <= buf_end`.
        let from = (off - self.buf_start) as usize;
        let to = (end - self.buf_start) as usize;
        Ok(self.buf.get(from..to))
    }

    /// Reads the record at `off` (a record boundary) or classifies the end.
    pub(crate) fn step(&mut self, off: u64) -> io::Result<Step> {
        super::check_interrupt(self.interrupt)?;
        let step = self.step_bytes(off)?;
        if off >= self.proven_end {
            return Ok(step);
        }
        Ok(match step {
            Step::End(LogEnd::TornTail { offset, len }) => Step::End(LogEnd::Damaged {
                offset,
                damage: Damage::ProvenWhole {
                    proven_end: self.proven_end,
                    len,
                },
            }),
            Step::End(LogEnd::Clean { offset }) => Step::End(LogEnd::Damaged {
                offset,
                damage: Damage::Truncated {
                    proven_end: self.proven_end,
                },
            }),
            other => other,
        })
    }

    /// [`Walker::step`] from the bytes alone.
    fn step_bytes(&mut self, off: u64) -> io::Result<Step> {
        let limit = self.limit;
        if off >= limit {
            return Ok(Step::End(LogEnd::Clean { offset: off }));
        }
        let torn = Step::End(LogEnd::TornTail {
            offset: off,
            len: limit - off,
        });
        let damaged = |damage| {
            Step::End(LogEnd::Damaged {
                offset: off,
                damage,
            })
        };
        let framing = self.framing;
        let header_len = framing.record_header_len();
        let Some(bytes) = self.get(off, header_len)? else {
            return Ok(torn);
        };
        let Some(header) = decode_record_header(framing, bytes) else {
            return self.after_bad_header(off);
        };
        if header.content_len() > u64::from(self.max_payload) {
            return Ok(damaged(Damage::TooLarge {
                size: header.content_len(),
                max: self.max_payload.into(),
            }));
        }
        if let Err(found) = check_min_len(&header) {
            return Ok(damaged(Damage::Malformed(found)));
        }
        let rec_end = off + header.record_len();
        if rec_end > limit {
            return Ok(torn);
        }
        // A version 2 record that ends at or before the proven end was whole
        // once: with lazy bodies, its body is checked by whoever uses it.
        let check_body = !(self.lazy_bodies && rec_end <= self.proven_end);
        let max = self.max_payload;
        let Some(content) = self.get(off + header_len, header.content_len())? else {
            return Ok(torn);
        };
        match check_content(&header, content, max, check_body) {
            Ok(section) => Ok(Step::Record {
                header,
                body_checked: check_body || matches!(header, RecordHeader::V1 { .. }),
                section,
            }),
            // A torn record ends the file: its header was written whole but
            // some of its other pages were not. Anything after it was
            // appended after it was complete, so then the record is damaged.
            Err(ContentFault::Checksum { .. }) if rec_end == limit => Ok(torn),
            Err(ContentFault::Checksum {
                section: Section::Payload,
                stored,
                computed,
            }) => Ok(damaged(Damage::PayloadChecksum { stored, computed })),
            Err(ContentFault::Checksum {
                section,
                stored,
                computed,
            }) => Ok(damaged(Damage::SectionChecksum {
                section,
                stored,
                computed,
            })),
            Err(ContentFault::Malformed(found)) => Ok(damaged(Damage::Malformed(found))),
        }
    }

    /// The header at `off` is not valid: torn (a prefix of the record in
    /// flight) or damaged (something valid, or too much, follows).
    fn after_bad_header(&mut self, off: u64) -> io::Result<Step> {
        let remaining = self.limit - off;
        let max = self.max_payload;
        let framing = self.framing;
        let interrupt = self.interrupt;
        if remaining > framing.record_header_len() + u64::from(max) {
            return Ok(Step::End(LogEnd::Damaged {
                offset: off,
                damage: Damage::HeaderChecksum {
                    valid_record_at: None,
                },
            }));
        }
        let Some(region) = self.get(off, remaining)? else {
            return Ok(Step::End(LogEnd::TornTail {
                offset: off,
                len: remaining,
            }));
        };
        // A record whose checksums match, anywhere after the bad header:
        // something a writer wrote whole after it (linear in the region
        // however many valid headers it holds, `resync`).
        let mut search = Resync::new(framing, max);
        let mut found = None;
        for p in 1..region.len() as u64 {
            if p % OFFSETS_PER_LOOK == 0 {
                super::check_interrupt(interrupt)?;
            }
            if search.at(region, 0, p).is_some() {
                found = Some(p);
                break;
            }
        }
        Ok(Step::End(match found {
            Some(p) => LogEnd::Damaged {
                offset: off,
                damage: Damage::HeaderChecksum {
                    valid_record_at: Some(off + p),
                },
            },
            None => LogEnd::TornTail {
                offset: off,
                len: remaining,
            },
        }))
    }
}
