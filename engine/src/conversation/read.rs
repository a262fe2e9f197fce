//! Reading a conversation without a lock: whole batches only.

use jpstore_blobstore::backend::Backend;

use super::codec::{self, LogEntry};
use super::head::{self, Head};
use super::state::ConversationState;
use super::ConversationId;
use crate::error::{Error, Result};
use crate::event::{Entry, EventKind, Object};
use crate::log::{
    content_ref, ContentRef, Framing, LogEnd, LogOptions, LogReader, RecordRef, Step, TornTail,
    Walker, FIRST_RECORD,
};

/// A conversation as read from its log.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// Its id.
    pub id: ConversationId,
    /// Every event and unknown entry, in order.
    pub entries: Vec<Entry>,
    /// Offset of the record holding each entry (parallel to `entries`).
    pub entry_records: Vec<u64>,
    /// Metadata, counts and turn state.
    pub state: ConversationState,
    /// Where the log ended when it was read (the records read end here).
    pub log_end: u64,
    /// What the read left out after the last whole record, if anything.
    pub torn_tail: Option<TornTail>,
}

/// Where a fold of records stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldEnd {
    /// The offset after the last whole record.
    pub end: u64,
    /// Offset and record checksum of the last record folded, if any.
    pub last: Option<(u64, u32)>,
}

/// Decodes the records of `reader` from `from` (a record boundary), folding
/// every entry into `state` and handing event entries with their record's
/// offset to `on_entry`. An entry that does not decode is an error of
/// corruption at its record's offset.
pub fn fold_records(
    reader: &LogReader,
    from: u64,
    state: &mut ConversationState,
    on_entry: &mut dyn FnMut(Entry, u64),
) -> Result<FoldEnd> {
    let mut records = reader.records_from(from)?;
    let mut last = None;
    while let Some(record) = records.next_ref() {
        let record = record?;
        let decoded = decode_records(reader, &[record])?;
        apply_records(&[record], decoded, state, on_entry);
        last = Some((record.offset, record.record_crc));
    }
    Ok(FoldEnd {
        end: records.position(),
        last,
    })
}

/// Folds the records of `reader` from `from` (a record boundary) into
/// `state`, as [`fold_records`] does, without decoding more than the fold
/// reads: in a version 2 log the entry heads, and the body of a record only
/// for its metadata patches.
pub fn fold_state(reader: &LogReader, from: u64, state: &mut ConversationState) -> Result<FoldEnd> {
    let mut records = reader.records_from(from)?;
    let mut last = None;
    while let Some(record) = records.next_ref() {
        let record = record?;
        fold_record_ref(reader, record, state)?;
        last = Some((record.offset, record.record_crc));
    }
    Ok(FoldEnd {
        end: records.position(),
        last,
    })
}

/// Folds one record of the log `reader` reads into `state`, as
/// [`fold_state`] folds each: a version 2 record from its entry heads (its
/// body only for metadata patches), a version 1 batch decoded.
fn fold_record_ref(
    reader: &LogReader,
    record: RecordRef<'_>,
    state: &mut ConversationState,
) -> Result<()> {
    let corrupt = |found: &str| Error::Corrupt {
        path: reader.path().to_path_buf(),
        offset: record.offset,
        expected: "a record whose heads read".into(),
        found: found.into(),
    };
    match (record.content, reader.format().framing) {
        // The walk checked the body: a reader's walk checks every section.
        (ContentRef::Split { heads, body, .. }, Framing::V2) => {
            fold_sections(heads, body, reader.options().max_record_size, state)
                .map_err(|found| corrupt(&found))?;
            state.records += 1;
        }
        (ContentRef::Split { .. }, _) => {
            return Err(corrupt("a version 2 record in a version 1 log"))
        }
        (ContentRef::Batch(_), Framing::V2) => {
            return Err(corrupt("a version 1 batch in a version 2 log"))
        }
        (ContentRef::Batch(_), _) => {
            let decoded = decode_records(reader, &[record])?;
            apply_records(&[record], decoded, state, &mut |_, _| {});
        }
    }
    Ok(())
}

/// The head covering `records`, every record of a log from its first one
/// on, in order, as a command that publishes them whole writes it before
/// they appear (copy, repair: format-spec.md 4.6): their fold, where they
/// end and the checksums of the first and the last. `None` for no record;
/// an entry that does not decode is the error, with its record's offset.
pub(crate) fn head_of_records(
    records: &[crate::log::Record],
    max: u32,
) -> std::result::Result<Option<Head>, (u64, String)> {
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Ok(None);
    };
    let mut state = ConversationState::default();
    for record in records {
        fold_record(record, max, &mut state).map_err(|found| (record.offset, found))?;
    }
    Ok(Some(Head {
        log_end: last.end(),
        last_record: last.offset,
        last_record_crc: last.record_crc,
        first_record_crc: first.record_crc,
        state,
        settings: None,
    }))
}

/// Folds one whole record (its checksums held) into `state`, as a reader's
/// fold does: a version 2 record from its heads, a version 1 batch from its
/// decoded entries.
fn fold_record(
    record: &crate::log::Record,
    max: u32,
    state: &mut ConversationState,
) -> std::result::Result<(), String> {
    match &record.content {
        crate::log::RecordContent::Split { heads, body } => {
            fold_sections(heads, body, max, state)?;
        }
        crate::log::RecordContent::Batch(entries) => {
            codec::check_declared(entries.iter().map(Vec::as_slice), max)?;
            for bytes in entries {
                codec::unpack(bytes, max)?.each(|e| {
                    state.apply(&codec::decode(e)?);
                    Ok(())
                })?;
            }
        }
    }
    state.records += 1;
    Ok(())
}

/// Folds the entries of one version 2 record into `state`, from its heads
/// (and its body for metadata patches).
fn fold_sections(
    heads: &[u8],
    body: &[u8],
    max: u32,
    state: &mut ConversationState,
) -> std::result::Result<(), String> {
    use crate::event::binary::Kind;
    use crate::event::head::EntryHead;
    let body_len = u32::try_from(body.len()).map_err(|_| "a body beyond 4 GiB".to_string())?;
    let open = super::sections::OpenHeads::open(heads, body_len, max)?;
    let mut decoded: Option<std::borrow::Cow<'_, [u8]>> = None;
    for i in 0..open.count() {
        let raw = open.raw(i)?;
        if raw.kind == Kind::MetaPatch {
            if decoded.is_none() {
                decoded = Some(super::sections::decode_body(&open.section, body, max)?);
            }
            let bytes = super::sections::entry_body(&raw, decoded.as_deref().unwrap_or_default())?;
            state.apply(&LogEntry::Meta(super::sections::decode_meta(&raw, bytes)?));
            continue;
        }
        // The fold reads no delta: its head stands in with an empty one.
        let head = EntryHead::from_raw(&raw, &mut |_| Ok(crate::event::Object::new()))?;
        state.apply_head(&head);
    }
    Ok(())
}

/// Folds decoded entries (`(record index, entry)`, in order) into `state`,
/// handing each event with its record's offset to `on_entry`.
fn apply_records(
    records: &[RecordRef<'_>],
    decoded: Vec<(usize, LogEntry)>,
    state: &mut ConversationState,
    on_entry: &mut dyn FnMut(Entry, u64),
) {
    state.records += records.len() as u64;
    for (r, entry) in decoded {
        state.apply(&entry);
        if let LogEntry::Event(e) = entry {
            on_entry(e, records[r].offset);
        }
    }
}

/// Below this many bytes of entries, decoding on one thread is faster than
/// starting others.
const PARALLEL_DECODE_MIN: usize = 256 * 1024;

/// Decodes the entries of `records` on up to all cores, in order, each with
/// the index of its record. An entry that does not decode is reported as
/// corruption at its record's offset: its checksum matched, so the bytes
/// are what a writer wrote, and a reader that cannot understand them must
/// not guess. Packed entries are unpacked first, then the plain entries
/// are decoded in contiguous runs of about equal bytes, so that one large
/// packed record (an import) is shared out too.
fn decode_records(reader: &LogReader, records: &[RecordRef<'_>]) -> Result<Vec<(usize, LogEntry)>> {
    if reader.format().framing == Framing::V2 {
        return decode_records_v2(reader, records);
    }
    let max = reader.options().max_record_size;
    let corrupt = |record: &RecordRef<'_>, i: usize, found: String| Error::Corrupt {
        path: reader.path().to_path_buf(),
        offset: record.offset,
        expected: format!("a decodable entry {i} in the record"),
        found,
    };
    // Every entry of every record, with the record and its place in it.
    let mut raw: Vec<(usize, usize, &[u8])> = Vec::with_capacity(records.len());
    for (r, record) in records.iter().enumerate() {
        let (first, mut i) = (raw.len(), 0);
        record
            .each_entry(|bytes| {
                raw.push((r, i, bytes));
                i += 1;
            })
            .map_err(|found| corrupt(record, i, found))?;
        codec::check_declared(raw[first..].iter().map(|(_, _, b)| *b), max)
            .map_err(|found| corrupt(record, 0, found))?;
    }
    // Packed entries are unpacked on all cores (an import's record holds
    // one per run of about a MiB).
    let packed: Vec<usize> = (0..raw.len())
        .filter(|&k| codec::is_packed(raw[k].2))
        .collect();
    let mut unpacked_packed =
        crate::parallel::map_ordered(&packed, |&k| codec::unpack(raw[k].2, max)).into_iter();
    let mut unpacked = Vec::with_capacity(raw.len());
    for &(r, i, bytes) in &raw {
        let u = if codec::is_packed(bytes) {
            unpacked_packed
                .next()
                .unwrap_or_else(|| codec::unpack(bytes, max))
        } else {
            codec::unpack(bytes, max)
        };
        unpacked.push((r, i, u.map_err(|found| corrupt(&records[r], i, found))?));
    }
    // Every plain entry, with the record and the record entry it is from.
    let mut plain: Vec<(usize, usize, &[u8])> = Vec::with_capacity(unpacked.len());
    for (r, i, u) in &unpacked {
        u.each(|e| {
            plain.push((*r, *i, e));
            Ok(())
        })
        .map_err(|found| corrupt(&records[*r], *i, found))?;
    }
    let decode_run = |run: &[(usize, usize, &[u8])], out: &mut Vec<(usize, LogEntry)>| {
        for (r, i, e) in run {
            let entry = codec::decode(e).map_err(|found| corrupt(&records[*r], *i, found))?;
            out.push((*r, entry));
        }
        Ok::<_, Error>(())
    };
    let bytes: usize = plain.iter().map(|(_, _, e)| e.len()).sum();
    let threads = crate::parallel::cores();
    let mut all = Vec::with_capacity(plain.len());
    if threads < 2 || bytes < PARALLEL_DECODE_MIN {
        decode_run(&plain, &mut all)?;
        return Ok(all);
    }
    let share = bytes.div_ceil(threads);
    let mut runs = Vec::with_capacity(threads);
    let (mut start, mut acc) = (0, 0);
    for (k, (_, _, e)) in plain.iter().enumerate() {
        acc += e.len();
        if acc >= share {
            runs.push(&plain[start..=k]);
            (start, acc) = (k + 1, 0);
        }
    }
    if start < plain.len() {
        runs.push(&plain[start..]);
    }
    // A decoder never panics on any bytes (fuzzed); if one did, the panic
    // would go on in this thread.
    let decoded = crate::parallel::map_ordered(&runs, |run| {
        let mut out = Vec::with_capacity(run.len());
        decode_run(run, &mut out).map(|()| out)
    });
    for run in decoded {
        all.extend(run?);
    }
    Ok(all)
}

/// [`decode_records`] of a version 2 log: each record's sections decoded
/// (its body checked first if the walk did not), on all cores when there is
/// much to decode.
fn decode_records_v2(
    reader: &LogReader,
    records: &[RecordRef<'_>],
) -> Result<Vec<(usize, LogEntry)>> {
    let max = reader.options().max_record_size;
    let decode = |record: &RecordRef<'_>| -> Result<Vec<LogEntry>> {
        let corrupt = |found: String| Error::Corrupt {
            path: reader.path().to_path_buf(),
            offset: record.offset,
            expected: "a record whose heads and body decode".into(),
            found,
        };
        match record.content {
            ContentRef::Split {
                heads,
                body,
                body_crc,
                body_checked,
            } => {
                if !body_checked {
                    check_body(reader.path(), record.offset, body, body_crc)?;
                }
                super::sections::decode_record(heads, body, max).map_err(corrupt)
            }
            ContentRef::Batch(_) => Err(corrupt("a version 1 batch in a version 2 log".into())),
        }
    };
    let bytes: usize = records.iter().map(|r| r.len as usize).sum();
    let decoded: Vec<Result<Vec<LogEntry>>> =
        if crate::parallel::cores() < 2 || bytes < PARALLEL_DECODE_MIN || records.len() < 2 {
            records.iter().map(decode).collect()
        } else {
            crate::parallel::map_ordered(records, decode)
        };
    let mut out = Vec::new();
    for (r, entries) in decoded.into_iter().enumerate() {
        out.extend(entries?.into_iter().map(|e| (r, e)));
    }
    Ok(out)
}

/// Checks the body section of the version 2 record at `offset` of the log
/// `path` against its stored checksum (a walk that left it unchecked).
pub(crate) fn check_body(
    path: &std::path::Path,
    offset: u64,
    body: &[u8],
    stored: u32,
) -> Result<()> {
    let computed = crc32fast::hash(body);
    if computed == stored {
        return Ok(());
    }
    Err(Error::Corrupt {
        path: path.to_path_buf(),
        offset,
        expected: format!("a body section with checksum {stored:#010x}"),
        found: format!("checksum {computed:#010x}: damage to a record the log held whole; run `jp-store fsck --repair`"),
    })
}

/// The most [`read_conversation`] reserves for payloads before reading them.
const PAYLOADS_RESERVE_MAX: u64 = 64 << 20;

/// Reads a whole conversation: every record first (framing and checksums,
/// the payloads copied into one buffer), then their entries decoded on all
/// cores, then folded in order.
pub fn read_conversation(
    backend: &dyn Backend,
    id: &ConversationId,
    options: LogOptions,
) -> Result<Conversation> {
    read_conversation_from(open_reader(backend, id, options)?, id)
}

/// [`read_conversation`] of the log `reader` opened (a writer's own handle:
/// no other open of the log).
pub(crate) fn read_conversation_from(
    mut reader: LogReader,
    id: &ConversationId,
) -> Result<Conversation> {
    if reader.format().framing == Framing::V2 {
        // Read whole into memory, every body checked as it is decoded.
        let image = super::image::LogImage::read(&mut reader, id)?;
        let (entries, entry_records, state) = image.decode_all()?;
        return Ok(Conversation {
            id: id.clone(),
            entries,
            entry_records,
            state,
            log_end: image.log_end(),
            torn_tail: image.torn_tail(),
        });
    }
    let mut walk = reader.records_from(FIRST_RECORD)?;
    // Every payload, back to back, and where each record's is.
    // Reserved for the whole file up to a bound (a file may claim to be huge
    // and still hold few records: the buffer then grows as they are read).
    let reserve = walk.limit().min(PAYLOADS_RESERVE_MAX);
    let mut payloads: Vec<u8> = Vec::with_capacity(usize::try_from(reserve).unwrap_or(0));
    // Per record: offset, length, checksum, where its content lies in
    // `payloads`, and (version 2) its heads length, body checksum and
    // whether the walk checked the body.
    type Place = (
        u64,
        u64,
        u32,
        std::ops::Range<usize>,
        Option<(usize, u32, bool)>,
    );
    let mut places: Vec<Place> = Vec::new();
    while let Some(record) = walk.next_ref() {
        let record = record?;
        let start = payloads.len();
        let split = match record.content {
            ContentRef::Batch(payload) => {
                payloads.extend_from_slice(payload);
                None
            }
            ContentRef::Split {
                heads,
                body,
                body_crc,
                body_checked,
            } => {
                payloads.extend_from_slice(heads);
                payloads.extend_from_slice(body);
                Some((heads.len(), body_crc, body_checked))
            }
        };
        places.push((
            record.offset,
            record.len,
            record.record_crc,
            start..payloads.len(),
            split,
        ));
    }
    let log_end = walk.position();
    let torn_tail = TornTail::of(walk.end());
    drop(walk);
    let records: Vec<RecordRef<'_>> = places
        .into_iter()
        .map(|(offset, len, record_crc, range, split)| {
            let content = &payloads[range];
            RecordRef {
                offset,
                len,
                record_crc,
                content: match split {
                    None => ContentRef::Batch(content),
                    Some((heads_len, body_crc, body_checked)) => {
                        let (heads, body) = content.split_at(heads_len);
                        ContentRef::Split {
                            heads,
                            body,
                            body_crc,
                            body_checked,
                        }
                    }
                },
            }
        })
        .collect();
    let decoded = decode_records(&reader, &records)?;
    let mut state = ConversationState::default();
    let mut entries = Vec::with_capacity(decoded.len());
    let mut entry_records = Vec::with_capacity(decoded.len());
    apply_records(&records, decoded, &mut state, &mut |e, off| {
        entries.push(e);
        entry_records.push(off);
    });
    Ok(Conversation {
        id: id.clone(),
        entries,
        entry_records,
        state,
        log_end,
        torn_tail,
    })
}

/// The config deltas of the records of `reader` at `offsets` (record
/// boundaries, in the log's order), in order: each of those records read
/// alone, checked, and decoded; no other record is read. A writer learns
/// which records hold config deltas as it opens the log, so that the
/// settings in effect need no other read of it.
pub(crate) fn config_deltas_at(reader: &LogReader, offsets: &[u64]) -> Result<Vec<Object>> {
    let mut deltas = Vec::new();
    for &offset in offsets {
        let mut records = reader.records_from(offset)?;
        let record = match records.next_ref() {
            Some(record) => record?,
            None => {
                return Err(Error::Corrupt {
                    path: reader.path().to_path_buf(),
                    offset,
                    expected: "a record holding config deltas".into(),
                    found: "the end of the log".into(),
                })
            }
        };
        for (_, entry) in decode_records(reader, &[record])? {
            if let LogEntry::Event(Entry::Event(event)) = entry {
                if let EventKind::ConfigDelta(d) = event.kind {
                    deltas.push(d.delta);
                }
            }
        }
    }
    Ok(deltas)
}

/// Reads only the state of a conversation (metadata and counts), without
/// keeping its entries: from the head cache plus the records appended since
/// (format-spec.md 4.6), or the whole log when the cache is missing or not
/// trusted. Writes nothing (a head behind the log is brought up to date by
/// the next writer that closes). Returns the state and the end of the
/// records read.
///
/// The head is read once, for its evidence and as the cache; a short log is
/// read whole in one read ([`open_reader_once`]) and everything else (the
/// head's checks against the log, the framing of every record, the fold
/// of those after the cache) is done from that copy. A longer log is
/// walked once, in chunks. Damage found is confirmed by a second look at
/// the log as it is then, as every walk confirms it.
pub fn read_state(
    backend: &dyn Backend,
    id: &ConversationId,
    options: LogOptions,
) -> Result<(ConversationState, u64)> {
    read_state_seen(backend, id, options).map(|(state, end, _)| (state, end))
}

/// [`read_state`], with the metadata of the log as the read opened it,
/// where the backend gives it at an open (a file's `fstat` then,
/// [`LogReader::opened_meta`]): a log written since has other metadata
/// ([`Backend::head`]), so that a caller may keep the state for as long as
/// the log's metadata is this.
pub fn read_state_seen(
    backend: &dyn Backend,
    id: &ConversationId,
    options: LogOptions,
) -> Result<(
    ConversationState,
    u64,
    Option<jpstore_blobstore::backend::ObjectMeta>,
)> {
    match read_state_look(backend, id, options, Look::First) {
        Err(e) if e.is_corruption() => read_state_look(backend, id, options, Look::Again),
        other => other,
    }
}

/// Which look at a log [`read_state`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// The first: a short log read whole at once.
    First,
    /// After damage: the file walked as it is now.
    Again,
}

/// One look of [`read_state`].
fn read_state_look(
    backend: &dyn Backend,
    id: &ConversationId,
    options: LogOptions,
    look: Look,
) -> Result<(
    ConversationState,
    u64,
    Option<jpstore_blobstore::backend::ObjectMeta>,
)> {
    let open = || match look {
        Look::First => open_reader_once(backend, id, options),
        Look::Again => open_reader_at(backend, id, options, 0),
    };
    let (reader, judged) = head::open_for_state(backend, id, open, LogReader::file)?;
    let mut reader = reader.with_proven_end(judged.proven_end);
    let (state, from) = match judged.cache {
        Some(h) => (h.state, h.log_end),
        None => (ConversationState::default(), FIRST_RECORD),
    };
    let framing = reader.format().framing;
    let max = reader.options().max_record_size;
    let proven_end = reader.proven_end();
    let seen = reader.opened_meta();
    let (state, end) = match reader.take_copy() {
        Some(bytes) => {
            let walker = Walker::in_memory(&bytes, bytes.len() as u64, framing, max)
                .with_proven_end(proven_end);
            walk_state(&reader, walker, from, state)
        }
        None => {
            let file = reader.file();
            let len = file.len().map_err(|source| Error::Io {
                op: "stat",
                path: reader.path().to_path_buf(),
                source,
            })?;
            let walker = Walker::new(file, framing, len, max).with_proven_end(proven_end);
            walk_state(&reader, walker, from, state)
        }
    }?;
    Ok((state, end, seen))
}

/// Walks every record of the log `reader` reads with `walker`, checking
/// the framing (both checksums and the structure of every record, no entry
/// decoded) of those before `from` (a record boundary: the part a head
/// cache covers; the cache spares decoding them, never the detection of
/// damage among them, so a listing never counts events that reading the
/// log refuses) and folding those from `from` on into `state`, as
/// [`fold_state`] folds them. Returns the state and where the whole
/// records end.
fn walk_state(
    reader: &LogReader,
    mut walker: Walker<'_>,
    from: u64,
    mut state: ConversationState,
) -> Result<(ConversationState, u64)> {
    let path = reader.path();
    let io = |source| crate::log::read_error("read", path.to_path_buf(), source);
    let mut pos = FIRST_RECORD;
    loop {
        let header = match walker.step(pos).map_err(io)? {
            Step::Record { header, .. } => header,
            Step::End(LogEnd::Damaged { offset, damage }) => {
                return Err(damage.to_error(path, offset))
            }
            Step::End(_) => break,
        };
        let offset = pos;
        pos += header.record_len();
        if offset < from {
            continue;
        }
        // The step has just read and checked these bytes (every section:
        // the walk leaves no body unchecked).
        let content = walker
            .get(offset + header.header_len(), header.content_len())
            .map_err(io)?
            .ok_or_else(|| Error::Corrupt {
                path: path.to_path_buf(),
                offset,
                expected: "a record whose heads read".into(),
                found: "a record cut short after it was read".into(),
            })?;
        let record = RecordRef {
            offset,
            len: header.record_len(),
            record_crc: header.record_crc(),
            content: content_ref(&header, content, true),
        };
        fold_record_ref(reader, record, &mut state)?;
    }
    if pos < from {
        // The log ends before the records its head covers.
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            offset: pos,
            expected: format!("a log at least {from} bytes long (its head cache covers that much)"),
            found: format!("its whole records end at {pos}"),
        });
    }
    Ok((state, pos))
}

/// Opens the log of `id` for reading, with the proven end its head cache
/// gives; a missing log is [`Error::NotFound`].
pub fn open_reader(
    backend: &dyn Backend,
    id: &ConversationId,
    options: LogOptions,
) -> Result<LogReader> {
    // The evidence is checked against the file the reader reads, whatever
    // is at the name by now.
    let (reader, proven_end) = head::open_proven(
        backend,
        id,
        || open_reader_at(backend, id, options, 0),
        LogReader::file,
    )?;
    Ok(reader.with_proven_end(proven_end))
}

/// Opens the log of `id` for reading with `proven_end` (the caller's
/// evidence, such as a head it read: `head::read_for_log`); a missing log
/// is [`Error::NotFound`].
pub fn open_reader_at(
    backend: &dyn Backend,
    id: &ConversationId,
    options: LogOptions,
    proven_end: u64,
) -> Result<LogReader> {
    not_found_as_missing(
        id,
        LogReader::open(backend, &id.log_path(), options),
        proven_end,
    )
}

/// [`open_reader_at`] for one read of the log as it is now
/// ([`LogReader::open_once`]: a short log read whole at once).
pub fn open_reader_once(
    backend: &dyn Backend,
    id: &ConversationId,
    options: LogOptions,
) -> Result<LogReader> {
    not_found_as_missing(
        id,
        LogReader::open_once(backend, &id.log_path(), options),
        0,
    )
}

fn not_found_as_missing(
    id: &ConversationId,
    opened: Result<LogReader>,
    proven_end: u64,
) -> Result<LogReader> {
    match opened {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(Error::NotFound { id: id.to_string() })
        }
        Ok(reader) => Ok(reader.with_proven_end(proven_end)),
        other => other,
    }
}
