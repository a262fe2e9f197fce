//! Reading a conversation without a lock: whole batches only.

use jpstore_blobstore::storage::Storage;

use super::codec::{self, LogEntry};
use super::head::{self, Head};
use super::state::ConversationState;
use super::ConversationId;
use crate::error::{Error, Result};
use crate::event::Entry;
use crate::log::{LogOptions, LogReader, FIRST_RECORD};

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
}

/// Where a fold of records stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldEnd {
    /// The offset after the last whole record.
    pub end: u64,
    /// Offset and payload crc32 of the last record folded, if any.
    pub last: Option<(u64, u32)>,
}

/// Decodes the records of `reader` from `from` (a record boundary), folding
/// every entry into `state` and handing event entries with their record's
/// offset to `on_entry`.
///
/// An entry that does not decode is reported as corruption at its record's
/// offset: its checksum matched, so the bytes are what a writer wrote, and a
/// reader that cannot understand them must not guess.
pub fn fold_records(
    reader: &LogReader,
    from: u64,
    state: &mut ConversationState,
    on_entry: &mut dyn FnMut(Entry, u64),
) -> Result<FoldEnd> {
    let mut records = reader.records_from(from)?;
    let mut last = None;
    for record in records.by_ref() {
        let record = record?;
        state.records += 1;
        for (i, bytes) in record.entries.iter().enumerate() {
            let entry = codec::decode(bytes).map_err(|found| Error::Corrupt {
                path: reader.path().to_path_buf(),
                offset: record.offset,
                expected: format!("a decodable entry {i} in the record"),
                found,
            })?;
            state.apply(&entry);
            if let LogEntry::Event(e) = entry {
                on_entry(e, record.offset);
            }
        }
        last = Some((record.offset, record.payload_crc));
    }
    Ok(FoldEnd {
        end: records.position(),
        last,
    })
}

/// Reads a whole conversation.
pub fn read_conversation(
    storage: &dyn Storage,
    id: &ConversationId,
    options: LogOptions,
) -> Result<Conversation> {
    let reader = open_reader(storage, id, options)?;
    let mut state = ConversationState::default();
    let mut entries = Vec::new();
    let mut entry_records = Vec::new();
    let log_end = fold_records(&reader, FIRST_RECORD, &mut state, &mut |e, off| {
        entries.push(e);
        entry_records.push(off);
    })?
    .end;
    Ok(Conversation {
        id: id.clone(),
        entries,
        entry_records,
        state,
        log_end,
    })
}

/// Reads only the state of a conversation (metadata and counts), without
/// keeping its entries: from the head cache plus the records appended since
/// (format-spec.md 4.6), or the whole log when the cache is missing or not
/// trusted. With `refresh`, a cache that was missing or behind is rewritten
/// (best effort). Returns the state and the end of the records read.
pub fn read_state(
    storage: &dyn Storage,
    id: &ConversationId,
    options: LogOptions,
    refresh: bool,
) -> Result<(ConversationState, u64)> {
    let reader = open_reader(storage, id, options)?;
    let cached = head::load(storage, id);
    let (mut state, from, mut last) = match cached.clone() {
        Some(h) => (h.state, h.log_end, Some((h.last_record, h.last_record_crc))),
        None => (ConversationState::default(), FIRST_RECORD, None),
    };
    let fold = fold_records(&reader, from, &mut state, &mut |_, _| {})?;
    last = fold.last.or(last);
    if refresh && (cached.is_none() || fold.end != from) {
        let first = cached
            .as_ref()
            .map(|h| h.first_record_crc)
            .or_else(|| head::first_record_crc(storage, id));
        if let (Some((last_record, last_record_crc)), Some(first_record_crc)) = (last, first) {
            head::store(
                storage,
                id,
                &Head {
                    log_end: fold.end,
                    last_record,
                    last_record_crc,
                    first_record_crc,
                    state: state.clone(),
                },
            );
        }
    }
    Ok((state, fold.end))
}

/// Opens the log of `id` for reading; a missing log is [`Error::NotFound`].
pub fn open_reader(
    storage: &dyn Storage,
    id: &ConversationId,
    options: LogOptions,
) -> Result<LogReader> {
    match LogReader::open(storage, &id.log_path(), options) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(Error::NotFound { id: id.to_string() })
        }
        other => other,
    }
}
