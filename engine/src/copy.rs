//! Copying conversations from one store to another (`jp-store copy`): any
//! store to any store, a directory or a bucket (format-spec.md 5.9).
//!
//! A conversation is copied as its log's records, byte for byte, with every
//! blob they reference. The blobs a copy needs and the destination lacks go
//! first (one pack, or a few loose objects), then the records; so the
//! destination is consistent at every point a copy can stop. For each
//! conversation:
//!
//! - absent at the destination: its log is created there whole, with the
//!   same id, the same format and the same bytes;
//! - at the destination, with a log that is a prefix of the source's (same
//!   format, the same records): extended with the records it lacks, each
//!   appended by the destination's writer (on S3, a conditional create of a
//!   segment at the end it read: format-spec.md 5.3);
//! - the same log: nothing is sent;
//! - anything else (the logs diverged, or the destination's is longer): a
//!   [`CopyOutcome::Conflict`], and the destination is left as it was.
//!
//! Logs of format 1 are copied as they are (records of format 1);
//! `jp-store upgrade` rewrites them where the store's locks exclude every
//! writer (a store in a directory).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexSet;
use jpstore_blobstore::backend::Backend;
use jpstore_blobstore::BlobId;
use serde::Serialize;

use crate::conversation::head::{self, Head};
use crate::conversation::read::open_reader;
use crate::conversation::{ConversationId, CONVERSATIONS_DIR, QUARANTINE_DIR};
use crate::error::{Error, Result};
use crate::log::{
    FramedRecord, LogFormat, LogOptions, LogReader, LogWriter, Record, RecordContent, Recovery,
};
use crate::store::{Store, StoreOptions, CONFIG_FILE, MAX_CONFIG_FILE};

/// Blobs read from the source and stored at the destination at a time (one
/// pack each), in raw bytes: what a copy holds in memory at most, beyond a
/// single larger blob.
const BLOB_CHUNK_BYTES: u64 = 256 << 20;

/// What a copy did with one conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyOutcome {
    /// Absent at the destination: created there.
    Created,
    /// At the destination, a prefix of the source: extended.
    Extended,
    /// At the destination already, the same: nothing sent.
    Unchanged,
    /// At the destination, different: left as it is.
    Conflict,
    /// Not copied (the source's log cannot be read, a write failed).
    Failed,
}

/// One conversation of a copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CopiedConversation {
    /// Its id.
    pub id: String,
    /// What was done.
    pub outcome: CopyOutcome,
    /// Records written at the destination.
    pub records_sent: u64,
    /// Bytes of those records.
    pub log_bytes_sent: u64,
    /// Why it is a conflict or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a copy did (`jp-store copy --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CopyReport {
    /// No conflict and no failure.
    pub complete: bool,
    /// Nothing was written at the destination.
    pub sent_nothing: bool,
    /// Conversations created at the destination.
    pub created: usize,
    /// Conversations extended.
    pub extended: usize,
    /// Conversations that were the same.
    pub unchanged: usize,
    /// Conversations that diverged (left as they were).
    pub conflicts: usize,
    /// Conversations not copied for another reason.
    pub failed: usize,
    /// Log records written.
    pub records_sent: u64,
    /// Bytes of those records.
    pub log_bytes_sent: u64,
    /// Blobs the records written reference.
    pub blobs_referenced: usize,
    /// Of those, blobs stored at the destination by this copy.
    pub blobs_sent: usize,
    /// Their raw bytes.
    pub blob_bytes_sent: u64,
    /// The bytes they were stored as at the destination (compressed: what
    /// was written there).
    pub blob_stored_bytes: u64,
    /// Blobs the destination had already.
    pub blobs_present: usize,
    /// The destination's `config.toml` differs from the source's (the
    /// settings of the copied conversations there may differ).
    pub workspace_config_differs: bool,
    /// Each conversation, in id order.
    pub conversations: Vec<CopiedConversation>,
}

/// Progress of a copy.
#[derive(Debug)]
pub enum CopyProgress<'a> {
    /// Both sides read: what will be sent.
    Planned {
        /// Conversations considered.
        conversations: usize,
        /// Of those, to create or extend.
        to_send: usize,
        /// Blobs to send.
        blobs: usize,
    },
    /// Blobs stored so far.
    Blobs {
        /// Stored.
        done: usize,
        /// To store.
        total: usize,
    },
    /// One conversation done.
    Conversation(&'a CopiedConversation),
}

/// What to do with one conversation.
enum Plan {
    Create {
        format: LogFormat,
        records: Vec<FramedRecord>,
        head: Option<Box<Head>>,
    },
    Extend {
        dst_end: u64,
        records: Vec<FramedRecord>,
        head: Option<Box<Head>>,
    },
    Done(CopiedConversation),
}

/// Opens the store at `backend` to copy `src` into: a store already, as it
/// is; new or empty, made a store with `src`'s `config.toml` (so copied
/// conversations keep their settings). Anything else is
/// [`Error::NotEmpty`]. Returns the store and whether it was made.
pub(crate) fn open_or_init_like(
    src: &Store,
    backend: Arc<dyn Backend>,
    root: PathBuf,
    options: StoreOptions,
) -> Result<(Store, bool)> {
    let names = crate::store::root_names(&*backend, &root)?;
    if names.iter().any(|n| n == CONVERSATIONS_DIR) {
        return Ok((Store::open(backend, options)?, false));
    }
    let config = read_config(src)?;
    // Empty, or holding only the config this function put there before it
    // was stopped.
    let ours = match names.as_slice() {
        [] => true,
        [name] if name == CONFIG_FILE => {
            let there = Store::read_config_of(&*backend)?;
            there.is_some() && there == config
        }
        _ => false,
    };
    if !ours {
        // Refused as `init` refuses, naming what is there.
        return Err(crate::store::not_empty(root, names));
    }
    // What a failed making of the store made is removed again.
    let made = config
        .map_or(Ok(()), |config| {
            backend
                .put_if_absent(
                    Path::new(CONFIG_FILE),
                    &config,
                    &crate::store::config_temp(),
                )
                .map(drop)
                .map_err(|e| Error::from_backend(&*backend, e))
        })
        .and_then(|()| Store::init(backend.clone(), options));
    Ok((
        made.inspect_err(|_| crate::store::undo_init(&*backend))?,
        true,
    ))
}

/// The bytes of `config.toml` of `store`, if it has one.
fn read_config(store: &Store) -> Result<Option<Vec<u8>>> {
    Store::read_config_of(&**store.backend())
}

impl Store {
    /// The bytes of `config.toml` in `backend`, if there is one.
    pub(crate) fn read_config_of(backend: &dyn Backend) -> Result<Option<Vec<u8>>> {
        let path = Path::new(CONFIG_FILE);
        let io = |op, source| Error::Io {
            op,
            path: backend.display(path),
            source,
        };
        let file = match backend.open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("open", e)),
        };
        jpstore_blobstore::backend::read_all(&*file, MAX_CONFIG_FILE)
            .map(Some)
            .map_err(|e| io("read", e))
    }
}

/// Copies the conversations `ids` of `src` (every one when `ids` is empty)
/// into `dst`, with the blobs they reference (see the module's docs).
///
/// Conflicts and conversations that could not be copied are in the report,
/// and the others are copied; an error is returned only when a store as a
/// whole cannot be read or written (listing, blobs), after which some
/// conversations may be copied and others not (running the copy again
/// completes it).
pub fn run(
    src: &Store,
    dst: &Store,
    ids: &[ConversationId],
    progress: &mut dyn FnMut(CopyProgress<'_>),
) -> Result<CopyReport> {
    // Every conversation of the source, or those named: one of the first
    // removed since the listing is left out, one named is reported.
    let every = ids.is_empty();
    let mut ids: Vec<ConversationId> = if every { src.ids()? } else { ids.to_vec() };
    ids.sort();
    ids.dedup();
    let at_dst: HashSet<ConversationId> = dst.ids()?.into_iter().collect();
    let workspace_config_differs = src.workspace_digest()? != dst.workspace_digest()?;

    // 1. Both sides read; what each conversation needs.
    let max = dst.options().log.max_record_size;
    let mut plans = Vec::with_capacity(ids.len());
    let mut needed: IndexSet<BlobId> = IndexSet::new();
    for id in &ids {
        let plan = match plan(src, dst, id, at_dst.contains(id), max, &mut needed) {
            Ok(plan) => plan,
            Err(e) if every && src.gone_since_listed(id, &e) => continue,
            Err(e) => Plan::Done(done(id, CopyOutcome::Failed, Some(e.to_string()))),
        };
        plans.push((id, plan));
    }
    let to_send = plans
        .iter()
        .filter(|(_, p)| !matches!(p, Plan::Done(_)))
        .count();

    // 2. The blobs the destination lacks, durable before any record that
    // references them; gc must not run at the destination meanwhile
    // (format-spec.md 4.7).
    let _gc = if to_send > 0 {
        Some(dst.gc_shared()?)
    } else {
        None
    };
    let blobs_referenced = needed.len();
    let missing = missing_blobs(dst, needed)?;
    progress(CopyProgress::Planned {
        conversations: plans.len(),
        to_send,
        blobs: missing.len(),
    });
    let blobs_present = blobs_referenced - missing.len();
    let (blob_bytes_sent, blob_stored_bytes) = send_blobs(src, dst, &missing, progress)?;

    // 3. The logs.
    let mut report = CopyReport {
        complete: true,
        sent_nothing: true,
        created: 0,
        extended: 0,
        unchanged: 0,
        conflicts: 0,
        failed: 0,
        records_sent: 0,
        log_bytes_sent: 0,
        blobs_referenced,
        blobs_sent: missing.len(),
        blob_bytes_sent,
        blob_stored_bytes,
        blobs_present,
        workspace_config_differs,
        conversations: Vec::with_capacity(plans.len()),
    };
    for (id, plan) in plans {
        let c = match plan {
            Plan::Done(c) => c,
            Plan::Create {
                format,
                records,
                head,
            } => create(dst, id, format, &records, head.as_deref()),
            Plan::Extend {
                dst_end,
                records,
                head,
            } => extend(dst, id, dst_end, &records, head.as_deref()),
        };
        match c.outcome {
            CopyOutcome::Created => report.created += 1,
            CopyOutcome::Extended => report.extended += 1,
            CopyOutcome::Unchanged => report.unchanged += 1,
            CopyOutcome::Conflict => report.conflicts += 1,
            CopyOutcome::Failed => report.failed += 1,
        }
        report.records_sent += c.records_sent;
        report.log_bytes_sent += c.log_bytes_sent;
        progress(CopyProgress::Conversation(&c));
        report.conversations.push(c);
    }
    report.complete = report.conflicts == 0 && report.failed == 0;
    report.sent_nothing = report.records_sent == 0 && report.blobs_sent == 0;
    Ok(report)
}

fn done(id: &ConversationId, outcome: CopyOutcome, reason: Option<String>) -> CopiedConversation {
    CopiedConversation {
        id: id.to_string(),
        outcome,
        records_sent: 0,
        log_bytes_sent: 0,
        reason,
    }
}

/// Every valid record of the log of `id` in `store` (a record being
/// written, a torn tail, is not one), with the log's format; damage is an
/// error.
fn read_records(store: &Store, id: &ConversationId) -> Result<(LogReader, Vec<Record>)> {
    let reader = open_reader(&**store.backend(), id, store.options().log)?;
    let records = reader.records()?.collect::<Result<Vec<Record>>>()?;
    Ok((reader, records))
}

/// Reads `id` at both sides and decides what to send; the blobs the
/// records to send reference are added to `needed`.
fn plan(
    src: &Store,
    dst: &Store,
    id: &ConversationId,
    at_dst: bool,
    max: u32,
    needed: &mut IndexSet<BlobId>,
) -> Result<Plan> {
    let (src_log, src_records) = read_records(src, id)?;
    let format = src_log.format();
    let (from, dst_end) = if at_dst {
        let (dst_log, dst_records) = read_records(dst, id)?;
        if dst_log.format() != format {
            return Ok(Plan::Done(done(
                id,
                CopyOutcome::Conflict,
                Some(format!(
                    "its log is of format {} (flags {:#06x}) at the destination and of format {} (flags {:#06x}) at the source; `jp-store upgrade` rewrites logs of format 1",
                    dst_log.format().framing.version(),
                    dst_log.format().flags,
                    format.framing.version(),
                    format.flags,
                )),
            )));
        }
        for (i, d) in dst_records.iter().enumerate() {
            match src_records.get(i) {
                Some(s) if s == d => {}
                Some(_) => {
                    return Ok(Plan::Done(done(
                        id,
                        CopyOutcome::Conflict,
                        Some(format!(
                            "the logs diverged: record {} (offset {}) differs at the destination",
                            i + 1,
                            d.offset
                        )),
                    )))
                }
                None => {
                    return Ok(Plan::Done(done(
                        id,
                        CopyOutcome::Conflict,
                        Some(format!(
                            "the destination's log is longer: {} records, the source's {}",
                            dst_records.len(),
                            src_records.len()
                        )),
                    )))
                }
            }
        }
        if dst_records.len() == src_records.len() {
            return Ok(Plan::Done(done(id, CopyOutcome::Unchanged, None)));
        }
        let end = dst_records
            .last()
            .map_or(crate::log::FIRST_RECORD, Record::end);
        (dst_records.len(), Some(end))
    } else {
        (0, None)
    };
    let mut records = Vec::with_capacity(src_records.len() - from);
    for r in &src_records[from..] {
        let refs = match &r.content {
            RecordContent::Batch(entries) => {
                crate::gc::mark::batch_references(entries, src.options().log.max_record_size)
            }
            RecordContent::Split { heads, body } => crate::gc::mark::heads_references(
                heads,
                body.len(),
                src.options().log.max_record_size,
            ),
        }
        .map_err(|found| Error::Corrupt {
            path: src_log.path().to_path_buf(),
            offset: r.offset,
            expected: "entries that decode".into(),
            found,
        })?;
        needed.extend(refs);
        records.push(frame(dst, id, r, max)?);
    }
    // The head the destination's log gets with them: it is the source's
    // log, record for record, so its fold is the source's (format-spec.md
    // 4.6: the proof that the records were whole, as import and fork give).
    let head = crate::conversation::read::head_of_records(&src_records, max)
        .map_err(|(offset, found)| Error::Corrupt {
            path: src_log.path().to_path_buf(),
            offset,
            expected: "entries that decode".into(),
            found,
        })?
        .map(Box::new);
    Ok(match dst_end {
        None => Plan::Create {
            format,
            records,
            head,
        },
        Some(dst_end) => Plan::Extend {
            dst_end,
            records,
            head,
        },
    })
}

/// `record` framed again for writing, checked to be the same bytes.
fn frame(dst: &Store, id: &ConversationId, record: &Record, max: u32) -> Result<FramedRecord> {
    let framed = match &record.content {
        RecordContent::Batch(entries) => FramedRecord::batch(entries, max),
        RecordContent::Split { heads, body } => FramedRecord::split(heads, body, max),
    }
    .map_err(|size| Error::RecordTooLarge {
        path: dst.display(&id.log_path()),
        offset: None,
        size,
        max: max.into(),
    })?;
    if framed.record_crc != record.record_crc || framed.bytes.len() as u64 != record.len {
        return Err(Error::Corrupt {
            path: dst.display(&id.log_path()),
            offset: record.offset,
            expected: format!(
                "the record framed again to be the source's ({} bytes, checksum {:#010x})",
                record.len, record.record_crc
            ),
            found: format!(
                "{} bytes, checksum {:#010x}",
                framed.bytes.len(),
                framed.record_crc
            ),
        });
    }
    Ok(framed)
}

/// The blobs of `needed` that `dst` does not hold.
fn missing_blobs(dst: &Store, needed: IndexSet<BlobId>) -> Result<Vec<BlobId>> {
    // A few are looked up one by one; more against one listing.
    const LOOKUPS: usize = 32;
    if needed.len() <= LOOKUPS {
        let mut missing = Vec::new();
        for id in needed {
            if !dst.blobs().exists_cached(&id)? {
                missing.push(id);
            }
        }
        return Ok(missing);
    }
    let have: HashSet<BlobId> = dst.blobs().ids()?.into_iter().collect();
    Ok(needed.into_iter().filter(|id| !have.contains(id)).collect())
}

/// Reads `ids` from `src` and stores them in `dst`: loose objects for a
/// few, else packs of at most [`BLOB_CHUNK_BYTES`] each. Returns the raw
/// bytes read and the bytes written (objects, packs).
fn send_blobs(
    src: &Store,
    dst: &Store,
    ids: &[BlobId],
    progress: &mut dyn FnMut(CopyProgress<'_>),
) -> Result<(u64, u64)> {
    let blobs = dst.blobs();
    let mut bytes = 0;
    let mut stored = 0;
    if ids.len() <= crate::conversation::writer::LOOSE_BLOBS_MAX {
        for (i, id) in ids.iter().enumerate() {
            let data = src.blobs().get(id)?;
            stored += blobs.put(&data)?.stored_len;
            bytes += data.len() as u64;
            progress(CopyProgress::Blobs {
                done: i + 1,
                total: ids.len(),
            });
        }
        return Ok((bytes, stored));
    }
    let mut done = 0;
    let mut at = 0;
    while at < ids.len() {
        let mut chunk = Vec::new();
        let mut chunk_bytes = 0;
        while at < ids.len() && (chunk.is_empty() || chunk_bytes < BLOB_CHUNK_BYTES) {
            let data = src.blobs().get(&ids[at])?;
            chunk_bytes += data.len() as u64;
            chunk.push(data);
            at += 1;
        }
        let out = blobs.put_batch_compressed(
            blobs.options().import_compression,
            chunk.len(),
            |i, buf| {
                buf.extend_from_slice(&chunk[i]);
                Ok(())
            },
            &mut |_| {},
        )?;
        bytes += chunk_bytes;
        stored += out.pack_bytes;
        done += chunk.len();
        progress(CopyProgress::Blobs {
            done,
            total: ids.len(),
        });
    }
    Ok((bytes, stored))
}

fn sent(id: &ConversationId, outcome: CopyOutcome, records: &[FramedRecord]) -> CopiedConversation {
    CopiedConversation {
        id: id.to_string(),
        outcome,
        records_sent: records.len() as u64,
        log_bytes_sent: records.iter().map(|r| r.bytes.len() as u64).sum(),
        reason: None,
    }
}

/// Creates the log of `id` at `dst`, whole, with `head` (covering every
/// record; none for a log of no record) synced before it appears, as a conversation is created: the
/// records were never in flight there, so none of them is ever taken for a
/// torn tail (format-spec.md 3, "Recovery and classification").
fn create(
    dst: &Store,
    id: &ConversationId,
    format: LogFormat,
    records: &[FramedRecord],
    head: Option<&Head>,
) -> CopiedConversation {
    let backend = &**dst.backend();
    let mut record_head = |published: &crate::log::Published| {
        let Some(head) = head else {
            return Ok(());
        };
        if (published.end, published.last, published.first_crc)
            != (
                head.log_end,
                Some((head.last_record, head.last_record_crc)),
                Some(head.first_record_crc),
            )
        {
            return Err(Error::Corrupt {
                path: backend.display(&id.log_path()),
                offset: published.end,
                expected: format!(
                    "the records to publish to end at {} as the source's do",
                    head.log_end
                ),
                found: format!("records ending at {}", published.end),
            });
        }
        head::store_synced(backend, id, head)
    };
    let made = backend
        .create_prefix(&id.dir())
        .map_err(|e| Error::from_backend(backend, e))
        .and_then(|()| {
            LogWriter::create_published(
                backend,
                &id.log_path(),
                dst.options().log,
                format,
                records,
                &mut record_head,
                &mut || crate::conversation::abandon_creation(backend, id),
            )
        });
    match made {
        Ok(_) => sent(id, CopyOutcome::Created, records),
        Err(Error::AlreadyExists { .. }) => done(
            id,
            CopyOutcome::Conflict,
            Some("created at the destination by another writer while it was copied".into()),
        ),
        Err(e) => done(id, CopyOutcome::Failed, Some(e.to_string())),
    }
}

/// Appends `records` to the log of `id` at `dst`, which ended at `dst_end`
/// when it was compared with the source's, and then writes `head` (the
/// whole log's, once every record is appended and synced) as a writer
/// rewrites the head after its appends: the appended records are proven
/// whole (format-spec.md 4.6).
fn extend(
    dst: &Store,
    id: &ConversationId,
    dst_end: u64,
    records: &[FramedRecord],
    head: Option<&Head>,
) -> CopiedConversation {
    let backend = &**dst.backend();
    let mut writer = match open_writer(backend, id, dst.options().log) {
        Ok(w) => w,
        Err(e) => return done(id, CopyOutcome::Failed, Some(e.to_string())),
    };
    if writer.end() != dst_end {
        return done(
            id,
            CopyOutcome::Conflict,
            Some(format!(
                "its log at the destination changed while it was copied (it ended at {dst_end}, now at {}): run the copy again",
                writer.end()
            )),
        );
    }
    let mut c = sent(id, CopyOutcome::Extended, &[]);
    for r in records {
        if let Err(e) = writer.append_framed(r) {
            c.outcome = CopyOutcome::Failed;
            c.reason = Some(e.to_string());
            break;
        }
        c.records_sent += 1;
        c.log_bytes_sent += r.bytes.len() as u64;
    }
    // Written holding the lock, only over records this writer synced.
    let Some(head) = head else {
        return c;
    };
    if c.outcome == CopyOutcome::Extended
        && writer.synced_end() == writer.end()
        && writer.end() == head.log_end
        && writer.last_record() == Some((head.last_record, head.last_record_crc))
    {
        head::store(backend, id, head);
    }
    c
}

/// The writer of the log of `id`, opened as a conversation's writer opens
/// it (the lock, a torn tail copied aside and cut).
fn open_writer(
    backend: &dyn Backend,
    id: &ConversationId,
    options: LogOptions,
) -> Result<LogWriter> {
    let lock = crate::conversation::writer_lock(backend, id)?;
    let recovery = Recovery {
        proven_end: head::proven_end(backend, id),
        copy_dir: Path::new(QUARANTINE_DIR).join(CONVERSATIONS_DIR),
        copy_prefix: id.to_string(),
    };
    LogWriter::open_under_lock(backend, &id.log_path(), options, lock, &recovery)
        .map_err(|e| crate::conversation::removed_while_waiting(id, e))
}
