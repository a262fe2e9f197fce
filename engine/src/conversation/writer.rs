//! The single writer of a conversation: creation, and the append protocol
//! (format-spec.md section 4.4).
//!
//! An append (1) checks the batch against the conversation (structure,
//! blob references, size) without writing anything, (2) makes every new
//! content payload durable in the blob store, (3) writes the batch as one log
//! record and syncs it once. It is acknowledged only after (3). A failure in
//! (1) or (2) leaves the log untouched; blobs written in (2) without their
//! record are unreferenced and left to gc.

use std::collections::HashMap;
use std::path::PathBuf;

use jpstore_blobstore::backend::{Backend, Expect, LockKind};
use jpstore_blobstore::{BlobId, BlobStore};

use super::codec::{self, LogEntry};
use super::head::{self, Head};
use super::meta::MetaPatch;
use super::read::fold_state;
use super::sections;
use super::state::ConversationState;
use super::ConversationId;
use crate::error::{Error, Result};
use crate::event::binary::encode::RecordBuilder;
use crate::event::binary::Kind;
use crate::event::{BlobRef, Entry, Payload};
use crate::log::{
    payload_len, ContentRef, FramedRecord, Framing, LogFormat, LogOptions, LogReader, LogWriter,
    FIRST_RECORD, FLAG_PACKED, HEADS_SECTION_HEADER_LEN,
};

/// Batches with more new blobs than this store them as one pack (four
/// syncs) instead of loose objects (two syncs each).
pub const LOOSE_BLOBS_MAX: usize = 4;

/// A batch encoded, checked and packed ahead of its append
/// ([`ConversationWriter::prepare_stored`]).
#[derive(Debug)]
pub struct PreparedBatch {
    entries: Vec<Entry>,
    record: FramedRecord,
}

impl PreparedBatch {
    /// The entries of the batch.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

/// What an append did (serialized as its fields, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AppendOutcome {
    /// Offset of the record in the log.
    pub offset: u64,
    /// Entries appended.
    pub entries: usize,
    /// Content payloads in the batch (with repetitions).
    pub payloads: usize,
    /// Blobs this append stored (the rest were already in the store).
    pub new_blobs: usize,
    /// Raw bytes of those blobs.
    pub new_blob_bytes: u64,
}

/// The writer of one conversation. Holds the log's writer lock until it
/// is closed ([`close`](Self::close), which also leaves the head cache
/// current) or dropped (which only releases the lock: no I/O); other
/// processes wait (or, with `try_open`, give up).
#[derive(Debug)]
pub struct ConversationWriter<'s> {
    blobs: &'s BlobStore,
    id: ConversationId,
    log: LogWriter,
    state: ConversationState,
    options: LogOptions,
    /// End of the log prefix the head cache on disk covers (0: none).
    head_end: u64,
    /// The settings cache of that head, written back with the next one
    /// (or the one a conversation handle computed, [`Self::set_settings_cache`]).
    settings: Option<head::SettingsCache>,
    /// The end of the part of the log proven whole when it was opened.
    proven_end: u64,
    /// The records that hold config deltas, in order (`None`: not known,
    /// for a version 1 log, whose framing does not say the kinds of its
    /// entries).
    delta_records: Option<Vec<DeltaRecord>>,
}

/// A record of the log that holds config deltas, or may: one whose entry
/// heads are compressed (an import's, a fork's) is looked into only when
/// the deltas are asked for ([`ConversationWriter::config_deltas`]), not
/// at every open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeltaRecord {
    /// The record at this offset holds config deltas.
    Holds(u64),
    /// The record at this offset has compressed entry heads, not looked
    /// into yet.
    Unread(u64),
}

/// The records of a log that hold config deltas, as a writer's walk sees
/// them ([`ConversationWriter::open`]).
struct DeltaRecords {
    max: u32,
    records: Option<Vec<DeltaRecord>>,
}

impl DeltaRecords {
    fn new(max: u32) -> DeltaRecords {
        DeltaRecords {
            max,
            records: Some(Vec::new()),
        }
    }

    /// Notes the record at `offset` if it holds a config delta (or may: its
    /// entry heads compressed, not decompressed here).
    fn see(&mut self, offset: u64, content: ContentRef<'_>) {
        let Some(records) = &mut self.records else {
            return;
        };
        let holds = match content {
            ContentRef::Split { heads, body, .. } => u32::try_from(body.len())
                .map_err(|_| String::new())
                .and_then(|body_len| {
                    sections::holds_kind_if_plain(heads, body_len, self.max, Kind::ConfigDelta)
                }),
            // Version 1: the kinds are inside the entries.
            ContentRef::Batch(_) => Err(String::new()),
        };
        match holds {
            Ok(Some(true)) => records.push(DeltaRecord::Holds(offset)),
            Ok(Some(false)) => {}
            Ok(None) => records.push(DeltaRecord::Unread(offset)),
            // Not known: whoever needs the deltas reads the log.
            Err(_) => self.records = None,
        }
    }
}

impl<'s> ConversationWriter<'s> {
    /// Closes the writer: leaves the head cache current, so that the next
    /// open or listing reads nothing of the log (format-spec.md 4.6), then
    /// releases the lock. The head is a cache, written best effort and not
    /// synced: a failure to write it (a full disk, a read-only store) only
    /// leaves the next reader to fold the records since the last head.
    ///
    /// Dropping a writer without closing it writes nothing (only the lock
    /// is released): the head then stays behind the log, and is brought
    /// up to date by the next writer that closes.
    pub fn close(mut self) {
        self.store_head();
    }

    /// Writes the head cache if the log grew past it and the writer synced
    /// everything it has (a head is evidence that what it covers was whole
    /// on disk: `head::proven_end`, so it is written only over synced
    /// records).
    fn store_head(&mut self) {
        if self.log.end() == self.head_end || self.log.synced_end() != self.log.end() {
            return;
        }
        let backend = &**self.blobs.backend();
        let first = head::log_first_record_crc(self.log.file());
        if let (Some((last_record, last_record_crc)), Some(first_record_crc)) =
            (self.log.last_record(), first)
        {
            head::store(
                backend,
                &self.id,
                &Head {
                    log_end: self.log.end(),
                    last_record,
                    last_record_crc,
                    first_record_crc,
                    state: self.state.clone(),
                    // Keyed by what it was made from: carried over as it is.
                    settings: self.settings.clone(),
                },
            );
            self.head_end = self.log.end();
        }
    }
    /// Creates a conversation whose log starts with `first` (its metadata)
    /// followed by `entries` (already in stored form, their blobs already
    /// durable: import and fork), all published at once: the conversation
    /// appears whole or not at all. Fails with [`Error::ConversationExists`]
    /// if the id is taken. `settings`, the settings at its start if the
    /// caller has them, are cached in the head it is published with
    /// (format-spec.md 4.6), so that its first view computes none.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        blobs: &'s BlobStore,
        id: ConversationId,
        first: MetaPatch,
        entries: &[Entry],
        options: LogOptions,
        framing: Framing,
        level: i32,
        settings: Option<head::SettingsCache>,
    ) -> Result<Self> {
        let backend = &**blobs.backend();
        let (format, records, state) = new_log(first, entries, options, framing, level)?;
        // The new directory's entry must be durable before the log inside it
        // is acknowledged.
        backend
            .create_prefix(&id.dir())
            .map_err(|e| Error::from_backend(backend, e))?;
        // The head, synced before the log appears, records where the
        // published records end: they were synced whole before the name
        // existed, so none of them can ever be a torn tail (format-spec.md
        // 3, "Recovery and classification").
        let mut head_end = 0;
        let mut record_head = |published: &crate::log::Published| {
            if store_new_head(backend, &id, published, &state, settings.clone())? {
                head_end = published.end;
            }
            Ok(())
        };
        let log = match LogWriter::create_published(
            backend,
            &id.log_path(),
            options,
            format,
            &records,
            &mut record_head,
            &mut || super::abandon_creation(backend, &id),
        ) {
            Err(Error::AlreadyExists { .. }) => {
                return Err(Error::ConversationExists { id: id.to_string() })
            }
            other => other?,
        };
        // Which of the published records hold config deltas is not kept
        // (a fork may carry some): none is known for a log without any.
        let delta_records =
            (framing == Framing::V2 && !entries.iter().any(is_config_delta)).then(Vec::new);
        Ok(ConversationWriter {
            blobs,
            id,
            log,
            state,
            options,
            head_end,
            settings,
            proven_end: head_end,
            delta_records,
        })
    }

    /// Replaces the log of the existing conversation `id` with one that
    /// starts with `first` followed by `entries` (as [`Self::create`] makes
    /// it), under its writer lock: the name holds the old log or the new
    /// one, whole, at every point (format-spec.md 4.1, "Replacing a
    /// conversation"). With `keep`, the old log is kept first, under the
    /// same lock, in quarantine ([`super::keep_log`], `keep` saying why).
    /// Returns the new log's length and where the old one was kept, or
    /// `None` if there is no conversation `id` (it was removed meanwhile:
    /// the caller creates it). Only for a store whose locks exclude every
    /// writer ([`Backend::locks_span_writers`]): elsewhere a writer on
    /// another machine could append to the log being replaced.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn replace_log(
        blobs: &BlobStore,
        id: &ConversationId,
        first: MetaPatch,
        entries: &[Entry],
        options: LogOptions,
        framing: Framing,
        level: i32,
        keep: Option<&str>,
    ) -> Result<Option<(u64, Option<PathBuf>)>> {
        let backend = &**blobs.backend();
        let (format, records, state) = new_log(first, entries, options, framing, level)?;
        let path = id.log_path();
        let (bytes, published) = LogWriter::file_bytes(format, &records, &backend.display(&path))?;
        let _lock = match super::writer_lock(backend, id) {
            Ok(lock) => lock,
            Err(Error::ConversationRemoved { .. } | Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        match backend.head(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(Error::Io {
                    op: "stat",
                    path: backend.display(&path),
                    source,
                })
            }
        }
        let kept = match keep {
            None => None,
            Some(why) => {
                let old = backend
                    .open(&path)
                    .and_then(|f| jpstore_blobstore::backend::read_all(&*f, u64::MAX))
                    .map_err(|source| Error::Io {
                        op: "read",
                        path: backend.display(&path),
                        source,
                    })?;
                Some(super::keep_log(backend, id, &old, why)?)
            }
        };
        // The old head goes first, durably: it is evidence about the old
        // log's records (4.6), and the new log may begin with the very same
        // first record (a conversation imported again).
        backend
            .delete(&[head::head_path(id)])
            .map_err(|e| Error::from_backend(backend, e))?;
        let scratch = super::log_scratch(id, "replace");
        backend
            .replace(&path, &bytes, &scratch, Expect::Any, true)
            .map_err(|e| Error::from_backend(backend, e))?;
        // The records were synced whole before the name held them. The
        // conversation is replaced from here on: a head that cannot be
        // written (a full disk) only leaves the new log without one, as a
        // head lost is (4.6).
        let _ = store_new_head(backend, id, &published, &state, None);
        Ok(Some((published.end, kept)))
    }

    /// Opens the conversation for appending: waits for its writer lock,
    /// checks the framing of the whole log (so damage anywhere is found and
    /// a torn tail is cut), and folds the entries to know its state: from the
    /// head cache on when it can be trusted (format-spec.md 4.6), so only
    /// records appended since the cache was written are decoded.
    pub(crate) fn open(
        blobs: &'s BlobStore,
        id: ConversationId,
        options: LogOptions,
    ) -> Result<Self> {
        let backend = &**blobs.backend();
        // A missing conversation: its lock file cannot be made, or (a
        // directory left without a log) its log not opened, and either is
        // said as `Error::NotFound` (`removed_while_waiting`).
        let lock = super::writer_lock(backend, &id)?;
        // Under the lock nobody replaces the log (a repair, an upgrade): the
        // log is opened once now (once more if a head written meanwhile
        // covers more than it shows: `head::open_judged`), and the evidence,
        // the head cache and the fold are all read through that handle (on
        // an object store, one listing of the log: a writer elsewhere that
        // appends meanwhile makes this writer's append fail, format-spec.md
        // 5.3).
        let path = id.log_path();
        let (file, proven_end) = head::open_proven(
            backend,
            &id,
            || {
                backend.open_log(&path).map_err(|source| {
                    super::removed_while_waiting(
                        &id,
                        Error::Io {
                            op: "open",
                            path: backend.display(&path),
                            source,
                        },
                    )
                })
            },
            |file| file.as_reader(),
        )?;
        let recovery = crate::log::Recovery {
            proven_end,
            copy_dir: std::path::Path::new(super::QUARANTINE_DIR).join("conversations"),
            copy_prefix: id.to_string(),
        };
        // The records that hold config deltas, seen as the walk checks
        // them: the settings in effect then need no other read of the log.
        let mut deltas = DeltaRecords::new(options.max_record_size);
        let log = LogWriter::open_file_under_lock(
            backend,
            &path,
            options,
            lock,
            file,
            &recovery,
            &mut |offset, content| deltas.see(offset, content),
        )
        .map_err(|e| super::removed_while_waiting(&id, e))?;
        let cached = head::load_with(backend, &id, log.file());
        head::remove_stale_temps(backend, &id);
        let (mut state, from, settings) = match cached {
            Some(h) if h.log_end <= log.end() => (h.state, h.log_end, h.settings),
            _ => (ConversationState::default(), FIRST_RECORD, None),
        };
        let fold = fold_state(&log.reader(options, recovery.proven_end)?, from, &mut state)?;
        if fold.end != log.end() {
            // The fold read the writer's own handle: a difference means the
            // log changed under it in a way the format does not allow.
            return Err(Error::Corrupt {
                path: log.path().to_path_buf(),
                offset: fold.end.min(log.end()),
                expected: format!("the log to end at {} as its writer found", log.end()),
                found: format!("records ending at {}", fold.end),
            });
        }
        Ok(ConversationWriter {
            blobs,
            id,
            log,
            state,
            options,
            head_end: from,
            settings,
            proven_end,
            delta_records: deltas.records,
        })
    }

    /// The conversation's id.
    pub fn id(&self) -> &ConversationId {
        &self.id
    }

    /// The length of the log: where the next record goes.
    pub fn log_end(&self) -> u64 {
        self.log.end()
    }

    /// The state after every acknowledged append.
    pub fn state(&self) -> &ConversationState {
        &self.state
    }

    /// The torn tail cut when the log was opened, if any.
    pub fn cut_tail(&self) -> Option<&crate::log::CutTail> {
        self.log.cut_tail()
    }

    /// The settings cache it holds: the head's, or the one given it
    /// ([`Self::set_settings_cache`]); written with the head on
    /// [`close`](Self::close).
    pub(crate) fn settings_cache(&self) -> Option<&head::SettingsCache> {
        self.settings.as_ref()
    }

    /// Replaces the settings cache written with the head on close (a
    /// conversation handle that computed the settings anew).
    pub(crate) fn set_settings_cache(&mut self, cache: head::SettingsCache) {
        self.settings = Some(cache);
    }

    /// A reader of the log through this writer's own handle (on an object
    /// store, no other listing), what it appended included: every record it
    /// walked when it opened the log, or appended and synced since, is
    /// whole.
    pub(crate) fn reader(&self) -> Result<LogReader> {
        let proven = self.proven_end.max(self.log.synced_end());
        self.log.reader(self.options, proven)
    }

    /// The config deltas of the log, in order: read from the records the
    /// writer knows to hold them (none read when there are none), or, where
    /// it does not know (a version 1 log), from the whole log.
    pub(crate) fn config_deltas(&self) -> Result<Vec<crate::event::Object>> {
        let reader = self.reader()?;
        if let Some(records) = &self.delta_records {
            let mut offsets = Vec::with_capacity(records.len());
            for record in records {
                match *record {
                    DeltaRecord::Holds(offset) => offsets.push(offset),
                    DeltaRecord::Unread(offset) => {
                        if record_holds_delta(&reader, offset, self.options.max_record_size)? {
                            offsets.push(offset);
                        }
                    }
                }
            }
            return super::read::config_deltas_at(&reader, &offsets);
        }
        let conversation = super::read::read_conversation_from(reader, &self.id)?;
        Ok(config_deltas_of(conversation.entries))
    }

    /// How many records of the log the writer has not looked into for
    /// config deltas (their entry heads compressed).
    #[cfg(test)]
    pub(crate) fn unread_delta_records(&self) -> usize {
        self.delta_records.as_ref().map_or(0, |records| {
            records
                .iter()
                .filter(|r| matches!(r, DeltaRecord::Unread(_)))
                .count()
        })
    }

    /// Appends a batch of entries; content given inline goes to the blob
    /// store first. All or nothing: on error nothing is appended. A batch
    /// with content holds the gc lock shared until its record is durable;
    /// one without content takes no lock and does not wait for gc
    /// (format-spec.md 4.7).
    pub fn append(&mut self, batch: Vec<Entry<Payload>>) -> Result<AppendOutcome> {
        // 1. Structure, against the conversation so far.
        let mut probe = self.state.clone();
        for (index, entry) in batch.iter().enumerate() {
            probe.check_and_step(entry).map_err(|r| Error::BadEntry {
                index,
                field: r.field,
                message: r.message,
            })?;
        }
        self.append_imported(batch)
    }

    /// [`append`](Self::append) of entries another tool wrote (an importer
    /// keeping what JP's files hold: a response answering no request of
    /// its turn, a request before any turn): their structure is not checked
    /// against the conversation (format-spec.md 4.4, step 1); everything
    /// else is as `append` does it.
    pub fn append_imported(&mut self, batch: Vec<Entry<Payload>>) -> Result<AppendOutcome> {
        self.append_imported_with(batch, None)
    }

    /// [`append_imported`](Self::append_imported) of `batch` and, in the
    /// same record after its entries, the metadata patch `patch`: both are
    /// durable together or neither is (a writer that stores events and the
    /// metadata that changed with them, such as JP's backend).
    pub fn append_imported_with(
        &mut self,
        batch: Vec<Entry<Payload>>,
        patch: Option<MetaPatch>,
    ) -> Result<AppendOutcome> {
        if batch.is_empty() {
            return Err(Error::EmptyBatch {
                path: self.log.path().to_path_buf(),
            });
        }
        // From the first look at the blob store until the record is durable,
        // gc must not sweep (format-spec.md 4.7). A batch without content
        // (messages, reasoning, tool calls) never looks at it: no lock, which
        // was a dozen system calls beside the append's one `fdatasync`.
        let mut content = false;
        for entry in &batch {
            entry.for_each_content(&mut |_| content = true);
        }
        let base_config = patch.as_ref().and_then(|p| p.base_config);
        let _gc = if content || base_config.is_some() {
            Some(super::gc_lock(&**self.blobs.backend(), LockKind::Shared)?)
        } else {
            None
        };
        if let Some(r) = &base_config {
            check_reference(self.blobs, r, batch.len())?;
        }
        // 2. Content: hash inline payloads, check references.
        let mut new: HashMap<BlobId, Vec<u8>> = HashMap::new();
        let mut payloads = 0usize;
        let mut stored = Vec::with_capacity(batch.len());
        for (index, entry) in batch.into_iter().enumerate() {
            let blobs = self.blobs;
            let entry = entry.try_map_content(&mut |p| -> Result<BlobRef> {
                payloads += 1;
                match p {
                    Payload::Inline(bytes) => {
                        let r = BlobRef {
                            id: BlobId::of(&bytes),
                            size: bytes.len() as u64,
                        };
                        new.entry(r.id).or_insert(bytes);
                        Ok(r)
                    }
                    Payload::Ref(r) => {
                        check_reference(blobs, &r, index)?;
                        Ok(r)
                    }
                }
            })?;
            stored.push(entry);
        }
        // Content referenced as text must be text: what is acknowledged must
        // render.
        for (index, entry) in stored.iter().enumerate() {
            let mut result = Ok(());
            entry.for_each_content_kind(&mut |r, text| {
                if text && result.is_ok() && !new.contains_key(&r.id) {
                    result = check_text(self.blobs, r, index);
                }
            });
            result?;
        }
        // 3. Size and readability, before anything is written.
        let record = self.encode_record_with(&stored, patch.as_ref())?;
        // 4. Blobs durable first (invariant 2), then the record.
        let stored_blobs = put_new_blobs(
            self.blobs,
            new,
            self.blobs.options().batch_compression,
            &mut |_| {},
        )?;
        let offset = self.write_record(&record, &stored)?;
        if let Some(patch) = patch {
            self.state.apply(&LogEntry::Meta(patch));
        }
        Ok(AppendOutcome {
            offset,
            entries: stored.len(),
            payloads,
            new_blobs: stored_blobs.new_blobs,
            new_blob_bytes: stored_blobs.raw_bytes,
        })
    }

    /// Appends entries whose content is already in the blob store (for
    /// compactions). References are checked like those of
    /// [`append`](Self::append); structure is not, since imported files are
    /// kept as they were written.
    pub fn append_stored(&mut self, batch: &[Entry]) -> Result<u64> {
        let record = self.encode_record(batch)?;
        self.append_stored_record(batch, &record)
    }

    /// The work of [`append_stored`](Self::append_stored) that writes
    /// nothing and needs no blob yet (encoding, the checks that the entries
    /// read back and fit a record, packing), done ahead: for a caller that
    /// prepares its record while its blobs are still being made durable
    /// (attach). [`append_prepared`](Self::append_prepared) appends it.
    pub fn prepare_stored(&self, batch: Vec<Entry>) -> Result<PreparedBatch> {
        let record = self.encode_record(&batch)?;
        Ok(PreparedBatch {
            entries: batch,
            record,
        })
    }

    /// Appends a batch prepared by [`prepare_stored`](Self::prepare_stored)
    /// as [`append_stored`](Self::append_stored) would: its references are
    /// checked now, against the blobs durable now.
    pub fn append_prepared(&mut self, prepared: PreparedBatch) -> Result<u64> {
        self.append_stored_record(&prepared.entries, &prepared.record)
    }

    /// The references of `batch` checked, then `record` (its encoding)
    /// appended, under the shared gc lock.
    fn append_stored_record(&mut self, batch: &[Entry], record: &FramedRecord) -> Result<u64> {
        let _gc = super::gc_lock(&**self.blobs.backend(), LockKind::Shared)?;
        for (index, entry) in batch.iter().enumerate() {
            let mut result = Ok(());
            entry.for_each_content(&mut |r| {
                if result.is_ok() {
                    result = check_reference(self.blobs, r, index);
                }
            });
            result?;
        }
        self.write_record(record, batch)
    }

    /// The size of `batch` that the record size limit
    /// ([`LogOptions::max_record_size`]) is checked against in this log:
    /// version 1, the batch's payload before packing; version 2, the
    /// sections decoded (heads section header, entry heads, aux and body).
    pub fn batch_size(&self, batch: &[Entry]) -> Result<u64> {
        match self.log.format().framing {
            Framing::V1 => {
                let encoded: Vec<Vec<u8>> = batch.iter().map(codec::encode_event).collect();
                Ok(payload_len(&encoded).unwrap_or(u64::MAX))
            }
            Framing::V2 => {
                let mut record = RecordBuilder::new();
                for (index, entry) in batch.iter().enumerate() {
                    record
                        .push_entry(entry)
                        .map_err(|why| unreadable(index, &why))?;
                }
                Ok(u64::from(HEADS_SECTION_HEADER_LEN) + record.plain_len())
            }
        }
    }

    /// The format of the conversation's log (its framing and flags).
    pub fn log_format(&self) -> LogFormat {
        self.log.format()
    }

    /// A batch as its record holds it, framed for this log: encoded, each
    /// entry checked to read back, the batch checked against the record
    /// size limit, and compressed where the log's format says (format-spec.md
    /// 4.2). Writes nothing.
    fn encode_record(&self, batch: &[Entry]) -> Result<FramedRecord> {
        self.encode_record_with(batch, None)
    }

    /// [`encode_record`](Self::encode_record) with the metadata patch
    /// `patch`, if any, after the entries (format-spec.md 4.3: a record's
    /// entries may include metadata patches).
    fn encode_record_with(
        &self,
        batch: &[Entry],
        patch: Option<&MetaPatch>,
    ) -> Result<FramedRecord> {
        let unreadable_meta = |found: String| Error::BadEntry {
            index: batch.len(),
            field: "metadata".into(),
            message: format!("the metadata patch would not read back: {found}"),
        };
        match self.log.format().framing {
            Framing::V1 => {
                let mut encoded: Vec<Vec<u8>> = batch.iter().map(codec::encode_event).collect();
                for (index, bytes) in encoded.iter().enumerate() {
                    check_readable(bytes, index)?;
                }
                if let Some(patch) = patch {
                    let bytes = codec::encode_meta(patch);
                    codec::check_readable(&bytes)
                        .map_err(|found| unreadable_meta(found.to_string()))?;
                    encoded.push(bytes);
                }
                self.check_size(&encoded)?;
                let record = match self.log.flags() & FLAG_PACKED {
                    0 => encoded,
                    _ => codec::pack_runs(&encoded).unwrap_or(encoded),
                };
                self.framed(FramedRecord::batch(&record, self.options.max_record_size))
            }
            Framing::V2 => {
                let mut record = RecordBuilder::new();
                for (index, entry) in batch.iter().enumerate() {
                    record
                        .push_entry(entry)
                        .map_err(|why| unreadable(index, &why))?;
                }
                if let Some(patch) = patch {
                    sections::push_meta(&mut record, patch)
                        .map_err(|found| unreadable_meta(found.to_string()))?;
                }
                self.check_plain(&record)?;
                let sections = sections::finish(&record, Some(sections::LOG_LEVEL));
                self.framed(FramedRecord::split(
                    &sections.heads,
                    &sections.body,
                    self.options.max_record_size,
                ))
            }
        }
    }

    /// The record `framed` made, or [`Error::RecordTooLarge`].
    fn framed(&self, framed: std::result::Result<FramedRecord, u64>) -> Result<FramedRecord> {
        framed.map_err(|size| Error::RecordTooLarge {
            path: self.log.path().to_path_buf(),
            offset: None,
            size,
            max: self.options.max_record_size.into(),
        })
    }

    /// Refuses a version 2 record whose decoded sections would exceed the
    /// record size limit (readers refuse one).
    fn check_plain(&self, record: &RecordBuilder) -> Result<()> {
        let size = u64::from(HEADS_SECTION_HEADER_LEN) + record.plain_len();
        let max = u64::from(self.options.max_record_size);
        if size > max {
            return Err(Error::RecordTooLarge {
                path: self.log.path().to_path_buf(),
                offset: None,
                size,
                max,
            });
        }
        Ok(())
    }

    /// Appends a batch's record ([`encode_record`](Self::encode_record)) as
    /// one durable record and folds the batch's entries into the state.
    fn write_record(&mut self, record: &FramedRecord, batch: &[Entry]) -> Result<u64> {
        let offset = self.log.append_framed(record)?;
        self.state.records += 1;
        for e in batch {
            self.state.apply_entry(e);
        }
        if let Some(records) = &mut self.delta_records {
            if batch.iter().any(is_config_delta) {
                records.push(DeltaRecord::Holds(offset));
            }
        }
        Ok(offset)
    }

    /// Changes the conversation's metadata (one durable record).
    pub fn set_metadata(&mut self, patch: MetaPatch) -> Result<u64> {
        let _gc = super::gc_lock(&**self.blobs.backend(), LockKind::Shared)?;
        if let Some(r) = &patch.base_config {
            check_reference(self.blobs, r, 0)?;
        }
        let record = match self.log.format().framing {
            Framing::V1 => {
                let bytes = codec::encode_meta(&patch);
                codec::check_readable(&bytes).map_err(|found| Error::BadEntry {
                    index: 0,
                    field: "metadata".into(),
                    message: format!("the metadata patch would not read back: {found}"),
                })?;
                self.framed(FramedRecord::batch(&[bytes], self.options.max_record_size))?
            }
            Framing::V2 => {
                let mut record = RecordBuilder::new();
                sections::push_meta(&mut record, &patch).map_err(|found| Error::BadEntry {
                    index: 0,
                    field: "metadata".into(),
                    message: format!("the metadata patch would not read back: {found}"),
                })?;
                self.check_plain(&record)?;
                let sections = sections::finish(&record, Some(sections::LOG_LEVEL));
                self.framed(FramedRecord::split(
                    &sections.heads,
                    &sections.body,
                    self.options.max_record_size,
                ))?
            }
        };
        let offset = self.log.append_framed(&record)?;
        self.state.records += 1;
        self.state.apply(&LogEntry::Meta(patch));
        Ok(offset)
    }

    fn check_size(&self, encoded: &[Vec<u8>]) -> Result<()> {
        let size = payload_len(encoded).unwrap_or(u64::MAX);
        let max = u64::from(self.options.max_record_size);
        if size > max {
            return Err(Error::RecordTooLarge {
                path: self.log.path().to_path_buf(),
                offset: None,
                size,
                max,
            });
        }
        Ok(())
    }
}

/// Whether the record at `offset` of `reader`'s log holds a config delta,
/// from its entry heads (decompressed when they are stored compressed).
fn record_holds_delta(reader: &crate::log::LogReader, offset: u64, max: u32) -> Result<bool> {
    let corrupt = |found: String| Error::Corrupt {
        path: reader.path().to_path_buf(),
        offset,
        expected: "a version 2 record whose entry heads read".into(),
        found,
    };
    let mut records = reader.records_from(offset)?;
    let record = match records.next_ref() {
        Some(record) => record?,
        None => return Err(corrupt("the end of the log".into())),
    };
    match record.content {
        ContentRef::Split { heads, body, .. } => {
            let body_len = u32::try_from(body.len())
                .map_err(|_| corrupt("a body section beyond 4 GiB".into()))?;
            sections::holds_kind(heads, body_len, max, Kind::ConfigDelta).map_err(corrupt)
        }
        ContentRef::Batch(_) => Err(corrupt("a record of version 1".into())),
    }
}

/// The config deltas of `entries`, in order.
pub(crate) fn config_deltas_of(entries: Vec<Entry>) -> Vec<crate::event::Object> {
    entries
        .into_iter()
        .filter_map(|e| match e {
            Entry::Event(crate::event::Event {
                kind: crate::event::EventKind::ConfigDelta(d),
                ..
            }) => Some(d.delta),
            _ => None,
        })
        .collect()
}

/// Whether `entry` is a config delta.
fn is_config_delta<C>(entry: &Entry<C>) -> bool {
    matches!(
        entry.event().map(|e| &e.kind),
        Some(crate::event::EventKind::ConfigDelta(_))
    )
}

/// What storing the new content of a batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobTotals {
    /// Distinct payloads offered.
    pub payloads: usize,
    /// Of those, blobs newly stored.
    pub new_blobs: usize,
    /// Raw bytes of the blobs newly stored.
    pub raw_bytes: u64,
    /// Bytes written to the blob store (objects or pack, compressed).
    pub stored_bytes: u64,
}

/// Stores the payloads the store does not hold yet: loose objects for up to
/// [`LOOSE_BLOBS_MAX`] of them (two syncs each), one pack for more (four
/// syncs). Presence is checked against the packs already loaded, without
/// rescanning `packs/` per blob (that would grow with the number of packs):
/// a blob packed meanwhile by another process is only written again.
///
/// The pack is compressed as `compression` says (appends use the store's
/// batch setting, imports its import setting), its objects in the order
/// `payloads` gives them.
pub(crate) fn put_new_blobs(
    blobs: &BlobStore,
    payloads: impl IntoIterator<Item = (BlobId, Vec<u8>)>,
    compression: jpstore_blobstore::Compression,
    progress: &mut dyn FnMut(jpstore_blobstore::BatchProgress),
) -> Result<BlobTotals> {
    let payloads = payloads.into_iter();
    let mut totals = BlobTotals::default();
    let mut missing = Vec::new();
    for (id, bytes) in payloads {
        totals.payloads += 1;
        if !blobs.exists_cached(&id)? {
            missing.push(bytes);
        }
    }
    if missing.len() <= LOOSE_BLOBS_MAX {
        for data in &missing {
            let out = blobs.put(data)?;
            if out.stored {
                totals.new_blobs += 1;
                totals.raw_bytes += data.len() as u64;
                totals.stored_bytes += out.stored_len;
            }
        }
    } else {
        let out = blobs.put_batch_compressed(
            compression,
            missing.len(),
            |i, buf| {
                buf.extend_from_slice(&missing[i]);
                Ok(())
            },
            progress,
        )?;
        // Every item was missing a moment ago; one stored meanwhile by
        // another process is counted here too.
        totals.new_blobs = out.new_objects;
        totals.raw_bytes = out.raw_bytes;
        totals.stored_bytes = out.pack_bytes;
    }
    Ok(totals)
}

/// The records a new (version 2) conversation's log is published with:
/// its metadata alone, then its entries in records that fit the record
/// size limit (each large one compressed).
fn encode_new_log(
    first: &MetaPatch,
    entries: &[Entry],
    options: LogOptions,
    level: i32,
) -> Result<Vec<FramedRecord>> {
    let max = u64::from(options.max_record_size);
    let fits = |r: &RecordBuilder| u64::from(HEADS_SECTION_HEADER_LEN) + r.plain_len() <= max;
    let too_large = |size: u64| Error::RecordTooLarge {
        path: std::path::PathBuf::from("a new conversation's log"),
        offset: None,
        size,
        max,
    };
    let mut meta = RecordBuilder::new();
    sections::push_meta(&mut meta, first).map_err(|found| Error::BadEntry {
        index: 0,
        field: "metadata".into(),
        message: format!("the conversation's metadata would not read back: {found}"),
    })?;
    if !fits(&meta) {
        return Err(too_large(meta.plain_len()));
    }
    let mut builders = vec![meta];
    let mut current = RecordBuilder::new();
    for (index, entry) in entries.iter().enumerate() {
        let mark = current.mark();
        current
            .push_entry(entry)
            .map_err(|why| unreadable(index, &why))?;
        if fits(&current) {
            continue;
        }
        if current.count == 1 {
            return Err(Error::BadEntry {
                index,
                field: String::new(),
                message: format!(
                    "the entry encodes to {} bytes, more than a record holds ({max} bytes)",
                    current.plain_len()
                ),
            });
        }
        current.rewind(mark);
        builders.push(std::mem::take(&mut current));
        current
            .push_entry(entry)
            .map_err(|why| unreadable(index, &why))?;
        if !fits(&current) {
            return Err(Error::BadEntry {
                index,
                field: String::new(),
                message: format!(
                    "the entry encodes to {} bytes, more than a record holds ({max} bytes)",
                    current.plain_len()
                ),
            });
        }
    }
    if current.count > 0 {
        builders.push(current);
    }
    // Large records (an import's, a fork's) are compressed on all cores.
    let sections = crate::parallel::map_ordered(&builders, |b| sections::finish(b, Some(level)));
    sections
        .iter()
        .map(|s| FramedRecord::split(&s.heads, &s.body, options.max_record_size).map_err(too_large))
        .collect()
}

/// The records of a new version 1 log (for tests of older logs and their
/// upgrade): its metadata alone, then its entries in batches that fit the
/// record size limit, each packed where worth it.
fn encode_new_log_v1(
    first: &MetaPatch,
    entries: &[Entry],
    options: LogOptions,
) -> Result<Vec<FramedRecord>> {
    let meta = vec![codec::encode_meta(first)];
    codec::check_readable(&meta[0]).map_err(|found| Error::BadEntry {
        index: 0,
        field: "metadata".into(),
        message: format!("the conversation's metadata would not read back: {found}"),
    })?;
    let mut batches: Vec<Vec<Vec<u8>>> = vec![meta];
    let max = u64::from(options.max_record_size);
    let mut current: Vec<Vec<u8>> = Vec::new();
    let mut size = 4u64;
    for (index, entry) in entries.iter().enumerate() {
        let bytes = codec::encode_event(entry);
        check_readable(&bytes, index)?;
        let add = 4 + bytes.len() as u64;
        if 4 + add > max {
            return Err(Error::BadEntry {
                index,
                field: String::new(),
                message: format!(
                    "the entry encodes to {} bytes, more than a record holds ({max} bytes)",
                    bytes.len()
                ),
            });
        }
        if size + add > max {
            batches.push(std::mem::take(&mut current));
            size = 4;
        }
        size += add;
        current.push(bytes);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
        .into_iter()
        .map(|b| {
            let b = codec::pack_runs(&b).unwrap_or(b);
            FramedRecord::batch(&b, options.max_record_size).map_err(|size| Error::RecordTooLarge {
                path: std::path::PathBuf::from("a new conversation's log"),
                offset: None,
                size,
                max,
            })
        })
        .collect()
}

/// The error of an entry the binary form refuses (a value nested deeper
/// than readers accept).
fn unreadable(index: usize, why: &str) -> Error {
    Error::BadEntry {
        index,
        field: String::new(),
        message: format!("the entry would not read back: {why}"),
    }
}

/// Refuses an entry whose encoding would not decode again.
fn check_readable(bytes: &[u8], index: usize) -> Result<()> {
    codec::check_readable(bytes).map_err(|found| Error::BadEntry {
        index,
        field: String::new(),
        message: format!(
            "the entry would not read back (nested deeper than {} levels?): {found}",
            codec::MAX_DEPTH
        ),
    })
}

/// Refuses a text reference to content that is not UTF-8.
fn check_text(blobs: &BlobStore, r: &BlobRef, index: usize) -> Result<()> {
    let bytes = blobs.get(&r.id)?;
    match std::str::from_utf8(&bytes) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::BadEntry {
            index,
            field: "$blob".into(),
            message: format!(
                "blob {} is referenced as text but is not UTF-8 (byte {} of {}); refer to binary content as a resource `blob`",
                r.id,
                e.valid_up_to(),
                bytes.len()
            ),
        }),
    }
}

fn check_reference(blobs: &BlobStore, r: &BlobRef, index: usize) -> Result<()> {
    match blobs.size(&r.id) {
        Ok(size) if size == r.size => Ok(()),
        Ok(size) => Err(Error::BadEntry {
            index,
            field: "$blob".into(),
            message: format!(
                "blob {} has {size} bytes, but the reference says {}",
                r.id, r.size
            ),
        }),
        Err(jpstore_blobstore::Error::NotFound { .. }) => Err(Error::BadEntry {
            index,
            field: "$blob".into(),
            message: format!("blob {} is not in the store", r.id),
        }),
        Err(e) => Err(e.into()),
    }
}

/// The records of a new log holding `first` (a conversation's metadata)
/// then `entries` in batches that fit the record size limit, in the
/// format of `framing`, and the state they fold to.
fn new_log(
    first: MetaPatch,
    entries: &[Entry],
    options: LogOptions,
    framing: Framing,
    level: i32,
) -> Result<(LogFormat, Vec<FramedRecord>, ConversationState)> {
    let (format, records) = match framing {
        Framing::V2 => (
            LogFormat::v2(),
            encode_new_log(&first, entries, options, level)?,
        ),
        Framing::V1 => (
            LogFormat::v1(FLAG_PACKED),
            encode_new_log_v1(&first, entries, options)?,
        ),
    };
    let mut state = ConversationState::default();
    state.apply(&LogEntry::Meta(first));
    for e in entries {
        state.apply_entry(e);
    }
    state.records = records.len() as u64;
    Ok((format, records, state))
}

/// Writes, synced, the head of a log just made whole (`published`): its
/// records are proven whole (format-spec.md 4.6), with the settings cache
/// `settings`. Whether there was one to write (a log of at least one
/// record).
fn store_new_head(
    backend: &dyn Backend,
    id: &ConversationId,
    published: &crate::log::Published,
    state: &ConversationState,
    settings: Option<head::SettingsCache>,
) -> Result<bool> {
    let (Some((last_record, last_record_crc)), Some(first_record_crc)) =
        (published.last, published.first_crc)
    else {
        return Ok(false);
    };
    head::store_synced(
        backend,
        id,
        &Head {
            log_end: published.end,
            last_record,
            last_record_crc,
            first_record_crc,
            state: state.clone(),
            settings,
        },
    )?;
    Ok(true)
}
