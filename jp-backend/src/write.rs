//! Writing what JP hands over at a persist: a conversation's metadata and
//! its whole stream, stored at the cost of what changed.
//!
//! The stream is compared with the one the backend last loaded or wrote
//! for the conversation ([`Known`]: kept in memory with the log state it
//! matches; read from the store when it does not match, another writer
//! having written since). Three outcomes:
//!
//! - **JP added turn events at the end** (the common write: a turn, a tool
//!   call, a response): the known stream with the new events pushed after
//!   it is the stream handed over. Only the new events are written as JP
//!   writes them, converted as an import converts them, and appended as one
//!   durable record, with the metadata that changed in the same record (a
//!   crash leaves both or neither). Nothing of the
//!   rest is serialized: the comparison is of JP's values, in memory.
//! - **JP added anything else at the end** (a config delta, a compaction):
//!   the stream's events as JP writes them start with the known stream's;
//!   the rest is appended the same way.
//! - **JP changed its history** (a compaction removed, turns trimmed or
//!   retained, `sanitize`, another base config): the conversation is
//!   stored whole as an import stores it, and the log it replaces is kept
//!   in the store's quarantine (`Store::rewrite`), where gc keeps what it
//!   references and from where it can be restored (format-spec.md 4.8).
//!
//! A write made from what the backend read before another writer wrote
//! (the log moved since this backend last loaded or wrote it) that does
//! not follow what is stored now is refused with nothing written
//! ([`BackendError::Conflict`]): it would take the other writer's events
//! out of the conversation.
//!
//! A new conversation is imported from the files JP's `FsStorageBackend`
//! would write for it, so that `jp-store export --format jp` gives them
//! back.

use std::path::Path;

use jp_conversation::{Conversation, ConversationEvent, ConversationId, ConversationStream};
use jp_storage::backend::Projection;
use jpstore_engine::conversation::meta::MetaPatch;
use jpstore_engine::event::Object;
use jpstore_engine::Store;
use jpstore_integrations::jp::import::{prepare_checked, source_from_bytes, JpFileBytes};
use jpstore_integrations::jp::{JpInfo, JP_FIELD};
use serde_json::Value;

use crate::backend::{jp_info, JpStoreBackend};
use crate::error::BackendError;
use crate::load::{store_id, LoadError};

/// Where a conversation's log was when its stream was known: its length,
/// records and entries. A write under the conversation's lock that finds
/// the same trusts the stream it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogVersion {
    end: u64,
    records: u64,
    entries: u64,
}

impl LogVersion {
    pub(crate) fn of(
        state: &jpstore_engine::conversation::state::ConversationState,
        end: u64,
    ) -> LogVersion {
        LogVersion {
            end,
            records: state.records,
            entries: state.entries,
        }
    }
}

/// A conversation's stream as last loaded or written, and its log then.
/// Shared, so that a write looks at it without copying JP's events.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) stream: std::sync::Arc<ConversationStream>,
    pub(crate) version: LogVersion,
}

impl Known {
    pub(crate) fn new(stream: ConversationStream, version: LogVersion) -> Known {
        Known {
            stream: std::sync::Arc::new(stream),
            version,
        }
    }
}

/// The stream of conversation `id` as the store holds it, the version of
/// the log it was read from, and whether it is in the archive partition.
pub(crate) fn load_known(
    store: &Store,
    id: &ConversationId,
) -> Result<(ConversationStream, LogVersion, bool), LoadError> {
    let conv = store.read(&store_id(id)?)?;
    let version = LogVersion::of(&conv.state, conv.log_end);
    let archived = jp_info(&conv.state).is_some_and(|i| i.archived);
    Ok((crate::load::stream_of(store, id, &conv)?, version, archived))
}

/// What a write does, found by comparing the streams.
enum Plan {
    /// Append these events (as JP writes them).
    Append(Vec<Value>),
    /// Store the conversation whole, keeping what it replaces.
    Rewrite(&'static str),
}

/// The JSON of `stream`'s parts: its base config and every event, as JP
/// writes them.
fn parts(
    id: &ConversationId,
    stream: &ConversationStream,
) -> Result<(Value, Vec<Value>), BackendError> {
    stream.to_parts().map_err(|source| BackendError::Stream {
        id: id.to_string(),
        source,
    })
}

/// How `new` follows `known` (see the module documentation).
fn plan(
    id: &ConversationId,
    known: &ConversationStream,
    new: &ConversationStream,
) -> Result<Plan, BackendError> {
    let (m, n) = (known.len(), new.len());
    if n >= m && new.compactions().count() == known.compactions().count() {
        // The turn events of `new` after the first `m`, with nothing else:
        // `retain` keeps every config delta, and the compactions of the
        // turns it keeps (none of the removed ones).
        let mut tail = new.clone();
        let mut seen = 0;
        tail.retain(|_| {
            seen += 1;
            seen > m
        });
        let events: Vec<ConversationEvent> = tail.into_iter().map(|e| e.event).collect();
        let mut rebuilt = known.clone();
        rebuilt.extend(events.clone());
        if rebuilt == *new {
            if events.is_empty() {
                return Ok(Plan::Append(Vec::new()));
            }
            let mut only = ConversationStream::new(known.base_config());
            only.extend(events);
            let (_, values) = parts(id, &only)?;
            return Ok(Plan::Append(values));
        }
    }
    let (base_new, values_new) = parts(id, new)?;
    let (base_old, values_old) = parts(id, known)?;
    if base_new != base_old {
        return Ok(Plan::Rewrite(
            "JP's storage backend stored it again with another base config",
        ));
    }
    match values_new.strip_prefix(&values_old[..]) {
        Some(rest) => Ok(Plan::Append(rest.to_vec())),
        None => Ok(Plan::Rewrite(
            "JP's storage backend stored it again with its history changed (events removed or changed)",
        )),
    }
}

/// JP's metadata of a conversation as its `metadata.json` holds it.
fn metadata_fields(id: &ConversationId, metadata: &Conversation) -> Result<Object, BackendError> {
    match serde_json::to_value(metadata) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(other) => Err(BackendError::Json {
            id: id.to_string(),
            what: "JP's metadata",
            source: serde::ser::Error::custom(format!("not an object: {other}")),
        }),
        Err(source) => Err(BackendError::Json {
            id: id.to_string(),
            what: "JP's metadata",
            source,
        }),
    }
}

/// The metadata patch that makes `stored` (a conversation's metadata
/// fields) hold JP's `metadata` and the projection `local`: every field
/// of `metadata.json` that changed, `null` for one that went; the JP
/// information's `local` when it changed. Empty when nothing did.
fn metadata_patch(stored: &Object, new: &Object, local: bool) -> MetaPatch {
    let mut fields = Object::new();
    let info = JpInfo::from_metadata(stored).ok().flatten();
    let ours = |k: &str| {
        k == JP_FIELD || (k == "created" && info.as_ref().is_some_and(|i| i.created_added))
    };
    for (k, v) in new {
        if stored.get(k) != Some(v) {
            fields.insert(k.clone(), v.clone());
        }
    }
    for k in stored.keys() {
        if !ours(k) && !new.contains_key(k) {
            fields.insert(k.clone(), Value::Null);
        }
    }
    if let Some(mut info) = info {
        if info.local != local {
            let before = info.to_value();
            info.local = local;
            fields.insert(
                JP_FIELD.into(),
                crate::backend::replacing(&before, info.to_value()),
            );
        }
    }
    MetaPatch {
        base_config: None,
        fields,
    }
}

/// `value` as JP's `FsStorageBackend` writes it to a file: serde_json's
/// pretty printer and a line break.
pub(crate) fn file_bytes(
    id: &ConversationId,
    value: &impl serde::Serialize,
) -> Result<Vec<u8>, BackendError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| BackendError::Json {
        id: id.to_string(),
        what: "JP's files",
        source,
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The conversation prepared for the store from the files JP's
/// `FsStorageBackend` writes for it, as an import prepares them, with the
/// projection `local` recorded.
fn prepared(
    id: &ConversationId,
    metadata: &Conversation,
    events: &ConversationStream,
    local: bool,
) -> Result<jpstore_engine::import::Prepared, BackendError> {
    let (base, values) = parts(id, events)?;
    let files = JpFileBytes {
        events: file_bytes(id, &values)?,
        metadata: Some(file_bytes(id, metadata)?),
        base_config: Some(file_bytes(id, &base)?),
    };
    let dir = id.to_dirname(metadata.title.as_deref());
    let source = source_from_bytes(Path::new(&dir), files).map_err(BackendError::Store)?;
    let (mut prepared, _) = prepare_checked(source);
    if local {
        if let Some(Value::Object(info)) = prepared.fields.get_mut(JP_FIELD) {
            info.insert("local".into(), Value::Bool(true));
        }
    }
    Ok(prepared)
}

impl JpStoreBackend {
    /// Stores what JP hands over at a persist (see the module
    /// documentation). On an object store, an append beaten to the end of
    /// the log by another writer (nothing written) is planned and made
    /// again from what is there then, as the engine's appends are
    /// (`jpstore_engine::append::retry_on_conflict`): a write that no
    /// longer follows the log is then refused as a conflict.
    pub(crate) fn persist(
        &self,
        id: &ConversationId,
        metadata: &Conversation,
        events: &ConversationStream,
        projection: Projection,
    ) -> Result<(), BackendError> {
        let outcome = jpstore_engine::append::retry_on_conflict(|_| {
            match self.persist_once(id, metadata, events, projection) {
                Err(BackendError::Store(
                    e @ jpstore_engine::error::Error::AppendConflict { .. },
                )) => Err(e),
                other => Ok(other),
            }
        });
        match outcome {
            Ok(result) => result,
            Err(e) => Err(BackendError::Store(e)),
        }
    }

    /// One attempt of [`JpStoreBackend::persist`].
    fn persist_once(
        &self,
        id: &ConversationId,
        metadata: &Conversation,
        events: &ConversationStream,
        projection: Projection,
    ) -> Result<(), BackendError> {
        let local = projection == Projection::LocalOnly;
        let sid = store_id(id)?;
        let fields = metadata_fields(id, metadata)?;
        loop {
            if !self.store.exists(&sid)? {
                let prepared = prepared(id, metadata, events, local)?;
                let (imported, _) = self.store.import(vec![prepared], false, &mut |_| {})?;
                if let Some(jpstore_engine::import::Imported::Stored { .. }) = imported.first() {
                    let conv_state = self.store.read(&sid)?;
                    self.remember(
                        id,
                        events,
                        LogVersion::of(&conv_state.state, conv_state.log_end),
                    );
                    return Ok(());
                }
                // Created meanwhile by another writer: written over below.
            }
            let mut writer = match self.store.writer(&sid) {
                Ok(w) => w,
                Err(e) if e.is_no_conversation() => continue,
                Err(e) => return Err(e.into()),
            };
            let version = LogVersion::of(writer.state(), writer.log_end());
            let cached = self.known.lock().ok().and_then(|k| k.get(id).cloned());
            // `moved`: what this backend last loaded or wrote is no longer
            // the log: another writer wrote since.
            let (known, moved) = match cached {
                Some(k) if k.version == version => (k.stream, None),
                Some(k) => (
                    std::sync::Arc::new(load_known(&self.store, id)?.0),
                    Some(k.version),
                ),
                None => (std::sync::Arc::new(load_known(&self.store, id)?.0), None),
            };
            let why = match plan(id, &known, events)? {
                Plan::Append(values) => {
                    match jpstore_integrations::jp::import::entries_written_by_jp(&values) {
                        Some(entries) => {
                            let patch =
                                metadata_patch(&writer.state().metadata.fields, &fields, local);
                            let patch = (!patch.fields.is_empty()).then_some(patch);
                            // The events and the metadata that changed with
                            // them in one record: a crash leaves both or
                            // neither.
                            match (entries.is_empty(), patch) {
                                (false, patch) => {
                                    writer.append_imported_with(entries, patch)?;
                                }
                                (true, Some(patch)) => {
                                    writer.set_metadata(patch)?;
                                }
                                (true, None) => {}
                            }
                            self.remember(
                                id,
                                events,
                                LogVersion::of(writer.state(), writer.log_end()),
                            );
                            return Ok(());
                        }
                        None => {
                            "JP's storage backend appended entries an append cannot keep as written"
                        }
                    }
                }
                Plan::Rewrite(why) => why,
            };
            if let Some(before) = moved {
                // The stream handed over does not follow the log as it is
                // now, and the log changed since this backend read it: JP
                // is writing over another writer's events, which a rewrite
                // would take out of the conversation. Refused, nothing
                // written.
                return Err(BackendError::Conflict {
                    id: id.to_string(),
                    before: before.entries,
                    now: version.entries,
                });
            }
            let archived = jp_info(writer.state()).is_some_and(|i| i.archived);
            drop(writer);
            let prepared = keep_archived(prepared(id, metadata, events, local)?, archived);
            self.store.rewrite(prepared, why)?;
            let conv = self.store.read(&sid)?;
            self.remember(id, events, LogVersion::of(&conv.state, conv.log_end));
            return Ok(());
        }
    }

    /// Keeps `stream` as conversation `id`'s, at `version` of its log.
    fn remember(&self, id: &ConversationId, stream: &ConversationStream, version: LogVersion) {
        if let Ok(mut known) = self.known.lock() {
            known.insert(*id, Known::new(stream.clone(), version));
        }
    }
}

/// `prepared`, in the archive partition when the conversation it
/// replaces was.
fn keep_archived(
    mut prepared: jpstore_engine::import::Prepared,
    archived: bool,
) -> jpstore_engine::import::Prepared {
    if archived {
        if let Some(Value::Object(info)) = prepared.fields.get_mut(JP_FIELD) {
            info.insert("archived".into(), Value::Bool(true));
        }
    }
    prepared
}
