//! Reading a log without a lock: whole batches only, incrementally.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use jpstore_blobstore::backend::{read_at_most, Backend, ObjectReader};

use super::record::{
    check_file_header, check_min_len, decode_batch, decode_record_header, walk_batch, Framing,
    HeaderProblem, LogFormat, RecordHeader, FILE_HEADER_LEN,
};
use super::scan::{LogEnd, Step, Walker};
use super::{LogOptions, Record, RecordContent};
use crate::error::{Error, Result};

/// A read-only handle on a log. Takes no lock: a writer may append while it
/// reads, and the reader sees whole batches only.
#[derive(Debug)]
pub struct LogReader {
    file: Box<dyn ObjectReader>,
    /// The log as read whole at the open ([`LogReader::open_once`]).
    once: Option<ReadOnce>,
    path: PathBuf,
    format: LogFormat,
    options: LogOptions,
    proven_end: u64,
}

impl LogReader {
    /// Opens the log at `path` and checks its file header.
    pub fn open(backend: &dyn Backend, path: &Path, options: LogOptions) -> Result<Self> {
        let display = backend.display(path);
        let file = backend.open(path).map_err(|source| Error::Io {
            op: "open",
            path: display.clone(),
            source,
        })?;
        let format = check_header(&*file, &display)?;
        Ok(LogReader {
            file,
            once: None,
            path: display,
            format,
            options,
            proven_end: 0,
        })
    }

    /// [`LogReader::open`] for a reader that reads the log once, as it is
    /// now (a view): a log of at most [`READ_WHOLE_UP_TO`] bytes is read
    /// whole at once, and its header check, a head's evidence
    /// (`head::open_judged`, through [`LogReader::file`]) and the first
    /// [`LogReader::take_file`] are served from that copy, one `pread` where
    /// there were four. Walks ([`LogReader::records`]) and a second look
    /// after damage (a second `take_file`) read the file itself.
    pub fn open_once(backend: &dyn Backend, path: &Path, options: LogOptions) -> Result<Self> {
        let display = backend.display(path);
        let io = |op: &'static str, source: io::Error| Error::Io {
            op,
            path: display.clone(),
            source,
        };
        let file = backend.open(path).map_err(|source| io("open", source))?;
        let len = file.len().map_err(|source| io("stat", source))?;
        let once = if len <= READ_WHOLE_UP_TO {
            Some(ReadOnce {
                bytes: read_up_to(&*file, len).map_err(|source| io("read", source))?,
            })
        } else {
            None
        };
        let format = match &once {
            Some(o) => check_header(o, &display)?,
            None => check_header(&*file, &display)?,
        };
        Ok(LogReader {
            file,
            once,
            path: display,
            format,
            options,
            proven_end: 0,
        })
    }

    /// A reader of the log `file` (open already), shown as `path`; checks
    /// its file header.
    pub fn over(file: Box<dyn ObjectReader>, path: PathBuf, options: LogOptions) -> Result<Self> {
        let format = check_header(&*file, &path)?;
        Ok(LogReader {
            file,
            once: None,
            path,
            format,
            options,
            proven_end: 0,
        })
    }

    /// Declares that the records of the log up to `proven_end` were once
    /// whole (acknowledged, or published with the log: the caller's
    /// evidence, such as a head cache). A bad record before it, even the
    /// last one, is then reported as damage instead of being taken for a
    /// record still being written, and so is a log shorter than it.
    pub fn with_proven_end(mut self, proven_end: u64) -> Self {
        self.proven_end = proven_end;
        self
    }

    /// The end of the part of the log known to have been whole (0: none).
    pub fn proven_end(&self) -> u64 {
        self.proven_end
    }

    /// The log file, as the storage displays it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file this reader reads (to check other evidence, such as a
    /// head cache, against the same file).
    pub fn file(&self) -> &dyn ObjectReader {
        match &self.once {
            Some(once) => once,
            None => &*self.file,
        }
    }

    /// The settings it reads with.
    pub fn options(&self) -> LogOptions {
        self.options
    }

    /// The log's format, from its file header.
    pub fn format(&self) -> LogFormat {
        self.format
    }

    /// The file read into memory, for readers that walk it there (the view
    /// of a version 2 log), and its length then: the bytes a walk of it can
    /// read ([`read_for_walk`]). A reader opened once gives, the first time,
    /// the copy it read at its open (moved out, not copied again); every
    /// other call reads the file as it is now, so a second look after
    /// damage does not see that copy again.
    pub fn take_file(&mut self) -> Result<(Vec<u8>, u64)> {
        if let Some(once) = self.once.take() {
            let len = once.bytes.len() as u64;
            return Ok((once.bytes, len));
        }
        let len = self.file.len().map_err(|source| self.io("stat", source))?;
        read_for_walk(&*self.file, len, self.format.framing, self.options)
            .map_err(|source| self.io("read", source))
    }

    /// The copy of the log read whole at its open ([`LogReader::open_once`]),
    /// moved out: `None` when none was read, or it was taken already. Walks
    /// and [`LogReader::take_file`] read the file from then on.
    pub(crate) fn take_copy(&mut self) -> Option<Vec<u8>> {
        self.once.take().map(|once| once.bytes)
    }

    /// The log's metadata as its open found it, where the open gives it
    /// ([`ObjectReader::opened_meta`]: a file's `fstat` at its open).
    pub fn opened_meta(&self) -> Option<jpstore_blobstore::backend::ObjectMeta> {
        self.file.opened_meta()
    }

    /// All records, from the first.
    pub fn records(&self) -> Result<Records<'_>> {
        self.records_from(FILE_HEADER_LEN)
    }

    /// The records starting at `offset`, which must be a record boundary this
    /// log reported before ([`Record::end`], [`Records::position`],
    /// [`LogEnd::valid_end`]) or [`FIRST_RECORD`](super::FIRST_RECORD).
    ///
    /// The walk covers the file as long as it is now; records appended later
    /// are read by a later call from [`Records::position`].
    pub fn records_from(&self, offset: u64) -> Result<Records<'_>> {
        let len = self.file.len().map_err(|source| self.io("stat", source))?;
        if offset < FILE_HEADER_LEN {
            return Err(self.io(
                "read",
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("offset {offset} is inside the file header"),
                ),
            ));
        }
        if offset > len {
            // A boundary we reported lies beyond the end: the file lost bytes
            // that were valid records.
            return Err(shrunk(&self.path, offset, len));
        }
        Ok(Records {
            reader: self,
            walker: Walker::new(
                &*self.file,
                self.format.framing,
                len,
                self.options.max_record_size,
            )
            .with_proven_end(self.proven_end),
            position: offset,
            end: None,
            done: false,
            rechecked: false,
            interrupt: None,
        })
    }

    fn io(&self, op: &'static str, source: io::Error) -> Error {
        Error::Io {
            op,
            path: self.path.clone(),
            source,
        }
    }
}

/// The `len` bytes of `file` (fewer if it shrank since its length was
/// taken: a writer cut a torn tail; what is left is the file).
pub(crate) fn read_up_to(file: &dyn ObjectReader, len: u64) -> io::Result<Vec<u8>> {
    let len = usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "a log larger than memory"))?;
    let mut bytes = vec![0u8; len];
    let done = if len >= READ_IN_HALVES && crate::parallel::cores() >= 2 {
        // Copying a long log out of the page cache is most of the time of
        // a view of it: both halves at once.
        let (first, later) = bytes.split_at_mut(len / 2);
        let start = first.len();
        let (done_first, done_later) = std::thread::scope(|scope| {
            let helper = scope.spawn(|| read_at_most(file, later, start as u64));
            let mine = read_at_most(file, first, 0);
            let theirs = helper
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (mine, theirs)
        });
        let done_first = done_first?;
        let done_later = done_later?;
        // A file that shrank meanwhile ends where the first half does.
        if done_first < start {
            done_first
        } else {
            start + done_later
        }
    } else {
        read_at_most(file, &mut bytes, 0)?
    };
    bytes.truncate(done);
    Ok(bytes)
}

/// Logs of at most this many bytes are read whole for a walk in memory
/// ([`read_for_walk`]).
pub(crate) const READ_WHOLE_FOR_WALK: u64 = 256 << 20;

/// Bytes read at a time by [`read_for_walk`] beyond [`READ_WHOLE_FOR_WALK`].
const WALK_CHUNK: u64 = 64 << 20;

/// The first bytes of the `len` bytes of the log `file`, as many as a walk
/// of its records of `framing` can read (format-spec.md 3, "Recovery"), and
/// the length a walk of them takes the file to have: a log of at most
/// [`READ_WHOLE_FOR_WALK`] bytes whole; a longer one up to the first record
/// header that is not valid (a checksum, a length beyond the limit or below
/// the minimum), and a record's worth after it, where a walk decides
/// whether it is a torn tail or damage. Whatever follows (gigabytes of
/// damage, a sparse tail) is never read. A file that shrank meanwhile (a
/// writer cut a torn tail) is read as far as it goes, and that is its
/// length.
pub(crate) fn read_for_walk(
    file: &dyn ObjectReader,
    len: u64,
    framing: Framing,
    options: LogOptions,
) -> io::Result<(Vec<u8>, u64)> {
    read_for_walk_in(file, len, framing, options, READ_WHOLE_FOR_WALK, WALK_CHUNK)
}

/// [`read_for_walk`], reading whole up to `whole_up_to` bytes and `chunk`
/// bytes at a time beyond.
pub(super) fn read_for_walk_in(
    file: &dyn ObjectReader,
    len: u64,
    framing: Framing,
    options: LogOptions,
    whole_up_to: u64,
    chunk: u64,
) -> io::Result<(Vec<u8>, u64)> {
    if len <= whole_up_to {
        let bytes = read_up_to(file, len)?;
        let len = bytes.len() as u64;
        return Ok((bytes, len));
    }
    let header_len = framing.record_header_len();
    let mut bytes = Vec::new();
    // Whether every read got what it asked for (the file did not shrink).
    let mut whole = true;
    let mut pos = FILE_HEADER_LEN;
    let end = loop {
        if pos >= len {
            break len;
        }
        whole &= grow_to(file, &mut bytes, (pos + header_len).min(len), len, chunk)?;
        let header = bytes
            .get(pos as usize..)
            .and_then(|b| decode_record_header(framing, b))
            .filter(|h| {
                h.content_len() <= u64::from(options.max_record_size) && check_min_len(h).is_ok()
            });
        match header {
            Some(h) => pos += h.record_len(),
            None => break pos.saturating_add(header_len + u64::from(options.max_record_size) + 1),
        }
    };
    whole &= grow_to(file, &mut bytes, end.min(len), len, chunk)?;
    let len = if whole { len } else { bytes.len() as u64 };
    Ok((bytes, len))
}

/// Reads more of `file` into `bytes` (its first bytes), so that it holds
/// at least `to` bytes: at least `chunk` more at a time, at most up to
/// `len`. False if the file ended before `to` (it shrank since `len` was
/// taken): `bytes` then holds all of it.
fn grow_to(
    file: &dyn ObjectReader,
    bytes: &mut Vec<u8>,
    to: u64,
    len: u64,
    chunk: u64,
) -> io::Result<bool> {
    let have = bytes.len() as u64;
    if to <= have {
        return Ok(true);
    }
    let want = to.max(have + chunk).min(len);
    let want = usize::try_from(want)
        .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "a log larger than memory"))?;
    let from = bytes.len();
    bytes.resize(want, 0);
    let got = read_at_most(file, &mut bytes[from..], from as u64)?;
    bytes.truncate(from + got);
    Ok(bytes.len() as u64 >= to)
}

/// Logs of at least this many bytes are read in two halves at once
/// ([`read_up_to`]).
pub(crate) const READ_IN_HALVES: usize = 1 << 20;

/// Logs of at most this many bytes are read whole by
/// [`LogReader::open_once`]: the 16-byte header, the first record and a
/// short conversation's every record, in one read.
pub(crate) const READ_WHOLE_UP_TO: u64 = 64 << 10;

/// A log's bytes read at once ([`LogReader::open_once`]).
#[derive(Debug)]
pub(super) struct ReadOnce {
    pub(super) bytes: Vec<u8>,
}

impl ObjectReader for ReadOnce {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset).map_or(self.bytes.len(), |o| o.min(self.bytes.len()));
        let n = buf.len().min(self.bytes.len() - start);
        buf[..n].copy_from_slice(&self.bytes[start..start + n]);
        Ok(n)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.bytes.len() as u64)
    }
}

/// The log ends at `len`, before `offset`, a record boundary read earlier.
fn shrunk(path: &Path, offset: u64, len: u64) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        offset: len,
        expected: format!("a log at least {offset} bytes long (records were read up to there)"),
        found: format!("the file ends at {len}"),
    }
}

/// Checks the file header of an open log; returns its format.
pub(crate) fn check_header(file: &dyn ObjectReader, display: &Path) -> Result<LogFormat> {
    let mut header = [0u8; FILE_HEADER_LEN as usize];
    let mut got = 0;
    while got < header.len() {
        match file.read_at(&mut header[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(Error::Io {
                    op: "read",
                    path: display.to_path_buf(),
                    source,
                })
            }
        }
    }
    check_file_header(&header[..got]).map_err(|p| header_error(p, display))
}

/// The error that reports a bad file header of the log `display`.
pub(crate) fn header_error(problem: HeaderProblem, display: &Path) -> Error {
    match problem {
        HeaderProblem::Damaged(offset, expected, found) => Error::Corrupt {
            path: display.to_path_buf(),
            offset,
            expected: expected.to_string(),
            found,
        },
        HeaderProblem::Unsupported { version, flags } => Error::Unsupported {
            path: display.to_path_buf(),
            version,
            flags,
            supported: super::FORMAT_VERSION,
        },
    }
}

/// An iterator over the records of a log, one record in memory at a time.
///
/// It ends quietly at a clean end or a torn tail (for a reader, most likely a
/// batch being written right now: not yet visible). Damage is yielded once
/// as an [`Error::Corrupt`] (or [`Error::RecordTooLarge`]) naming the offset;
/// an I/O error is yielded once. Either ends the iteration.
#[derive(Debug)]
pub struct Records<'r> {
    reader: &'r LogReader,
    walker: Walker<'r>,
    position: u64,
    end: Option<LogEnd>,
    done: bool,
    rechecked: bool,
    interrupt: Option<&'r AtomicBool>,
}

impl<'r> Records<'r> {
    /// Makes the walk stop with [`Error::Interrupted`] soon after
    /// `interrupt` is set: it is looked at before each record and through
    /// the search after a bad header (every 64 Ki offsets), so a long log
    /// stops within a record, not at its end.
    pub fn interruptible(mut self, interrupt: &'r AtomicBool) -> Self {
        self.interrupt = Some(interrupt);
        self.walker = self.walker.with_interrupt(self.interrupt);
        self
    }
}

impl Records<'_> {
    /// Offset of the next record to read: after the iteration, where a later
    /// [`LogReader::records_from`] resumes to see what was appended since.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// How the walk ended, once the iterator returned `None` or an error of
    /// damage (`None` before, and after an I/O error).
    pub fn end(&self) -> Option<&LogEnd> {
        self.end.as_ref()
    }

    /// The file length this walk is bounded by.
    pub fn limit(&self) -> u64 {
        self.walker.limit()
    }
}

/// A record as [`Records::next_ref`] hands it out: its place and checksum,
/// and its content borrowed from the walk's buffer instead of copied.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// Offset of the record in the file.
    pub offset: u64,
    /// Bytes of the record on disk (header and content).
    pub len: u64,
    /// The record's checksum ([`RecordHeader::record_crc`]: version 1, the
    /// payload crc; version 2, the header crc), as stored and checked.
    pub record_crc: u32,
    /// Its content: every checksum matched and its structure is sound.
    pub content: ContentRef<'a>,
}

/// The content of a record, borrowed.
#[derive(Debug, Clone, Copy)]
pub enum ContentRef<'a> {
    /// Version 1: the payload, one batch (format-spec.md section 3).
    Batch(&'a [u8]),
    /// Version 2: the heads section and the body section.
    Split {
        /// The heads section.
        heads: &'a [u8],
        /// The body section, as stored.
        body: &'a [u8],
        /// The body's checksum, as stored in the record header.
        body_crc: u32,
        /// Whether the walk checked the body against it (else whoever uses
        /// the body must).
        body_checked: bool,
    },
}

impl<'a> RecordRef<'a> {
    /// Hands each entry of a version 1 batch to `each`, in order (the
    /// structure was checked when the record was read; an error here means
    /// the bytes changed in memory, and is reported as damage all the
    /// same). A version 2 record has no batch: an error.
    pub fn each_entry(&self, each: impl FnMut(&'a [u8])) -> Result<(), String> {
        match self.content {
            ContentRef::Batch(payload) => walk_batch(payload, each).map(|_| ()),
            ContentRef::Split { .. } => {
                Err("a version 2 record (heads and body), not a batch of entries".into())
            }
        }
    }
}

/// The content of the record whose header is `header`, from its bytes after
/// the header.
pub(crate) fn content_ref<'a>(
    header: &RecordHeader,
    content: &'a [u8],
    body_checked: bool,
) -> ContentRef<'a> {
    match *header {
        RecordHeader::V1 { .. } => ContentRef::Batch(content),
        RecordHeader::V2 {
            heads_len,
            body_crc,
            ..
        } => {
            let (heads, body) = content.split_at((heads_len as usize).min(content.len()));
            ContentRef::Split {
                heads,
                body,
                body_crc,
                body_checked,
            }
        }
    }
}

impl Records<'_> {
    /// The next record, its payload borrowed until the next call: like
    /// [`Iterator::next`] without copying each entry into a vector of its
    /// own (for readers that decode every entry of a log at once).
    pub fn next_ref(&mut self) -> Option<Result<RecordRef<'_>>> {
        let (offset, header, body_checked) = match self.step_record()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let len = header.record_len();
        // `step_record` has just read and checked these bytes: they are in
        // the walker's buffer, so this is no second read.
        match self
            .walker
            .get(offset + header.header_len(), header.content_len())
        {
            Ok(Some(content)) => Some(Ok(RecordRef {
                offset,
                len,
                record_crc: header.record_crc(),
                content: content_ref(&header, content, body_checked),
            })),
            Ok(None) => {
                self.done = true;
                Some(Err(shrunk(&self.reader.path, offset + len, offset)))
            }
            Err(source) => {
                self.done = true;
                Some(Err(self.reader.io("read", source)))
            }
        }
    }

    /// Reads and checks the record at the current position and moves past
    /// it; returns its offset, header and whether its body was checked.
    fn step_record(&mut self) -> Option<Result<(u64, RecordHeader, bool)>> {
        if self.done {
            return None;
        }
        let offset = self.position;
        let path = &self.reader.path;
        match self.walker.step(offset) {
            Ok(Step::Record {
                header,
                body_checked,
                ..
            }) => {
                self.position += header.record_len();
                Some(Ok((offset, header, body_checked)))
            }
            Ok(Step::End(LogEnd::Damaged { .. })) if !self.rechecked => {
                // Confirm damage with a fresh look before reporting it: if a
                // writer cut a torn tail inside our snapshot and appended over
                // it while we read, the bytes we saw were never one state of
                // the file. Real damage is still there on the second look.
                self.rechecked = true;
                let file = &*self.reader.file;
                match file.len() {
                    Ok(len) if len >= offset => {
                        self.walker = Walker::new(
                            file,
                            self.reader.format.framing,
                            len,
                            self.reader.options.max_record_size,
                        )
                        .with_proven_end(self.reader.proven_end)
                        .with_interrupt(self.interrupt);
                        self.step_record()
                    }
                    Ok(len) => {
                        self.done = true;
                        Some(Err(shrunk(path, offset, len)))
                    }
                    Err(source) => {
                        self.done = true;
                        Some(Err(Error::Io {
                            op: "stat",
                            path: path.clone(),
                            source,
                        }))
                    }
                }
            }
            Ok(Step::End(end)) => {
                self.done = true;
                let err = match &end {
                    LogEnd::Damaged { offset, damage } => Some(damage.to_error(path, *offset)),
                    LogEnd::Clean { .. } | LogEnd::TornTail { .. } => None,
                };
                self.end = Some(end);
                err.map(Err)
            }
            Err(source) => {
                self.done = true;
                Some(Err(super::read_error("read", path.clone(), source)))
            }
        }
    }
}

impl Iterator for Records<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        let (offset, len, record_crc, content) = match self.next_ref()? {
            Ok(r) => (
                r.offset,
                r.len,
                r.record_crc,
                match r.content {
                    ContentRef::Batch(payload) => decode_batch(payload).map(RecordContent::Batch),
                    ContentRef::Split { heads, body, .. } => Ok(RecordContent::Split {
                        heads: heads.to_vec(),
                        body: body.to_vec(),
                    }),
                },
            ),
            Err(e) => return Some(Err(e)),
        };
        match content {
            Ok(content) => Some(Ok(Record {
                offset,
                len,
                record_crc,
                content,
            })),
            Err(found) => {
                // `step` checked the structure; this cannot happen, but
                // data from disk never panics.
                self.done = true;
                let damage = super::Damage::Malformed(found);
                let err = damage.to_error(&self.reader.path, offset);
                self.end = Some(LogEnd::Damaged { offset, damage });
                Some(Err(err))
            }
        }
    }
}
