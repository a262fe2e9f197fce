//! The single writer of a log: create, lock, recover, append.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use jpstore_blobstore::backend::{
    Backend, BackendError, LockGuard, LockKind, LogObject, ObjectReader, Put,
};

use super::reader::{check_header, content_ref, ContentRef, LogReader};
use super::record::{encode_file_header, FramedRecord, LogFormat, FILE_HEADER_LEN};
use super::scan::{LogEnd, Step, Walker};
use super::LogOptions;
use crate::error::{Error, Result};

/// A torn tail the writer cut off when it opened the log (serialized as
/// its fields, the path as its lossy UTF-8 form).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CutTail {
    /// Where the cut bytes started (the new end of the log).
    pub offset: u64,
    /// How many bytes were cut.
    pub len: u64,
    /// Where a synced copy of the cut bytes was kept (relative to the
    /// storage root), with a note beside it (`<copy>.note`).
    #[serde(serialize_with = "lossy_path")]
    pub copy: PathBuf,
}

/// A path as its lossy UTF-8 form.
fn lossy_path<S: serde::Serializer>(
    path: &Path,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_str(&path.to_string_lossy())
}

/// What a writer knows when it recovers a log it opens: how far the log is
/// known to have been whole, and where a torn tail it cuts is copied first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Every record ending at or before this offset was once whole
    /// (acknowledged after its sync, or published with the log); a bad
    /// record before it is damage and is never cut. 0: nothing is known.
    pub proven_end: u64,
    /// Directory (relative to the storage root) for the copy of a cut tail.
    pub copy_dir: PathBuf,
    /// The copy is `<copy_dir>/<copy_prefix>.tail-<offset>.<secs>-<nanos>`.
    pub copy_prefix: String,
}

impl Recovery {
    /// Nothing known of the log; a cut tail is copied next to it, as
    /// `<log name>.tail-<offset>.<secs>-<nanos>`.
    pub fn beside(path: &Path) -> Recovery {
        Recovery {
            proven_end: 0,
            copy_dir: jpstore_blobstore::storage::parent_dir(path).to_path_buf(),
            copy_prefix: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }
}

/// The one writer of a log, holding its exclusive lock until dropped.
///
/// [`LogWriter::append`] writes one record at the end and syncs it; its cost
/// does not depend on the length of the log. A failed write or sync poisons
/// the handle: every later append fails with [`Error::Poisoned`].
#[derive(Debug)]
pub struct LogWriter {
    // Field order: the log is closed before the lock is released (readers
    // made by `reader` are the writer's own, dropped before it).
    file: Arc<dyn LogObject>,
    _lock: Box<dyn LockGuard>,
    path: PathBuf,
    end: u64,
    max_record_size: u32,
    format: LogFormat,
    poisoned: bool,
    cut: Option<CutTail>,
    last: Option<(u64, u32)>,
    /// The end of the log as of the last successful sync of the whole
    /// file by this writer (publication, a cut, an append); 0 if it has
    /// not synced (records it found may still be only in the page cache).
    synced_end: u64,
}

/// Where the records of a log being created will lie, for a caller that
/// records it before the log is published ([`LogWriter::create_published`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// The end of the last record: the length of the new log.
    pub end: u64,
    /// Offset and record checksum ([`RecordHeader::record_crc`]) of the
    /// last record (`None`: no record).
    ///
    /// [`RecordHeader::record_crc`]: super::RecordHeader::record_crc
    pub last: Option<(u64, u32)>,
    /// Record checksum of the first record.
    pub first_crc: Option<u32>,
}

impl LogWriter {
    /// Creates a new version 1 log at `path` (its directory must exist)
    /// and opens it for writing. The log appears whole (a synced, valid
    /// header) or not at all. Fails with [`Error::AlreadyExists`] if the
    /// name is taken.
    pub fn create(backend: &dyn Backend, path: &Path, options: LogOptions) -> Result<Self> {
        Self::create_with::<&[u8]>(backend, path, options, &[])
    }

    /// Like [`LogWriter::create`], but the new log holds `first` as its first
    /// record from the moment it appears (an empty `first` writes no record).
    /// The log appears with that record or not at all, so a conversation is
    /// never seen without what its creator wrote first.
    pub fn create_with<E: AsRef<[u8]>>(
        backend: &dyn Backend,
        path: &Path,
        options: LogOptions,
        first: &[E],
    ) -> Result<Self> {
        let records: &[&[E]] = if first.is_empty() { &[] } else { &[first] };
        Self::create_with_records(backend, path, options, records)
    }

    /// Like [`LogWriter::create_with`] with any number of records (each a
    /// non-empty batch): the log appears with all of them or not at all.
    pub fn create_with_records<E: AsRef<[u8]>>(
        backend: &dyn Backend,
        path: &Path,
        options: LogOptions,
        records: &[&[E]],
    ) -> Result<Self> {
        Self::create_flagged(backend, path, options, 0, records)
    }

    /// Like [`LogWriter::create_with_records`], with version 1 header
    /// `flags` (such as [`FLAG_PACKED`](super::FLAG_PACKED): the entries
    /// layer decides what its records may hold).
    pub fn create_flagged<E: AsRef<[u8]>>(
        backend: &dyn Backend,
        path: &Path,
        options: LogOptions,
        flags: u16,
        records: &[&[E]],
    ) -> Result<Self> {
        let mut framed = Vec::with_capacity(records.len());
        for batch in records {
            if batch.is_empty() {
                return Err(Error::EmptyBatch {
                    path: backend.display(path),
                });
            }
            framed.push(frame_checked(
                backend.display(path),
                FramedRecord::batch(batch, options.max_record_size),
                options,
            )?);
        }
        Self::create_published(
            backend,
            path,
            options,
            LogFormat::v1(flags),
            &framed,
            &mut |_| Ok(()),
            &mut || {},
        )
    }

    /// The bytes of a whole log of `format` holding `records` (each framed
    /// for that format), and where its records lie; `shown` names the log
    /// in an error.
    pub fn file_bytes(
        format: LogFormat,
        records: &[FramedRecord],
        shown: &Path,
    ) -> Result<(Vec<u8>, Published)> {
        let mut bytes = encode_file_header(format).to_vec();
        let mut published = Published {
            end: 0,
            last: None,
            first_crc: None,
        };
        for record in records {
            if record.framing != format.framing {
                return Err(Error::WrongFraming {
                    path: shown.to_path_buf(),
                    log: format.framing.version(),
                    record: record.framing.version(),
                });
            }
            published.last = Some((bytes.len() as u64, record.record_crc));
            published.first_crc.get_or_insert(record.record_crc);
            bytes.extend_from_slice(&record.bytes);
        }
        published.end = bytes.len() as u64;
        Ok((bytes, published))
    }

    /// Creates a new log of `format` holding `records` (each framed for
    /// that format: [`FramedRecord::batch`] or [`FramedRecord::split`]), as
    /// [`LogWriter::create_with_records`] does; holding the lock, once it
    /// is known that the log does not exist yet, and before it is
    /// published, calls `before_publish` with where its records lie (an
    /// error there stops the creation; nothing is published). If that or
    /// the publication fails, calls `abandon`, still holding the lock, so
    /// that the caller can remove what it made for the log (its directory,
    /// the lock file) before anyone else can take the lock.
    pub fn create_published(
        backend: &dyn Backend,
        path: &Path,
        options: LogOptions,
        format: LogFormat,
        records: &[FramedRecord],
        before_publish: &mut dyn FnMut(&Published) -> Result<()>,
        abandon: &mut dyn FnMut(),
    ) -> Result<Self> {
        let (bytes, published) = Self::file_bytes(format, records, &backend.display(path))?;
        let absent = || match backend.head(path) {
            Ok(_) => Err(Error::AlreadyExists {
                path: backend.display(path),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io {
                op: "stat",
                path: backend.display(path),
                source,
            }),
        };
        // A log that exists is refused before its lock is waited for: its
        // writer may be this very thread (a conversation handle held while
        // another conversation is made, whose id from the time is taken
        // first by the held one). Again under the lock: another creator
        // may have published meanwhile.
        absent()?;
        let lock = lock_new(backend, path)?;
        absent()?;
        let put = before_publish(&published).and_then(|()| {
            backend
                .put_if_absent(path, &bytes, &temp_path(path))
                .map_err(|e| Error::from_backend(backend, e))
        });
        match put {
            Ok(Put::Created) => {}
            Ok(Put::Existed) => {
                return Err(Error::AlreadyExists {
                    path: backend.display(path),
                })
            }
            Err(e) => {
                abandon();
                return Err(e);
            }
        }
        let mut writer = Self::open_locked(backend, path, options, lock, &Recovery::beside(path))?;
        // Published synced: every record in it is whole on disk.
        writer.synced_end = writer.end;
        Ok(writer)
    }

    /// Opens an existing log for writing, waiting for the writer lock.
    ///
    /// Once the lock is held, reads the whole log to find its end: a torn
    /// tail is copied aside and cut (see [`LogWriter::cut_tail`]); any other
    /// damage is an error and nothing is changed.
    pub fn open(backend: &dyn Backend, path: &Path, options: LogOptions) -> Result<Self> {
        Self::open_recovering(backend, path, options, &Recovery::beside(path))
    }

    /// Like [`LogWriter::open`], with what the caller knows of the log: a
    /// bad record before `recovery.proven_end` is damage (an error, nothing
    /// cut), and a torn tail is copied into `recovery.copy_dir` before it is
    /// cut.
    pub fn open_recovering(
        backend: &dyn Backend,
        path: &Path,
        options: LogOptions,
        recovery: &Recovery,
    ) -> Result<Self> {
        let lock = lock_waiting(backend, path)?;
        Self::open_locked(backend, path, options, lock, recovery)
    }

    /// Like [`LogWriter::open_recovering`], with the writer lock `lock` the
    /// caller took ([`lock_waiting`]) and `recovery` it computed holding it
    /// (so that its evidence is of the log the writer opens: nobody
    /// replaces the name while the lock is held).
    pub fn open_under_lock(
        backend: &dyn Backend,
        path: &Path,
        options: LogOptions,
        lock: Box<dyn LockGuard>,
        recovery: &Recovery,
    ) -> Result<Self> {
        Self::open_locked(backend, path, options, lock, recovery)
    }

    /// Like [`LogWriter::open`], but returns `Ok(None)` at once if another
    /// writer holds the lock.
    pub fn try_open(
        backend: &dyn Backend,
        path: &Path,
        options: LogOptions,
    ) -> Result<Option<Self>> {
        match lock(backend, path, false)? {
            Some(lock) => {
                Self::open_locked(backend, path, options, lock, &Recovery::beside(path)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn open_locked(
        backend: &dyn Backend,
        path: &Path,
        options: LogOptions,
        lock: Box<dyn LockGuard>,
        recovery: &Recovery,
    ) -> Result<Self> {
        // The log is opened only now that the lock is held, so whatever
        // another writer did before releasing it (appends, a repair that
        // replaced the file) is what we read.
        let file = backend.open_log(path).map_err(|source| Error::Io {
            op: "open",
            path: backend.display(path),
            source,
        })?;
        Self::open_file_under_lock(backend, path, options, lock, file, recovery, &mut |_, _| {})
    }

    /// Like [`LogWriter::open_under_lock`], of the log `file` the caller
    /// opened holding `lock` ([`Backend::open_log`]): so that the evidence
    /// in `recovery` is checked against the file the writer appends to, and
    /// a log on an object store is listed once. `on_record` sees the offset
    /// and the content of every whole record the walk checks (below a torn
    /// tail), in order: what a caller learns of them costs no second read.
    pub fn open_file_under_lock(
        backend: &dyn Backend,
        path: &Path,
        options: LogOptions,
        lock: Box<dyn LockGuard>,
        file: Box<dyn LogObject>,
        recovery: &Recovery,
        on_record: &mut dyn FnMut(u64, ContentRef<'_>),
    ) -> Result<Self> {
        let display = backend.display(path);
        let io = |op, source| Error::Io {
            op,
            path: display.clone(),
            source,
        };
        let file: Arc<dyn LogObject> = Arc::from(file);
        let format = check_header(file.as_reader(), &display)?;
        let len_of_file = file.len().map_err(|e| io("stat", e))?;
        let mut walker = Walker::new(
            file.as_reader(),
            format.framing,
            len_of_file,
            options.max_record_size,
        )
        .with_proven_end(recovery.proven_end);
        let mut pos = FILE_HEADER_LEN;
        let mut last = None;
        let end = loop {
            match walker.step(pos).map_err(|e| io("read", e))? {
                Step::Record {
                    header,
                    body_checked,
                    ..
                } => {
                    // The record's bytes are still in the walker's buffer.
                    if let Some(content) = walker
                        .get(pos + header.header_len(), header.content_len())
                        .map_err(|e| io("read", e))?
                    {
                        on_record(pos, content_ref(&header, content, body_checked));
                    }
                    last = Some((pos, header.record_crc()));
                    pos += header.record_len();
                }
                Step::End(end) => break end,
            }
        };
        // The end (clean, torn or damaged) is where the last whole record
        // ends.
        assert_eq!(end.valid_end(), pos, "the log's end after its last record");
        let mut synced_end = 0;
        let cut = match end {
            LogEnd::Clean { .. } => None,
            LogEnd::TornTail { offset, len } => {
                assert_eq!(offset + len, len_of_file, "a torn tail runs to the end");
                // Nothing proves these bytes were ever a whole record, but
                // a wrong guess must lose nothing: a synced copy first.
                let copy = copy_tail(backend, file.as_reader(), path, recovery, offset, len)?;
                // The new (smaller) length is durable before a record is
                // written over the cut bytes.
                file.truncate(offset)
                    .map_err(|e| Error::from_backend(backend, e))?;
                synced_end = offset;
                Some(CutTail { offset, len, copy })
            }
            LogEnd::Damaged { offset, damage } => return Err(damage.to_error(&display, offset)),
        };
        Ok(LogWriter {
            file,
            _lock: lock,
            path: display,
            end: pos,
            max_record_size: options.max_record_size,
            format,
            poisoned: false,
            cut,
            last,
            synced_end,
        })
    }

    /// The format of the log's header (framing and flags).
    pub fn format(&self) -> LogFormat {
        self.format
    }

    /// The log as this writer's handle reads it (what it appended
    /// included).
    pub fn file(&self) -> &dyn ObjectReader {
        self.file.as_reader()
    }

    /// A reader of the log through this writer's handle (no other open of
    /// the log: on an object store, no other listing), with `proven_end`.
    pub fn reader(&self, options: LogOptions, proven_end: u64) -> Result<LogReader> {
        LogReader::over(
            Box::new(SharedLog(Arc::clone(&self.file))),
            self.path.clone(),
            options,
        )
        .map(|r| r.with_proven_end(proven_end))
    }

    /// The flags of the log's header (version 1; 0 in version 2).
    pub fn flags(&self) -> u16 {
        self.format.flags
    }

    /// The most content a record of this writer may hold
    /// ([`LogOptions::max_record_size`]).
    pub fn max_record_size(&self) -> u32 {
        self.max_record_size
    }

    /// Appends one batch as one version 1 record and makes it durable (one
    /// `sync_data`). Returns the offset of the record. When this returns
    /// `Ok`, the batch is durable; when it returns an error, the batch is
    /// either absent after recovery or (if the bytes reached the disk despite
    /// the error) present whole, never partly.
    ///
    /// A batch larger than the record size limit, or an empty one, is refused
    /// before anything is written (the writer stays usable), and so is any
    /// batch to a version 2 log ([`Error::WrongFraming`]:
    /// [`LogWriter::append_split`] appends there).
    pub fn append<E: AsRef<[u8]>>(&mut self, entries: &[E]) -> Result<u64> {
        self.check_usable()?;
        if entries.is_empty() {
            return Err(Error::EmptyBatch {
                path: self.path.clone(),
            });
        }
        let record = frame_checked(
            self.path.clone(),
            FramedRecord::batch(entries, self.max_record_size),
            LogOptions {
                max_record_size: self.max_record_size,
            },
        )?;
        self.append_framed(&record)
    }

    /// Appends one version 2 record of a heads section and a body section
    /// and makes it durable (one `sync_data`), as [`LogWriter::append`]
    /// does: refused before anything is written if the sections together
    /// exceed the record size limit or the log is of version 1.
    pub fn append_split(&mut self, heads: &[u8], body: &[u8]) -> Result<u64> {
        self.check_usable()?;
        let record = frame_checked(
            self.path.clone(),
            FramedRecord::split(heads, body, self.max_record_size),
            LogOptions {
                max_record_size: self.max_record_size,
            },
        )?;
        self.append_framed(&record)
    }

    /// Appends a record framed ahead ([`FramedRecord::batch`] or
    /// [`FramedRecord::split`] of this log's framing) and makes it durable.
    pub fn append_framed(&mut self, record: &FramedRecord) -> Result<u64> {
        self.check_usable()?;
        if record.framing != self.format.framing {
            return Err(Error::WrongFraming {
                path: self.path.clone(),
                log: self.format.framing.version(),
                record: record.framing.version(),
            });
        }
        // Records go after the header, after the last record, and at or
        // past what is synced (format-spec.md 3, "Appending").
        assert!(
            self.end >= FILE_HEADER_LEN,
            "a record inside the file header"
        );
        assert!(
            self.last.is_none_or(|(offset, _)| offset < self.end),
            "a record at {} before the last one",
            self.end
        );
        assert!(self.synced_end <= self.end, "synced past the end");
        record.assert_framed();
        // From here on a failure leaves the file in an unknown state (part of
        // the record written, or dirty pages dropped by a failed sync):
        // poison, never retry. Reopening recovers from what is on disk.
        match self.file.append(self.end, &record.bytes) {
            Ok(()) => {}
            // A conditional create that lost to another writer (an object
            // store): nothing was written.
            Err(BackendError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                self.poisoned = true;
                return Err(Error::AppendConflict {
                    path: self.path.clone(),
                    offset: self.end,
                    source,
                });
            }
            Err(BackendError::Io { op, source, .. }) => {
                self.poisoned = true;
                return Err(Error::Io {
                    op,
                    path: self.path.clone(),
                    source,
                });
            }
            Err(BackendError::Unsynced { source, .. }) => {
                self.poisoned = true;
                return Err(Error::SyncFailed {
                    path: self.path.clone(),
                    source,
                });
            }
            // A failure this writer does not know: what is durable is
            // unknown, as after a failed sync.
            Err(other) => {
                self.poisoned = true;
                return Err(Error::SyncFailed {
                    path: self.path.clone(),
                    source: std::io::Error::new(other.kind(), other.to_string()),
                });
            }
        }
        let offset = self.end;
        self.last = Some((offset, record.record_crc));
        self.end += record.bytes.len() as u64;
        self.synced_end = self.end;
        Ok(offset)
    }

    /// An error if an earlier failure poisoned this writer.
    fn check_usable(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// The offset and record checksum of the last record this writer read
    /// when it opened the log (from its resume point on) or appended.
    pub fn last_record(&self) -> Option<(u64, u32)> {
        self.last
    }

    /// The end of the log as of this writer's last successful sync of the
    /// whole file (publication, a cut tail, an append), or 0 if it has not
    /// synced: every record ending there is whole on disk.
    pub fn synced_end(&self) -> u64 {
        self.synced_end
    }

    /// Offset where the next record will be written (the length of the log).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The torn tail cut off when this writer opened the log, if any.
    pub fn cut_tail(&self) -> Option<&CutTail> {
        self.cut.as_ref()
    }

    /// Whether an earlier failed write or sync poisoned this handle.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The log file, as the storage displays it.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The record `framed` produced, or [`Error::RecordTooLarge`] for the size
/// it refused.
fn frame_checked(
    path: PathBuf,
    framed: std::result::Result<FramedRecord, u64>,
    options: LogOptions,
) -> Result<FramedRecord> {
    framed.map_err(|size| Error::RecordTooLarge {
        path,
        offset: None,
        size,
        max: options.max_record_size.into(),
    })
}

/// Copies the bytes `[offset, offset + len)` of the log `file` (at `path`)
/// into a new file of `recovery.copy_dir`, synced and published with a
/// note beside it, before the writer cuts them.
fn copy_tail(
    backend: &dyn Backend,
    file: &dyn ObjectReader,
    path: &Path,
    recovery: &Recovery,
    offset: u64,
    len: u64,
) -> Result<PathBuf> {
    let read_error = |source| Error::Io {
        op: "read the torn tail of",
        path: backend.display(path),
        source,
    };
    let size = usize::try_from(len).map_err(|_| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            "torn tail larger than memory",
        ))
    })?;
    let mut bytes = vec![0u8; size];
    jpstore_blobstore::backend::read_exact_at(file, &mut bytes, offset).map_err(read_error)?;
    // The directory's name is made durable too: the copy must survive a
    // crash before the bytes are cut.
    backend
        .create_prefix(&recovery.copy_dir)
        .map_err(|e| Error::from_backend(backend, e))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let name = format!(
        "{}.tail-{offset}.{}-{:09}",
        recovery.copy_prefix,
        now.as_secs(),
        now.subsec_nanos()
    );
    let copy = recovery.copy_dir.join(&name);
    let note = recovery.copy_dir.join(format!("{name}.note"));
    let text = format!(
        "{len} bytes cut at offset {offset} of {}: an incomplete record after the last whole one, \
         left by an append that did not complete (a crash, or a write that failed, such as on a full disk). \
         Nothing proved it had ever been whole (no head cache covered it and it was not published with the log), \
         so the writer cut it to append again; these are its bytes.\n",
        backend.display(path).display()
    );
    for (to, data) in [(&copy, &bytes[..]), (&note, text.as_bytes())] {
        match backend.put_if_absent(to, data, &temp_path(to)) {
            Ok(Put::Created) => {}
            Ok(Put::Existed) => {
                return Err(Error::AlreadyExists {
                    path: backend.display(to),
                })
            }
            Err(e) => return Err(Error::from_backend(backend, e)),
        }
    }
    Ok(copy)
}

/// The sidecar lock file of a log: `<log name>.lock` next to it.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(".lock");
    PathBuf::from(name)
}

/// Opens (creating if needed) and locks the sidecar lock file; `None` if
/// `wait` is false and another writer holds it.
///
/// The lock is returned only once it is proven to be the one at the name:
/// a writer that waited while the log was removed (with its lock file) got
/// the lock of a file no one else will ever lock again, and a log created
/// since under the same name has a new lock file that another writer may
/// hold. Such a lock is [`Error::LockReplaced`]. While we hold the lock,
/// nobody removes or replaces the name (format-spec.md 3, "The writer
/// lock"), so the log opened next is the one the lock guards.
fn lock(backend: &dyn Backend, path: &Path, wait: bool) -> Result<Option<Box<dyn LockGuard>>> {
    lock_as(backend, path, wait, false)
}

/// [`lock`], for a caller that only reads under it (`to_read`:
/// [`Backend::lock_to_read`]) or a writer.
fn lock_as(
    backend: &dyn Backend,
    path: &Path,
    wait: bool,
    to_read: bool,
) -> Result<Option<Box<dyn LockGuard>>> {
    let lock_path = lock_path(path);
    let io = |op, source| Error::Io {
        op,
        path: backend.display(&lock_path),
        source,
    };
    let locked = if to_read {
        backend.lock_to_read(&lock_path, LockKind::Exclusive, wait)
    } else {
        backend.lock(&lock_path, LockKind::Exclusive, wait)
    };
    let Some(file) = locked.map_err(|e| io("lock", e))? else {
        return Ok(None);
    };
    if !file.is_current().map_err(|e| io("stat", e))? {
        return Err(Error::LockReplaced {
            path: backend.display(path),
            lock: backend.display(&lock_path),
        });
    }
    Ok(Some(file))
}

/// Takes the sidecar lock of the log at `path` if no writer holds it;
/// `Ok(None)` if one does.
pub fn try_lock(backend: &dyn Backend, path: &Path) -> Result<Option<Box<dyn LockGuard>>> {
    lock(backend, path, false)
}

/// [`try_lock`] for a caller that only reads while it holds the lock
/// (fsck's second look at a torn tail): it needs no write where the lock
/// file exists ([`Backend::lock_to_read`]); where it does not and cannot
/// be made (a read-only file system, another user's store), the error is
/// one of `Error::is_read_only`.
pub fn try_lock_to_read(backend: &dyn Backend, path: &Path) -> Result<Option<Box<dyn LockGuard>>> {
    lock_as(backend, path, false, true)
}

/// Waits for the sidecar lock of the log at `path` (the lock a
/// [`LogWriter`] holds), for operations that must exclude the writer
/// without opening the log, such as removing a conversation.
pub fn lock_waiting(backend: &dyn Backend, path: &Path) -> Result<Box<dyn LockGuard>> {
    lock(backend, path, true)?.ok_or_else(|| Error::Io {
        op: "lock",
        path: backend.display(&lock_path(path)),
        source: std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            "the storage backend returned from a waiting lock without the lock",
        ),
    })
}

/// Waits for the sidecar lock of `path`, a log about to be created in a
/// directory just made: a lock file removed while we waited (its log's
/// directory removed and perhaps made again) guards nothing, so the one at
/// the name is taken; a directory removed before we locked (gc removes one
/// that holds no log, format-spec.md 4.7) is made again, a few times at
/// most.
pub fn lock_new(backend: &dyn Backend, path: &Path) -> Result<Box<dyn LockGuard>> {
    let parent = jpstore_blobstore::storage::parent_dir(path);
    let mut remade = 0;
    loop {
        match lock_waiting(backend, path) {
            Err(Error::LockReplaced { .. }) => continue,
            Err(Error::Io { ref source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && remade < 8 =>
            {
                remade += 1;
                backend
                    .create_prefix(parent)
                    .map_err(|e| Error::from_backend(backend, e))?;
            }
            other => return other,
        }
    }
}

/// A writer's log handle, shared with a reader it makes.
#[derive(Debug)]
struct SharedLog(Arc<dyn LogObject>);

impl ObjectReader for SharedLog {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.as_reader().read_at(buf, offset)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.0.as_reader().len()
    }
}

/// A temp name next to `path`, unique within the machine:
/// `<log name>.tmp.<pid>.<nanos>.<counter>`.
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut name = OsString::from(path.as_os_str());
    name.push(format!(
        ".tmp.{}.{nanos}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    PathBuf::from(name)
}
