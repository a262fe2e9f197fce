//! The framing layer of a conversation log: an append-only file of
//! checksummed records. In a version 1 log a record holds one batch of
//! opaque entries; in a version 2 log, a heads section and a body section,
//! each under its own checksum.
//!
//! What the entries (version 1) and the sections (version 2, beyond their
//! 16-byte section header) mean is decided above this module. The byte
//! layout, the append protocol, recovery and the crash-point analysis are
//! in `format-spec.md` (section 3).
//!
//! # Invariants
//!
//! 1. **Append-only.** The only write to an existing log is a record at its
//!    end, by the one [`LogWriter`] holding the exclusive lock on the sidecar
//!    file `<log>.lock`. The only bytes ever removed are a torn tail, by a
//!    writer that just took the lock.
//! 2. **Acknowledged means durable.** [`LogWriter::append`] returns `Ok` only
//!    after `sync_data` of the record succeeded. A failed write or sync
//!    poisons the writer; it never retries.
//! 3. **Batches are atomic.** One batch is one record with one checksum:
//!    readers and recovery see all of its entries or none.
//! 4. **Nothing unchecked is used.** No field of a record header is used
//!    before the header checksum matched, no payload or section before its
//!    checksum matched; a length over [`LogOptions::max_record_size`] is
//!    refused before anything is allocated. A version 2 body left unchecked
//!    by a walk ([`ContentRef::Split`]'s `body_checked`) is checked by
//!    whoever uses it.
//! 5. **Damage is never skipped or cut.** Only the prefix of the one record
//!    a writer can have had in flight (a *torn tail*) is cut, and the writer
//!    reports it ([`LogWriter::cut_tail`]). Any other bad record is an error
//!    naming the file and offset; readers never change the file.
//! 6. **Readers see whole batches.** A [`LogReader`] takes no lock, reads
//!    only below the length it observed when a walk started, and treats a
//!    record still being written as not yet there, never as damage.
//! 7. **Append cost is constant.** The writer keeps the end offset; an append
//!    encodes, writes and syncs one record and reads nothing.
//!
//! # Memory
//!
//! Walks ([`Records`]) read ahead in 64 KiB chunks and hold at most one
//! record in memory, so logs of any length can be read; `scan` collects
//! all records, which is fine because logs hold event metadata and blob
//! references, not content.

mod reader;
mod record;
mod resync;
mod salvage;
mod scan;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use jpstore_blobstore::backend::Backend;

pub use reader::{ContentRef, LogReader, RecordRef, Records};
pub use record::{
    check_content_whole, check_file_header, decode_record_header, encode_batch, encode_file_header,
    encode_record_v2, payload_len, walk_batch, FramedRecord, Framing, HeadsSection, LogFormat,
    RecordHeader, Section, CODEC_PLAIN, CODEC_ZSTD, ENTRY_HEAD_LEN, FILE_HEADER_LEN, FLAG_PACKED,
    FORMAT_VERSION, HEADS_SECTION_HEADER_LEN, MAGIC, RECORD_HEADER_LEN, RECORD_HEADER_LEN_V2,
    VERSION_1, VERSION_2,
};
pub use resync::{search_work, SearchWork};
pub use salvage::{salvage_log, walk_batch_lossy, Holds, Piece, Salvage};
pub use scan::{Damage, LogEnd, TornTail};
pub use writer::{
    lock_new, lock_path, lock_waiting, try_lock, try_lock_to_read, CutTail, LogWriter, Published,
    Recovery,
};

pub(crate) use reader::content_ref;
pub(crate) use scan::{Step, Walker};

use crate::error::{Error, Result};

/// What the `io::Error` of a walk holds when it stopped because its
/// interrupt flag was set; mapped to [`Error::Interrupted`] where walks
/// report errors ([`read_error`]).
#[derive(Debug)]
struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Stopped {}

/// An error of `interrupt` if it is set: what loops over the bytes of a log
/// look at as they go.
pub(crate) fn check_interrupt(interrupt: Option<&AtomicBool>) -> std::io::Result<()> {
    if interrupt.is_some_and(|f| f.load(Ordering::Relaxed)) {
        Err(std::io::Error::other(Stopped))
    } else {
        Ok(())
    }
}

/// The error of a failed `op` on the log `path` (as displayed):
/// [`Error::Interrupted`] where a walk stopped at its flag
/// ([`check_interrupt`]), else [`Error::Io`].
pub(crate) fn read_error(op: &'static str, path: PathBuf, source: std::io::Error) -> Error {
    if source.get_ref().is_some_and(|e| e.is::<Stopped>()) {
        Error::Interrupted
    } else {
        Error::Io { op, path, source }
    }
}

/// Offset of the first record of every log.
pub const FIRST_RECORD: u64 = FILE_HEADER_LEN;

/// Default limit of a record's payload: 64 MiB.
pub const DEFAULT_MAX_RECORD_SIZE: u32 = 64 << 20;

/// Settings of readers and writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// Largest content of a record that is written or read: the payload
    /// (version 1), or the heads and body sections together and, again,
    /// what they decode to (version 2). A batch encoding to more is refused
    /// by `append`; a record on disk claiming more is reported as
    /// [`Damage::TooLarge`] without allocating. Readers must allow at least
    /// what writers write.
    pub max_record_size: u32,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            max_record_size: DEFAULT_MAX_RECORD_SIZE,
        }
    }
}

/// One record of a log: its content and where it lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Offset of the record in the file.
    pub offset: u64,
    /// Bytes of the record on disk (header and content).
    pub len: u64,
    /// The record's checksum, as stored in (and checked against) the header
    /// ([`RecordHeader::record_crc`]).
    pub record_crc: u32,
    /// What it holds.
    pub content: RecordContent,
}

/// What a record holds, copied out of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordContent {
    /// Version 1: the entries of the batch, in append order.
    Batch(Vec<Vec<u8>>),
    /// Version 2: the heads section and the body section (both checked).
    Split {
        /// The heads section.
        heads: Vec<u8>,
        /// The body section, as stored.
        body: Vec<u8>,
    },
}

impl Record {
    /// Offset just after the record: where the next one starts.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }

    /// The entries of a version 1 batch (none for a version 2 record).
    pub fn entries(&self) -> &[Vec<u8>] {
        match &self.content {
            RecordContent::Batch(entries) => entries,
            RecordContent::Split { .. } => &[],
        }
    }
}

/// Everything a read-only pass over a log finds (for fsck).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// The valid records, in order.
    pub records: Vec<Record>,
    /// How they end: clean, a torn tail, or damage.
    pub end: LogEnd,
}

/// Reads the whole log at `path` without a lock and without changing it.
///
/// Damage after the header is reported in [`Scan::end`], not as an error;
/// errors are I/O failures and an unreadable file header ([`Error::Corrupt`]
/// at offset 0 or 12, [`Error::Unsupported`]). A torn tail may also be a
/// record a concurrent writer is writing.
///
/// [`Error::Corrupt`]: crate::error::Error::Corrupt
/// [`Error::Unsupported`]: crate::error::Error::Unsupported
pub fn scan(backend: &dyn Backend, path: &Path, options: LogOptions) -> Result<Scan> {
    scan_proven(backend, path, options, 0)
}

/// Like `scan`, knowing that the records up to `proven_end` were once
/// whole ([`LogReader::with_proven_end`]).
pub fn scan_proven(
    backend: &dyn Backend,
    path: &Path,
    options: LogOptions,
    proven_end: u64,
) -> Result<Scan> {
    scan_interruptible(backend, path, options, proven_end, &AtomicBool::new(false))
}

/// [`scan_proven`] that stops with [`Error::Interrupted`] soon after
/// `interrupt` is set (by a signal handler, or another thread): it is
/// looked at before each record and through the search after a bad header
/// ([`Records::interruptible`]), so a long log stops within a record.
///
/// [`Error::Interrupted`]: crate::error::Error::Interrupted
pub fn scan_interruptible(
    backend: &dyn Backend,
    path: &Path,
    options: LogOptions,
    proven_end: u64,
    interrupt: &AtomicBool,
) -> Result<Scan> {
    let reader = LogReader::open(backend, path, options)?.with_proven_end(proven_end);
    let mut walk = reader.records()?.interruptible(interrupt);
    let mut records = Vec::new();
    let mut error = None;
    for item in walk.by_ref() {
        match item {
            Ok(r) => records.push(r),
            Err(e) => error = Some(e),
        }
    }
    // Damage of a record is in the end; an error without an end (I/O, or a
    // log that shrank under the reader) is returned.
    let end = match walk.end() {
        Some(end) => end.clone(),
        None => return Err(error.expect("a walk stops at an end or after an error")),
    };
    Ok(Scan { records, end })
}

#[cfg(test)]
mod tests;
