//! Walking the records of a log and classifying where they end.
//!
//! Shared by the reader (which stops at the end), the writer's recovery (which
//! cuts a torn tail) and `scan` (which reports everything). The rules are those
//! of "Recovery" in `format-spec.md` (section 3):
//!
//! - a record is *valid* when its header checksum matches, its length is within
//!   the limit, all its bytes lie before the end, its payload checksum matches
//!   and the payload is a well-formed batch;
//! - what follows the last valid record is a *torn tail* when it can be the
//!   prefix of the one record a writer had in flight: nothing valid after it and
//!   no more bytes than one record can hold;
//! - anything else is *damage*, reported at the offset of the first bad record.

use std::io;
use std::path::Path;

use jpstore_blobstore::backend::ObjectReader;

use super::record::{
    check_batch, decode_record_header, RecordHeader, MIN_PAYLOAD_LEN, RECORD_HEADER_LEN,
};
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

/// What is wrong with a damaged record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// The header checksum does not match, so its length cannot be trusted,
    /// and the bytes after it cannot all belong to one torn record.
    HeaderChecksum {
        /// Offset of a valid record found after the bad header, if any (if
        /// none, more bytes follow than one record can hold).
        valid_record_at: Option<u64>,
    },
    /// The payload checksum does not match, and more bytes follow the record.
    PayloadChecksum {
        /// The checksum in the record header.
        stored: u32,
        /// The checksum of the payload as read.
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
                format!("a damaged header, followed by a valid record at offset {next}"),
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
            Damage::TooLarge { size, max } => {
                return Error::RecordTooLarge {
                    path: path.to_path_buf(),
                    offset: Some(offset),
                    size: *size,
                    max: *max,
                }
            }
            Damage::Malformed(found) => {
                ("a batch of length-prefixed entries".into(), found.clone())
            }
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
    /// A valid record: its length on disk and its payload's (checked)
    /// checksum. The payload is in the walker's buffer ([`Walker::get`]).
    Record { len: u64, payload_crc: u32 },
    /// The walk is over.
    End(LogEnd),
}

/// Reads into `buf` at `offset` until it is full or the file ends; returns
/// the bytes read.
fn read_up_to(file: &dyn ObjectReader, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Bytes read ahead when the next record is small.
const READ_AHEAD: usize = 64 * 1024;

/// A buffered, bounded view of a file: reads only below `limit` (the length
/// observed when the walk started), in chunks, one record in memory at most.
pub(crate) struct Walker<'f> {
    file: &'f dyn ObjectReader,
    limit: u64,
    max_payload: u32,
    proven_end: u64,
    buf: Vec<u8>,
    buf_start: u64,
}

impl std::fmt::Debug for Walker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Walker")
            .field("limit", &self.limit)
            .field(
                "buffered",
                &(self.buf_start..self.buf_start + self.buf.len() as u64),
            )
            .finish_non_exhaustive()
    }
}

impl<'f> Walker<'f> {
    pub(crate) fn new(file: &'f dyn ObjectReader, limit: u64, max_payload: u32) -> Self {
        Walker {
            file,
            limit,
            max_payload,
            proven_end: 0,
            buf: Vec::new(),
            buf_start: 0,
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
            let got = match read_up_to(self.file, &mut self.buf, off) {
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
        let from = usize::try_from(off - self.buf_start).expect("inside the buffer");
        let to = usize::try_from(end - self.buf_start).expect("inside the buffer");
        Ok(Some(&self.buf[from..to]))
    }

    /// Reads the record at `off` (a record boundary) or classifies the end.
    pub(crate) fn step(&mut self, off: u64) -> io::Result<Step> {
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
        let Some(bytes) = self.get(off, RECORD_HEADER_LEN)? else {
            return Ok(torn);
        };
        let bytes: &[u8; RECORD_HEADER_LEN as usize] =
            bytes.try_into().expect("get returns the requested length");
        let Some(header) = decode_record_header(bytes) else {
            return self.after_bad_header(off);
        };
        if header.payload_len > self.max_payload {
            return Ok(damaged(Damage::TooLarge {
                size: header.payload_len.into(),
                max: self.max_payload.into(),
            }));
        }
        if header.payload_len < MIN_PAYLOAD_LEN {
            return Ok(damaged(Damage::Malformed(format!(
                "a payload length of {}, too short for a batch count",
                header.payload_len
            ))));
        }
        let rec_end = off + header.record_len();
        if rec_end > limit {
            return Ok(torn);
        }
        let Some(payload) = self.get(off + RECORD_HEADER_LEN, header.payload_len.into())? else {
            return Ok(torn);
        };
        let computed = crc32fast::hash(payload);
        if computed != header.payload_crc {
            // A torn record ends the file: its header was written whole but
            // some payload pages were not. Anything after it was appended
            // after it was complete, so then the record is damaged.
            return Ok(if rec_end == limit {
                torn
            } else {
                damaged(Damage::PayloadChecksum {
                    stored: header.payload_crc,
                    computed,
                })
            });
        }
        if let Err(found) = check_batch(payload) {
            return Ok(damaged(Damage::Malformed(found)));
        }
        Ok(Step::Record {
            len: header.record_len(),
            payload_crc: header.payload_crc,
        })
    }

    /// The header at `off` is not valid: torn (a prefix of the record in
    /// flight) or damaged (something valid, or too much, follows).
    fn after_bad_header(&mut self, off: u64) -> io::Result<Step> {
        let remaining = self.limit - off;
        let max = self.max_payload;
        if remaining > RECORD_HEADER_LEN + u64::from(max) {
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
        let found = (1..region.len()).find(|&p| valid_record_in(&region[p..], max));
        Ok(Step::End(match found {
            Some(p) => LogEnd::Damaged {
                offset: off,
                damage: Damage::HeaderChecksum {
                    valid_record_at: Some(off + p as u64),
                },
            },
            None => LogEnd::TornTail {
                offset: off,
                len: remaining,
            },
        }))
    }
}

/// Whether `bytes` starts with a whole valid record.
fn valid_record_in(bytes: &[u8], max: u32) -> bool {
    let Some(h) = bytes.get(..RECORD_HEADER_LEN as usize) else {
        return false;
    };
    let h: &[u8; RECORD_HEADER_LEN as usize] = h.try_into().expect("sliced to length");
    let Some(RecordHeader {
        payload_len,
        payload_crc,
    }) = decode_record_header(h)
    else {
        return false;
    };
    if payload_len > max {
        return false;
    }
    let start = RECORD_HEADER_LEN as usize;
    bytes
        .get(start..start + payload_len as usize)
        .is_some_and(|p| crc32fast::hash(p) == payload_crc && check_batch(p).is_ok())
}
