//! The single writer of a log: create, lock, recover, append.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use jpstore_blobstore::storage::{
    publish_new_file, still_named, write_all_at, LockKind, OpenMode, Storage, StorageFile,
};

use super::reader::check_header;
use super::record::{encode_file_header, encode_record, payload_len, FILE_HEADER_LEN};
use super::scan::{LogEnd, Step, Walker};
use super::LogOptions;
use crate::error::{Error, Result};

/// A torn tail the writer cut off when it opened the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutTail {
    /// Where the cut bytes started (the new end of the log).
    pub offset: u64,
    /// How many bytes were cut.
    pub len: u64,
}

/// The one writer of a log, holding its exclusive lock until dropped.
///
/// [`LogWriter::append`] writes one record at the end and syncs it; its cost
/// does not depend on the length of the log. A failed write or sync poisons
/// the handle: every later append fails with [`Error::Poisoned`].
#[derive(Debug)]
pub struct LogWriter {
    // Field order: the log is closed before the lock is released.
    file: Box<dyn StorageFile>,
    _lock: Box<dyn StorageFile>,
    path: PathBuf,
    end: u64,
    max_record_size: u32,
    flags: u16,
    poisoned: bool,
    cut: Option<CutTail>,
    last: Option<(u64, u32)>,
}

impl LogWriter {
    /// Creates a new log at `path` (its directory must exist) and opens it
    /// for writing. The log appears whole (a synced, valid header) or not at
    /// all. Fails with [`Error::AlreadyExists`] if the name is taken.
    pub fn create(storage: &dyn Storage, path: &Path, options: LogOptions) -> Result<Self> {
        Self::create_with::<&[u8]>(storage, path, options, &[])
    }

    /// Like [`LogWriter::create`], but the new log holds `first` as its first
    /// record from the moment it appears (an empty `first` writes no record).
    /// The log appears with that record or not at all, so a conversation is
    /// never seen without what its creator wrote first.
    pub fn create_with<E: AsRef<[u8]>>(
        storage: &dyn Storage,
        path: &Path,
        options: LogOptions,
        first: &[E],
    ) -> Result<Self> {
        let records: &[&[E]] = if first.is_empty() { &[] } else { &[first] };
        Self::create_with_records(storage, path, options, records)
    }

    /// Like [`LogWriter::create_with`] with any number of records (each a
    /// non-empty batch): the log appears with all of them or not at all.
    pub fn create_with_records<E: AsRef<[u8]>>(
        storage: &dyn Storage,
        path: &Path,
        options: LogOptions,
        records: &[&[E]],
    ) -> Result<Self> {
        Self::create_flagged(storage, path, options, 0, records)
    }

    /// Like [`LogWriter::create_with_records`], with header `flags` (such as
    /// [`FLAG_PACKED`](super::FLAG_PACKED): the entries layer decides what
    /// its records may hold).
    pub fn create_flagged<E: AsRef<[u8]>>(
        storage: &dyn Storage,
        path: &Path,
        options: LogOptions,
        flags: u16,
        records: &[&[E]],
    ) -> Result<Self> {
        let mut bytes = encode_file_header(flags).to_vec();
        for batch in records {
            if batch.is_empty() {
                return Err(Error::EmptyBatch {
                    path: storage.display_path(path),
                });
            }
            let size = payload_len(batch).unwrap_or(u64::MAX);
            if size > u64::from(options.max_record_size) {
                return Err(Error::RecordTooLarge {
                    path: storage.display_path(path),
                    offset: None,
                    size,
                    max: options.max_record_size.into(),
                });
            }
            bytes.extend_from_slice(&encode_record(batch));
        }
        // A lock file removed while we waited (its log's directory removed
        // and perhaps made again) guards nothing: take the one at the name.
        let lock = loop {
            match lock_waiting(storage, path) {
                Err(Error::LockReplaced { .. }) => continue,
                other => break other?,
            }
        };
        let tmp = temp_path(path);
        match publish_new_file(storage, &tmp, path, &bytes) {
            Ok(true) => {}
            Ok(false) => {
                return Err(Error::AlreadyExists {
                    path: storage.display_path(path),
                })
            }
            Err(e) => return Err(Error::from_publish(storage, e)),
        }
        Self::open_locked(storage, path, options, lock, FILE_HEADER_LEN)
    }

    /// Opens an existing log for writing, waiting for the writer lock.
    ///
    /// Once the lock is held, reads the whole log to find its end: a torn
    /// tail is cut (see [`LogWriter::cut_tail`]); any other damage is an
    /// error and nothing is changed.
    pub fn open(storage: &dyn Storage, path: &Path, options: LogOptions) -> Result<Self> {
        let lock = lock_waiting(storage, path)?;
        Self::open_locked(storage, path, options, lock, FILE_HEADER_LEN)
    }

    /// Like [`LogWriter::open`], but returns `Ok(None)` at once if another
    /// writer holds the lock.
    pub fn try_open(
        storage: &dyn Storage,
        path: &Path,
        options: LogOptions,
    ) -> Result<Option<Self>> {
        match lock(storage, path, false)? {
            Some(lock) => {
                Self::open_locked(storage, path, options, lock, FILE_HEADER_LEN).map(Some)
            }
            None => Ok(None),
        }
    }

    fn open_locked(
        storage: &dyn Storage,
        path: &Path,
        options: LogOptions,
        lock: Box<dyn StorageFile>,
        resume: u64,
    ) -> Result<Self> {
        // The log is opened only now that the lock is held, so whatever
        // another writer did before releasing it (appends, a repair that
        // replaced the file) is what we read.
        let display = storage.display_path(path);
        let io = |op, source| Error::Io {
            op,
            path: display.clone(),
            source,
        };
        let file = storage
            .open(path, OpenMode::ReadWrite)
            .map_err(|e| io("open", e))?;
        let flags = check_header(&*file, &display)?;
        let len = file.len().map_err(|e| io("stat", e))?;
        let mut walker = Walker::new(&*file, len, options.max_record_size);
        let mut pos = if resume <= len {
            resume
        } else {
            FILE_HEADER_LEN
        };
        let mut last = None;
        let end = loop {
            match walker.step(pos).map_err(|e| io("read", e))? {
                Step::Record { len, payload_crc } => {
                    last = Some((pos, payload_crc));
                    pos += len;
                }
                Step::End(end) => break end,
            }
        };
        let cut = match end {
            LogEnd::Clean { .. } => None,
            LogEnd::TornTail { offset, len } => {
                file.set_len(offset)
                    .map_err(|e| io("cut the torn tail of", e))?;
                // sync_all: the new (smaller) length must be durable before
                // a record is written over the cut bytes.
                file.sync_all().map_err(|source| Error::SyncFailed {
                    path: display.clone(),
                    source,
                })?;
                Some(CutTail { offset, len })
            }
            LogEnd::Damaged { offset, damage } => return Err(damage.to_error(&display, offset)),
        };
        Ok(LogWriter {
            file,
            _lock: lock,
            path: display,
            end: pos,
            max_record_size: options.max_record_size,
            flags,
            poisoned: false,
            cut,
            last,
        })
    }

    /// The flags of the log's header.
    pub fn flags(&self) -> u16 {
        self.flags
    }

    /// Appends one batch as one record and makes it durable (one
    /// `sync_data`). Returns the offset of the record. When this returns
    /// `Ok`, the batch is durable; when it returns an error, the batch is
    /// either absent after recovery or (if the bytes reached the disk despite
    /// the error) present whole, never partly.
    ///
    /// A batch larger than the record size limit, or an empty one, is refused
    /// before anything is written (the writer stays usable).
    pub fn append<E: AsRef<[u8]>>(&mut self, entries: &[E]) -> Result<u64> {
        if self.poisoned {
            return Err(Error::Poisoned {
                path: self.path.clone(),
            });
        }
        if entries.is_empty() {
            return Err(Error::EmptyBatch {
                path: self.path.clone(),
            });
        }
        let size = payload_len(entries).unwrap_or(u64::MAX);
        if size > u64::from(self.max_record_size) {
            return Err(Error::RecordTooLarge {
                path: self.path.clone(),
                offset: None,
                size,
                max: self.max_record_size.into(),
            });
        }
        let record = encode_record(entries);
        // From here on a failure leaves the file in an unknown state (part of
        // the record written, or dirty pages dropped by a failed sync):
        // poison, never retry. Reopening recovers from what is on disk.
        if let Err(source) = write_all_at(&*self.file, &record, self.end) {
            self.poisoned = true;
            return Err(Error::Io {
                op: "append to",
                path: self.path.clone(),
                source,
            });
        }
        if let Err(source) = self.file.sync_data() {
            self.poisoned = true;
            return Err(Error::SyncFailed {
                path: self.path.clone(),
                source,
            });
        }
        let offset = self.end;
        let payload_crc = u32::from_le_bytes([record[4], record[5], record[6], record[7]]);
        self.last = Some((offset, payload_crc));
        self.end += record.len() as u64;
        Ok(offset)
    }

    /// The offset and payload crc32 of the last record this writer read
    /// when it opened the log (from its resume point on) or appended.
    pub fn last_record(&self) -> Option<(u64, u32)> {
        self.last
    }

    /// Offset where the next record will be written (the length of the log).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The torn tail cut off when this writer opened the log, if any.
    pub fn cut_tail(&self) -> Option<CutTail> {
        self.cut
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
fn lock(storage: &dyn Storage, path: &Path, wait: bool) -> Result<Option<Box<dyn StorageFile>>> {
    let lock_path = lock_path(path);
    let io = |op, source| Error::Io {
        op,
        path: storage.display_path(&lock_path),
        source,
    };
    let file = storage
        .open(&lock_path, OpenMode::CreateOrOpen)
        .map_err(|e| io("open", e))?;
    if !file
        .lock(LockKind::Exclusive, wait)
        .map_err(|e| io("lock", e))?
    {
        return Ok(None);
    }
    if !still_named(storage, &*file, &lock_path).map_err(|e| io("stat", e))? {
        return Err(Error::LockReplaced {
            path: storage.display_path(path),
            lock: storage.display_path(&lock_path),
        });
    }
    Ok(Some(file))
}

/// Takes the sidecar lock of the log at `path` if no writer holds it;
/// `Ok(None)` if one does.
pub fn try_lock(storage: &dyn Storage, path: &Path) -> Result<Option<Box<dyn StorageFile>>> {
    lock(storage, path, false)
}

/// Waits for the sidecar lock of the log at `path` (the lock a
/// [`LogWriter`] holds), for operations that must exclude the writer
/// without opening the log, such as removing a conversation.
pub fn lock_waiting(storage: &dyn Storage, path: &Path) -> Result<Box<dyn StorageFile>> {
    lock(storage, path, true)?.ok_or_else(|| Error::Io {
        op: "lock",
        path: storage.display_path(&lock_path(path)),
        source: std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            "the storage backend returned from a waiting lock without the lock",
        ),
    })
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
