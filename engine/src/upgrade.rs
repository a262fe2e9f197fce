//! Upgrading a conversation's log from version 1 to version 2
//! ([`conversation`], format-spec.md 4.9): the same entries in the same
//! records, written as version 2, verified before they are published; the
//! version 1 log kept in quarantine. Crash-safe at every sync point: the
//! log's name always holds the old log or the new one, whole.

use std::path::PathBuf;

use jpstore_blobstore::{UpgradeOutcome, UpgradeProgress};
use serde::Serialize;

use crate::conversation::codec::LogEntry;
use crate::conversation::head::{self, Head};
use crate::conversation::read::open_reader;
use crate::conversation::sections::{self, finish, push_meta};
use crate::conversation::state::ConversationState;
use crate::conversation::{ConversationId, QUARANTINE_DIR};
use crate::error::{Error, Result};
use crate::event::binary::encode::RecordBuilder;
use crate::log::{
    encode_file_header, ContentRef, CutTail, FramedRecord, Framing, LogFormat, LogWriter, Recovery,
    Step, Walker, FIRST_RECORD, HEADS_SECTION_HEADER_LEN,
};
use crate::store::Store;

/// What [`conversation`] did, or would do (serialized as its
/// fields, paths as their lossy UTF-8 form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct UpgradeReport {
    /// The conversation.
    pub id: ConversationId,
    /// The framing version the log had.
    pub from_version: u16,
    /// Whether the log was (or, with `dry_run`, would be) rewritten: false
    /// when it is version 2 already.
    pub upgraded: bool,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// Records of the log (the same in both versions).
    pub records: u64,
    /// Entries and metadata patches of the log.
    pub entries: u64,
    /// Bytes of the log before.
    pub old_bytes: u64,
    /// Bytes of the log in version 2.
    pub new_bytes: u64,
    /// Where the version 1 log was kept (relative to the store root): the
    /// directory `quarantine/conversations/<id>.<secs>-<nanos>` holding it
    /// as `events.log`, with a `NOTE`.
    #[serde(serialize_with = "lossy_path")]
    pub kept: Option<PathBuf>,
    /// A torn tail cut when the log was opened (its bytes copied into
    /// quarantine first, as every writer does).
    pub cut_tail: Option<CutTail>,
}

/// What [`run`] did, or, dry, would do (the `--json` output of
/// `jp-store upgrade`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StoreUpgradeReport {
    /// Whether nothing was written.
    pub dry_run: bool,
    /// The packs of version 1 rewritten as version 2 (format-spec.md 2.12).
    pub packs: UpgradeOutcome,
    /// Logs rewritten (dry: to rewrite) as version 2.
    pub logs_upgraded: usize,
    /// Logs that were version 2 already.
    pub logs_current: usize,
    /// Every conversation, in id order.
    pub conversations: Vec<UpgradeReport>,
}

/// A step of [`run`], for progress lines.
#[derive(Debug, Clone, Copy)]
pub enum UpgradeStep<'a> {
    /// A pack was rewritten (the blob store's progress).
    Pack(UpgradeProgress),
    /// The log of a conversation was looked at: `done` of `total`.
    Log {
        /// Conversations done, this one included.
        done: usize,
        /// Conversations in all.
        total: usize,
        /// What was done with this one.
        report: &'a UpgradeReport,
    },
}

/// Why an upgrade stopped ([`run`], [`conversation`]). What was upgraded
/// before it stays upgraded; running it again continues.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpgradeError {
    /// Reading or writing the store failed.
    #[error(transparent)]
    Store(#[from] Error),
    /// The upgrade would replace conversation logs on a backend whose
    /// locks do not exclude writers on other machines (format-spec.md 4.9,
    /// 5.5).
    #[error("upgrade cannot rewrite the logs of {}: its locks do not exclude writers on other machines, so an append there could be lost under the new log; nothing was changed (upgrade the store on a file system, then copy it; --dry-run reports what would change)", store.display())]
    Unsafe {
        /// The store.
        store: std::path::PathBuf,
    },
}

impl From<jpstore_blobstore::Error> for UpgradeError {
    fn from(e: jpstore_blobstore::Error) -> UpgradeError {
        UpgradeError::Store(e.into())
    }
}

/// Upgrades `store` to the formats this build writes, as `jp-store
/// upgrade` does (format-spec.md 4.9): every pack of version 1 rewritten as
/// version 2, then every conversation's log of version 1 rewritten as
/// version 2 ([`conversation`]). Stops at the first failure (what was done
/// before it stays done, and running it again continues); a store that is
/// current is left as it is. With `dry_run`, nothing is written: the
/// report says what would be.
pub fn run(
    store: &Store,
    dry_run: bool,
    progress: &mut dyn FnMut(UpgradeStep<'_>),
) -> Result<StoreUpgradeReport, UpgradeError> {
    store.upgrade(dry_run, progress)
}

/// Rewrites the version 1 log of conversation `id` as version 2, holding
/// its writer lock, the version 1 log kept in quarantine (format-spec.md
/// 4.9); a version 2 log is left as it is. With `dry_run`, nothing is
/// written and no lock taken: the log is read, encoded and verified in
/// memory, and the report says what the upgrade would do.
pub fn conversation(
    store: &Store,
    id: &ConversationId,
    dry_run: bool,
) -> Result<UpgradeReport, UpgradeError> {
    store.upgrade_log(id, dry_run)
}

impl Store {
    /// Upgrades the whole store to the formats this build writes
    /// (format-spec.md 4.9): every pack of version 1 rewritten as version 2
    /// (`BlobStore::upgrade_packs`, with the store's import compression),
    /// then every conversation's log of version 1 rewritten as version 2
    /// ([`Store::upgrade_log`]). Stops at the first failure (what was done
    /// before it stays done, and running it again continues). A store that
    /// is current is left as it is: a second upgrade writes nothing.
    ///
    /// With `dry_run`, nothing is written: the report says what would be.
    pub(crate) fn upgrade(
        &self,
        dry_run: bool,
        progress: &mut dyn FnMut(UpgradeStep<'_>),
    ) -> Result<StoreUpgradeReport, UpgradeError> {
        self.check_upgrade_is_safe(dry_run)?;
        let compression = self.options().blobs.import_compression;
        let packs = self.blobs().upgrade_packs(dry_run, compression, &mut |p| {
            progress(UpgradeStep::Pack(p))
        })?;
        let ids = self.ids()?;
        let mut report = StoreUpgradeReport {
            dry_run,
            packs,
            logs_upgraded: 0,
            logs_current: 0,
            conversations: Vec::with_capacity(ids.len()),
        };
        for (i, id) in ids.iter().enumerate() {
            let done = match self.upgrade_log(id, dry_run) {
                Ok(done) => done,
                // Removed since the ids were listed: nothing to upgrade.
                Err(UpgradeError::Store(e)) if self.gone_since_listed(id, &e) => continue,
                Err(e) => return Err(e),
            };
            if done.upgraded {
                report.logs_upgraded += 1;
            } else {
                report.logs_current += 1;
            }
            progress(UpgradeStep::Log {
                done: i + 1,
                total: ids.len(),
                report: &done,
            });
            report.conversations.push(done);
        }
        Ok(report)
    }
}

/// A path as its lossy UTF-8 form, or `null`.
fn lossy_path<S: serde::Serializer>(
    path: &Option<PathBuf>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    match path {
        Some(p) => serializer.serialize_str(&p.to_string_lossy()),
        None => serializer.serialize_none(),
    }
}

/// Every record of a log decoded: its entries and metadata patches, in
/// order.
type Records = Vec<Vec<LogEntry>>;

impl Store {
    /// Rewrites the version 1 log of conversation `id` as version 2
    /// (format-spec.md 4.9). Holding the conversation's writer lock (so no
    /// append runs meanwhile; a torn tail is copied aside and cut first,
    /// damage refuses the upgrade and changes nothing), it reads every
    /// record, encodes the same entries in the same records as version 2,
    /// decodes the result and compares it with what it read, keeps the
    /// version 1 log in `quarantine/conversations/<id>.<secs>-<nanos>/`,
    /// publishes the version 2 log over the name (temp file synced, renamed
    /// over, directory synced), then the head cache covering it.
    ///
    /// With `dry_run`, nothing is written, no lock is taken and no tail is
    /// cut: the log is read, encoded and verified in memory, and the report
    /// says what the upgrade would do. A version 2 log is left as it is.
    pub(crate) fn upgrade_log(
        &self,
        id: &ConversationId,
        dry_run: bool,
    ) -> Result<UpgradeReport, UpgradeError> {
        let backend = &**self.backend();
        let options = self.options().log;
        self.check_upgrade_is_safe(dry_run)?;
        if dry_run {
            let reader = open_reader(backend, id, options)?;
            let from_version = reader.format().framing.version();
            if reader.format().framing == Framing::V2 {
                let log_end = reader.file().len().map_err(|source| Error::Io {
                    op: "stat",
                    path: reader.path().to_path_buf(),
                    source,
                })?;
                return Ok(self.current(id, from_version, log_end, true, None));
            }
            let (records, _, old_end) = read_v1(&reader)?;
            let (bytes, _, _) = self.encode_v2(id, &records)?;
            return Ok(UpgradeReport {
                id: id.clone(),
                from_version,
                upgraded: true,
                dry_run: true,
                records: records.len() as u64,
                entries: records.iter().map(|r| r.len() as u64).sum(),
                old_bytes: old_end,
                new_bytes: bytes.len() as u64,
                kept: None,
                cut_tail: None,
            });
        }
        // The writer lock, then the evidence under it: nobody replaces the
        // log while it is held.
        let lock = crate::conversation::writer_lock(backend, id)?;
        let recovery = Recovery {
            proven_end: head::proven_end(backend, id),
            copy_dir: std::path::Path::new(QUARANTINE_DIR).join("conversations"),
            copy_prefix: id.to_string(),
        };
        let writer = LogWriter::open_under_lock(backend, &id.log_path(), options, lock, &recovery)
            .map_err(|e| crate::conversation::removed_while_waiting(id, e))?;
        let cut_tail = writer.cut_tail().cloned();
        let from_version = writer.format().framing.version();
        if writer.format().framing == Framing::V2 {
            return Ok(self.current(id, from_version, writer.end(), false, cut_tail));
        }
        let reader = open_reader(backend, id, options)?;
        let (records, state, old_end) = read_v1(&reader)?;
        drop(reader);
        if old_end != writer.end() {
            // We hold the lock: nobody appended. The file changed in a way
            // the format does not allow.
            return Err(UpgradeError::Store(Error::Corrupt {
                path: writer.path().to_path_buf(),
                offset: old_end.min(writer.end()),
                expected: format!("the log to end at {} as its writer found", writer.end()),
                found: format!("records ending at {old_end}"),
            }));
        }
        let (bytes, first, last) = self.encode_v2(id, &records)?;
        let kept = self.keep_v1(id, writer.path(), old_end)?;
        // Publish: the name holds the old log or the new one, whole.
        let scratch = crate::conversation::log_scratch(id, "upgrade");
        backend
            .replace(
                &id.log_path(),
                &bytes,
                &scratch,
                jpstore_blobstore::backend::Expect::Any,
                true,
            )
            .map_err(|e| Error::from_backend(backend, e))?;
        // The head of the new log: its records were synced whole before the
        // name held them, so they are proven whole (4.6). The old head names
        // the old first record: until this is durable, it is not trusted.
        let settings = head::load(backend, id).and_then(|h| h.settings);
        let mut state = state;
        state.records = records.len() as u64;
        head::store_synced(
            backend,
            id,
            &Head {
                log_end: bytes.len() as u64,
                last_record: last.0,
                last_record_crc: last.1,
                first_record_crc: first,
                state,
                settings,
            },
        )?;
        drop(writer);
        Ok(UpgradeReport {
            id: id.clone(),
            from_version,
            upgraded: true,
            dry_run: false,
            records: records.len() as u64,
            entries: records.iter().map(|r| r.len() as u64).sum(),
            old_bytes: old_end,
            new_bytes: bytes.len() as u64,
            kept: Some(kept),
            cut_tail,
        })
    }

    /// An upgrade replaces logs under the writer lock: refused where that
    /// lock does not exclude writers on other machines.
    fn check_upgrade_is_safe(&self, dry_run: bool) -> Result<(), UpgradeError> {
        if dry_run || self.backend().locks_span_writers() {
            return Ok(());
        }
        Err(UpgradeError::Unsafe {
            store: self.backend().display(std::path::Path::new(".")),
        })
    }

    fn current(
        &self,
        id: &ConversationId,
        from_version: u16,
        log_end: u64,
        dry_run: bool,
        cut_tail: Option<CutTail>,
    ) -> UpgradeReport {
        UpgradeReport {
            id: id.clone(),
            from_version,
            upgraded: false,
            dry_run,
            records: 0,
            entries: 0,
            old_bytes: log_end,
            new_bytes: log_end,
            kept: None,
            cut_tail,
        }
    }

    /// The version 2 log of `records`: its bytes, the record checksum of
    /// its first record, and the offset and checksum of its last; decoded
    /// again and compared with `records` before it is returned.
    fn encode_v2(
        &self,
        id: &ConversationId,
        records: &Records,
    ) -> Result<(Vec<u8>, u32, (u64, u32))> {
        let max = self.options().log.max_record_size;
        let display = self.display(&id.log_path());
        let mut builders = Vec::with_capacity(records.len());
        for (r, entries) in records.iter().enumerate() {
            let mut b = RecordBuilder::new();
            for (i, entry) in entries.iter().enumerate() {
                match entry {
                    LogEntry::Meta(m) => push_meta(&mut b, m),
                    LogEntry::Event(e) => b.push_entry(e),
                }
                .map_err(|why| Error::BadEntry {
                    index: i,
                    field: String::new(),
                    message: format!(
                        "entry {i} of record {r} cannot be written as version 2: {why}"
                    ),
                })?;
            }
            let size = u64::from(HEADS_SECTION_HEADER_LEN) + b.plain_len();
            if size > u64::from(max) {
                return Err(Error::RecordTooLarge {
                    path: display.clone(),
                    offset: None,
                    size,
                    max: max.into(),
                });
            }
            builders.push(b);
        }
        let level = self.options().blobs.import_compression.settings().level;
        let sections = crate::parallel::map_ordered(&builders, |b| finish(b, Some(level)));
        let mut bytes = encode_file_header(LogFormat::v2()).to_vec();
        let (mut first, mut last) = (None, (0, 0));
        for s in &sections {
            let framed = FramedRecord::split(&s.heads, &s.body, max).map_err(|size| {
                Error::RecordTooLarge {
                    path: display.clone(),
                    offset: None,
                    size,
                    max: max.into(),
                }
            })?;
            first.get_or_insert(framed.record_crc);
            last = (bytes.len() as u64, framed.record_crc);
            bytes.extend_from_slice(&framed.bytes);
        }
        verify(&bytes, records, max).map_err(|found| Error::Corrupt {
            path: display.clone(),
            offset: 0,
            expected: "the version 2 log to read back as the version 1 log's entries".into(),
            found,
        })?;
        Ok((bytes, first.unwrap_or(0), last))
    }

    /// Keeps the first `len` bytes of the version 1 log (whole records) as
    /// `quarantine/conversations/<id>.<secs>-<nanos>/events.log`, with a
    /// note, each published durably; returns the directory.
    fn keep_v1(&self, id: &ConversationId, shown: &std::path::Path, len: u64) -> Result<PathBuf> {
        let backend = &**self.backend();
        let io = |op, source| Error::Io {
            op,
            path: shown.to_path_buf(),
            source,
        };
        let log = backend.open(&id.log_path()).map_err(|e| io("open", e))?;
        let size = usize::try_from(len).map_err(|_| {
            io(
                "read",
                std::io::Error::new(std::io::ErrorKind::OutOfMemory, "a log larger than memory"),
            )
        })?;
        let mut old = vec![0u8; size];
        jpstore_blobstore::backend::read_exact_at(&*log, &mut old, 0).map_err(|e| io("read", e))?;
        crate::conversation::keep_log(
            backend,
            id,
            &old,
            "`upgrade` rewrote the log as version 2 (the same entries in the same records)",
        )
    }
}

/// Every record of the version 1 log `reader` reads, decoded, the state
/// they fold to, and where they end. Damage is an error.
fn read_v1(reader: &crate::log::LogReader) -> Result<(Records, ConversationState, u64)> {
    let max = reader.options().max_record_size;
    let mut walk = reader.records()?;
    let mut records = Vec::new();
    let mut state = ConversationState::default();
    while let Some(record) = walk.next_ref() {
        let record = record?;
        let corrupt = |found: String| Error::Corrupt {
            path: reader.path().to_path_buf(),
            offset: record.offset,
            expected: "a record whose entries decode".into(),
            found,
        };
        let ContentRef::Batch(_) = record.content else {
            return Err(corrupt("a version 2 record in a version 1 log".into()));
        };
        let mut entries = Vec::new();
        let mut raw = Vec::new();
        record.each_entry(|e| raw.push(e)).map_err(corrupt)?;
        crate::conversation::codec::check_declared(raw.iter().copied(), max).map_err(corrupt)?;
        for e in raw {
            crate::conversation::codec::decode_all(e, max, &mut entries).map_err(corrupt)?;
        }
        for e in &entries {
            state.apply(e);
        }
        records.push(entries);
    }
    Ok((records, state, walk.position()))
}

/// Checks that `bytes`, a version 2 log, holds exactly `records`.
fn verify(bytes: &[u8], records: &Records, max: u32) -> std::result::Result<(), String> {
    let mut walker = Walker::in_memory(bytes, bytes.len() as u64, Framing::V2, max);
    let mut pos = FIRST_RECORD;
    let mut r = 0;
    loop {
        match walker.step(pos).map_err(|e| e.to_string())? {
            Step::Record { header, .. } => {
                let start = (pos + header.header_len()) as usize;
                let end = (pos + header.record_len()) as usize;
                let crate::log::RecordHeader::V2 { heads_len, .. } = header else {
                    return Err("a version 1 record".into());
                };
                let (heads, body) = bytes[start..end].split_at(heads_len as usize);
                let back = sections::decode_record(heads, body, max)?;
                if records.get(r) != Some(&back) {
                    return Err(format!("record {r} at offset {pos} reads back differently"));
                }
                r += 1;
                pos += header.record_len();
            }
            Step::End(crate::log::LogEnd::Clean { .. }) if r == records.len() => return Ok(()),
            Step::End(end) => return Err(format!("the log ends as {end:?} after {r} records")),
        }
    }
}

#[cfg(test)]
mod tests;
