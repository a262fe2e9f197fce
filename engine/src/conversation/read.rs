//! Reading a conversation without a lock: whole batches only.

use jpstore_blobstore::storage::Storage;

use super::codec::{self, LogEntry};
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

/// Decodes the records of `reader` from `from` (a record boundary), folding
/// every entry into `state` and handing event entries with their record's
/// offset to `on_entry`. Returns the offset after the last whole record.
///
/// An entry that does not decode is reported as corruption at its record's
/// offset: its checksum matched, so the bytes are what a writer wrote, and a
/// reader that cannot understand them must not guess.
pub fn fold_records(
    reader: &LogReader,
    from: u64,
    state: &mut ConversationState,
    on_entry: &mut dyn FnMut(Entry, u64),
) -> Result<u64> {
    let mut records = reader.records_from(from)?;
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
    }
    Ok(records.position())
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
    })?;
    Ok(Conversation {
        id: id.clone(),
        entries,
        entry_records,
        state,
        log_end,
    })
}

/// Reads only the state of a conversation (metadata and counts), without
/// keeping its entries.
pub fn read_state(
    storage: &dyn Storage,
    id: &ConversationId,
    options: LogOptions,
) -> Result<(ConversationState, u64)> {
    let reader = open_reader(storage, id, options)?;
    let mut state = ConversationState::default();
    let end = fold_records(&reader, FIRST_RECORD, &mut state, &mut |_, _| {})?;
    Ok((state, end))
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
