//! Writing what JP hands over at a persist: a conversation's metadata and
//! its whole stream, stored at the cost of what changed.
//!
//! The stream is compared with the one the backend last loaded or wrote
//! for the conversation ([`Known`]: kept in memory with the log state it
//! matches; read from the store when it does not match, another writer
//! having written since). Three outcomes:
//!
//! - **JP added turn events at the end** (the common write: a turn, a tool
//!   call, a response): the known stream with JP's events after its own
//!   pushed onto it is the stream handed over (JP's `PartialEq`, in place:
//!   nothing of JP's stream is copied but the new events). Only the new
//!   events are written as JP writes them, converted as an import converts
//!   them, and appended as one durable record, with the metadata that
//!   changed in the same record (a crash leaves both or neither). The known
//!   stream, so extended, is the one the next write compares with.
//! - **JP added anything else at the end** (a config delta, a compaction):
//!   the stream's parts as JP writes them, after as many as the known
//!   stream has, added to the known stream, give the stream handed over
//!   (else, as a check of the same: the stream's parts start with the
//!   known stream's); the rest is appended the same way.
//! - **JP changed its history** (a compaction removed, turns trimmed or
//!   retained, `sanitize`, another base config): the conversation is
//!   stored whole as an import stores it, and the log it replaces is kept
//!   in the store's quarantine (`Store::rewrite`), where gc keeps what it
//!   references and from where it can be restored (format-spec.md 4.8).
//!
//! A write made from what the backend read before another writer wrote
//! (the log moved since this backend last loaded or wrote it, or since an
//! attempt of the same write that another writer beat to the end of the
//! log on S3 planned from it) that does not follow what is stored now is
//! refused with nothing written ([`BackendError::Conflict`]): it would
//! take the other writer's events out of the conversation.
//!
//! A new conversation is imported from the files JP's `FsStorageBackend`
//! would write for it, so that `jp-store export --format jp` gives them
//! back.

use jpstore_engine::internal::StoreInterior as _;
use std::path::Path;

use jp_conversation::{Conversation, ConversationEvent, ConversationId, ConversationStream};
use jp_storage::backend::Projection;
use jpstore_engine::conversation::MetaPatch;
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
        state: &jpstore_engine::conversation::ConversationState,
        end: u64,
    ) -> LogVersion {
        LogVersion {
            end,
            records: state.records,
            entries: state.entries,
        }
    }
}

/// What this backend last saw of a conversation: the version of its log
/// when it last loaded or wrote it, and the stream then (`None` once a
/// write made from it failed: to be read again).
#[derive(Debug)]
pub(crate) struct Known {
    pub(crate) version: LogVersion,
    pub(crate) stream: Option<KnownStream>,
}

/// A conversation's stream as last loaded or written, and how many parts
/// it has (the entries of `events.json` its events, config deltas and
/// compactions are). A write takes it, changes it into the stream written
/// and keeps it for the next.
#[derive(Debug)]
pub(crate) struct KnownStream {
    pub(crate) stream: ConversationStream,
    pub(crate) parts: usize,
}

/// The stream of conversation `id` as the store holds it, the version of
/// the log it was read from, and whether it is in the archive partition.
pub(crate) fn load_known(
    store: &Store,
    id: &ConversationId,
) -> Result<(KnownStream, LogVersion, bool), LoadError> {
    let conv = store.read(&store_id(id)?)?;
    let version = LogVersion::of(&conv.state, conv.log_end);
    let archived = jp_info(&conv.state).is_some_and(|i| i.archived);
    let (stream, parts) = crate::load::stream_of(store, id, &conv)?;
    drop_aside(conv);
    Ok((KnownStream { stream, parts }, version, archived))
}

/// Frees a conversation as read: a long one (its entries' values, many
/// small allocations) on a thread of its own, so that the load it served
/// returns without waiting for it.
fn drop_aside(conv: jpstore_engine::internal::conversation::read::Conversation) {
    if conv.entries.len() < DROP_ASIDE_FROM {
        return;
    }
    // A thread that cannot be started: freed here.
    let _ = std::thread::Builder::new()
        .name("jpstore-free".into())
        .spawn(move || drop(conv));
}

/// The fewest entries of a conversation [`drop_aside`] frees on a thread
/// of its own.
const DROP_ASIDE_FROM: usize = 2048;

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

/// What became of the known stream in a step of [`plan`] that found no
/// plan.
enum KnownAfter {
    /// As it was.
    Intact,
    /// Changed: to be read again for the next step.
    Spoiled,
}

/// How `new` follows `known` (see the module documentation). After an
/// append, `known` is `new`: its stream equal to it, and its parts; after
/// a rewrite, it is not to be kept.
fn plan(
    store: &Store,
    id: &ConversationId,
    known: &mut KnownStream,
    new: &ConversationStream,
) -> Result<Plan, BackendError> {
    let reload = |known: &mut KnownStream| -> Result<(), BackendError> {
        *known = load_known(store, id)?.0;
        Ok(())
    };
    match added_turn_events(id, known, new)? {
        Ok(plan) => return Ok(plan),
        Err(KnownAfter::Intact) => {}
        Err(KnownAfter::Spoiled) => reload(known)?,
    }
    match added_parts(id, known, new)? {
        Ok(plan) => return Ok(plan),
        Err(KnownAfter::Intact) => {}
        Err(KnownAfter::Spoiled) => reload(known)?,
    }
    let (base_new, values_new) = parts(id, new)?;
    let (base_old, values_old) = parts(id, &known.stream)?;
    if base_new != base_old {
        return Ok(Plan::Rewrite(
            "JP's storage backend stored it again with another base config",
        ));
    }
    match values_new.strip_prefix(&values_old[..]) {
        Some(rest) => {
            let rest = rest.to_vec();
            known.stream = new.clone();
            known.parts = values_new.len();
            Ok(Plan::Append(rest))
        }
        None => Ok(Plan::Rewrite(
            "JP's storage backend stored it again with its history changed (events removed or changed)",
        )),
    }
}

/// The plan when JP added turn events alone at the end of `known`: JP's
/// events after the known stream's, pushed onto it, make the stream `new`
/// (compared in place). Otherwise the known stream is put back as it was
/// (its pushed events taken off the end), or said spoiled where that
/// would take a compaction with them.
fn added_turn_events(
    id: &ConversationId,
    known: &mut KnownStream,
    new: &ConversationStream,
) -> Result<Result<Plan, KnownAfter>, BackendError> {
    if new.compactions().count() != known.stream.compactions().count() {
        return Ok(Err(KnownAfter::Intact));
    }
    let m = known.stream.len();
    let added: Vec<ConversationEvent> = new
        .iter_events_by_turn()
        .skip(m)
        .map(|(_, e)| e.clone())
        .collect();
    let created = known.stream.created_at;
    known.stream.extend(added.iter().cloned());
    // The time JP's stream was made at is not stored.
    known.stream.created_at = new.created_at;
    if known.stream == *new {
        known.parts += added.len();
        if added.is_empty() {
            return Ok(Ok(Plan::Append(Vec::new())));
        }
        let mut only = ConversationStream::new(known.stream.base_config());
        only.extend(added);
        let (_, values) = parts(id, &only)?;
        return Ok(Ok(Plan::Append(values)));
    }
    known.stream.created_at = created;
    if added.is_empty() {
        return Ok(Err(KnownAfter::Intact));
    }
    // `retain` keeps every config delta and every compaction of a turn it
    // keeps whole: a compaction reaching into the turn the pushed events
    // continue goes too.
    let compactions = known.stream.compactions().count();
    let mut seen = 0;
    known.stream.retain(|_| {
        seen += 1;
        seen <= m
    });
    Ok(Err(
        match known.stream.compactions().count() == compactions {
            true => KnownAfter::Intact,
            false => KnownAfter::Spoiled,
        },
    ))
}

/// The plan when JP added parts of any kind at the end of `known`: the
/// parts of `new` as JP writes them after the known stream's, added to it,
/// make the stream `new` (JP's events and compactions taken from `new`, its
/// config deltas read from their values). Otherwise what became of the
/// known stream.
fn added_parts(
    id: &ConversationId,
    known: &mut KnownStream,
    new: &ConversationStream,
) -> Result<Result<Plan, KnownAfter>, BackendError> {
    // The known stream's events and compactions first in `new` (compared
    // in place), or nothing is added to it.
    let (m, c) = (known.stream.len(), known.stream.compactions().count());
    let events_kept = known
        .stream
        .iter_events_by_turn()
        .map(|(_, e)| e)
        .eq(new.iter_events_by_turn().take(m).map(|(_, e)| e));
    if !events_kept || !known.stream.compactions().eq(new.compactions().take(c)) {
        return Ok(Err(KnownAfter::Intact));
    }
    let Some(tail) = added_values(id, known, new)? else {
        return Ok(Err(KnownAfter::Intact));
    };
    let mut events = new.iter_events_by_turn().skip(m);
    let mut compactions = new.compactions().skip(c);
    let mut spoiled = false;
    let mut fits = true;
    for value in &tail {
        match value.get("type").and_then(Value::as_str) {
            Some("config_delta") => {
                match serde_json::from_value::<jp_conversation::stream::ConfigDelta>(value.clone())
                {
                    Ok(delta) => known.stream.add_config_delta(delta),
                    Err(_) => fits = false,
                }
            }
            Some("compaction") => match compactions.next() {
                Some(c) => known.stream.add_compaction(c.clone()),
                None => fits = false,
            },
            _ => match events.next() {
                Some((_, e)) => known.stream.extend([e.clone()]),
                None => fits = false,
            },
        }
        if !fits {
            break;
        }
        spoiled = true;
    }
    let created = known.stream.created_at;
    known.stream.created_at = new.created_at;
    if fits && known.stream == *new {
        known.parts += tail.len();
        return Ok(Ok(Plan::Append(tail)));
    }
    known.stream.created_at = created;
    Ok(Err(match spoiled {
        true => KnownAfter::Spoiled,
        false => KnownAfter::Intact,
    }))
}

/// The parts of `new` as JP writes them after as many as `known` has
/// (`None` if it has fewer). Where `new` has no other compactions than the
/// known stream, from a copy of `new` cut to its config deltas, the
/// entries JP keeps as they are (`retain` keeps all of these; it takes the
/// compactions of the turns it cuts) and the events after the known
/// stream's: a write that adds a config delta writes those, not the
/// whole stream.
fn added_values(
    id: &ConversationId,
    known: &KnownStream,
    new: &ConversationStream,
) -> Result<Option<Vec<Value>>, BackendError> {
    let (m, c) = (known.stream.len(), known.stream.compactions().count());
    if new.compactions().count() != c {
        let (_, mut values) = parts(id, new)?;
        return Ok((values.len() >= known.parts).then(|| values.split_off(known.parts)));
    }
    let mut rest = new.clone();
    let mut seen = 0;
    rest.retain(|_| {
        seen += 1;
        seen > m
    });
    let (_, mut values) = parts(id, &rest)?;
    // The known stream's config deltas and kept entries come first.
    let Some(before) = known.parts.checked_sub(m + c) else {
        return Ok(None);
    };
    Ok((values.len() >= before).then(|| values.split_off(before)))
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
/// projection `local` recorded; and the number of parts of `events`.
fn prepared(
    id: &ConversationId,
    metadata: &Conversation,
    events: &ConversationStream,
    local: bool,
) -> Result<(jpstore_engine::import::Prepared, usize), BackendError> {
    let (base, values) = parts(id, events)?;
    let files = JpFileBytes {
        events: file_bytes(id, &values)?,
        metadata: Some(file_bytes(id, metadata)?),
        base_config: Some(file_bytes(id, &base)?),
    };
    let dir = id.to_dirname(metadata.title.as_deref());
    let source = source_from_bytes(Path::new(&dir), files)?;
    let (mut prepared, _) = prepare_checked(source);
    if local {
        if let Some(Value::Object(info)) = prepared.fields.get_mut(JP_FIELD) {
            info.insert("local".into(), Value::Bool(true));
        }
    }
    Ok((prepared, values.len()))
}

impl JpStoreBackend {
    /// Stores what JP hands over at a persist (see the module
    /// documentation). On an object store, an append beaten to the end of
    /// the log by another writer (nothing written) is planned and made
    /// again from what is there then, as the engine's appends are
    /// (`jpstore_engine::internal::append::retry_on_conflict`): a write that no
    /// longer follows the log is then refused as a conflict.
    pub(crate) fn persist(
        &self,
        id: &ConversationId,
        metadata: &Conversation,
        events: &ConversationStream,
        projection: Projection,
    ) -> Result<(), BackendError> {
        let outcome = jpstore_engine::internal::append::retry_on_conflict(|_| {
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
                let (prepared, parts) = prepared(id, metadata, events, local)?;
                let (imported, _) =
                    jpstore_engine::import::run(&self.store, vec![prepared], false, &mut |_| {})?;
                if let Some(jpstore_engine::import::Imported::Stored { .. }) = imported.first() {
                    let conv_state = self.store.read(&sid)?;
                    self.remember(
                        id,
                        Known {
                            version: LogVersion::of(&conv_state.state, conv_state.log_end),
                            stream: Some(KnownStream {
                                stream: events.clone(),
                                parts,
                            }),
                        },
                    );
                    return Ok(());
                }
                // Created meanwhile by another writer: written over below.
            }
            let writer = match self.store.writer(&sid) {
                Ok(w) => w,
                Err(e) if e.is_no_conversation() => continue,
                Err(e) => return Err(e.into()),
            };
            // Taken, not copied: kept again (as the stream written) once
            // written. A write that fails leaves the version this backend
            // saw, its stream to be read again.
            let cached = self.known.lock().ok().and_then(|mut k| k.remove(id));
            let seen = cached.as_ref().map(|k| k.version);
            let result = self.write_over(
                id,
                writer,
                cached,
                Written {
                    metadata,
                    fields: &fields,
                    events,
                    local,
                },
            );
            if result.is_err() {
                if let Some(version) = seen {
                    self.remember(
                        id,
                        Known {
                            version,
                            stream: None,
                        },
                    );
                }
            }
            return result;
        }
    }

    /// A write of a conversation that exists, under its `writer`, from
    /// what this backend last saw of it (`cached`).
    fn write_over(
        &self,
        id: &ConversationId,
        mut writer: jpstore_engine::internal::conversation::writer::ConversationWriter<'_>,
        cached: Option<Known>,
        written: Written<'_>,
    ) -> Result<(), BackendError> {
        let Written {
            metadata,
            fields,
            events,
            local,
        } = written;
        let version = LogVersion::of(writer.state(), writer.log_end());
        // `moved`: what this backend last loaded or wrote is no longer the
        // log: another writer wrote since.
        let (mut known, moved) = match cached {
            Some(Known {
                version: seen,
                stream: Some(known),
            }) if seen == version => (known, None),
            Some(k) if k.version == version => (load_known(&self.store, id)?.0, None),
            Some(k) => (load_known(&self.store, id)?.0, Some(k.version)),
            None => (load_known(&self.store, id)?.0, None),
        };
        let why = match plan(&self.store, id, &mut known, events)? {
            Plan::Append(values) => {
                match jpstore_integrations::jp::import::entries_written_by_jp(&values) {
                    Some(entries) => {
                        let patch = metadata_patch(&writer.state().metadata.fields, fields, local);
                        let patch = (!patch.fields.is_empty()).then_some(patch);
                        // The events and the metadata that changed with
                        // them in one record: a crash leaves both or
                        // neither.
                        let appended = match (entries.is_empty(), patch) {
                            (false, patch) => writer.append_imported_with(entries, patch).map(drop),
                            (true, Some(patch)) => writer.set_metadata(patch).map(drop),
                            (true, None) => Ok(()),
                        };
                        if let Err(e) = appended {
                            // Planned from the log as it was (`version`): a
                            // write tried again (another writer appended
                            // first, on S3) must find that the log moved
                            // since, even when this backend had not loaded
                            // the conversation before; else it would take
                            // the stream it was handed, which does not
                            // follow the other writer's events, for JP's
                            // own rewrite of its history.
                            if moved.is_none() {
                                self.remember(
                                    id,
                                    Known {
                                        version,
                                        stream: None,
                                    },
                                );
                            }
                            return Err(e.into());
                        }
                        self.remember(
                            id,
                            Known {
                                version: LogVersion::of(writer.state(), writer.log_end()),
                                stream: Some(known),
                            },
                        );
                        // The head cache left current (a writer dropped
                        // writes nothing).
                        writer.close();
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
            // The stream handed over does not follow the log as it is now,
            // and the log changed since this backend read it: JP is writing
            // over another writer's events, which a rewrite would take out
            // of the conversation. Refused, nothing written.
            return Err(BackendError::Conflict {
                id: id.to_string(),
                before: before.entries,
                now: version.entries,
            });
        }
        let archived = jp_info(writer.state()).is_some_and(|i| i.archived);
        // A tail cut when it was opened is covered by the head.
        writer.close();
        let (prepared, parts) = prepared(id, metadata, events, local)?;
        self.store.rewrite(keep_archived(prepared, archived), why)?;
        let conv = self.store.read(&store_id(id)?)?;
        self.remember(
            id,
            Known {
                version: LogVersion::of(&conv.state, conv.log_end),
                stream: Some(KnownStream {
                    stream: events.clone(),
                    parts,
                }),
            },
        );
        Ok(())
    }

    /// Keeps `known` as conversation `id`'s.
    fn remember(&self, id: &ConversationId, known: Known) {
        if let Ok(mut all) = self.known.lock() {
            all.insert(*id, known);
        }
    }
}

/// What JP hands over at a persist.
struct Written<'a> {
    metadata: &'a Conversation,
    /// JP's metadata as its `metadata.json` holds it.
    fields: &'a Object,
    events: &'a ConversationStream,
    /// Written for the user alone (`Projection::LocalOnly`).
    local: bool,
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

#[cfg(test)]
mod tests {
    use super::*;
    use jp_conversation::event::{ChatRequest, ChatResponse};
    use jp_conversation::Compaction;
    use serde_json::json;

    fn id() -> ConversationId {
        ConversationId::try_from_deciseconds(17_738_400_001).expect("an id")
    }

    /// A stream of `turns` turns (a request and an answer each).
    fn stream(turns: usize) -> ConversationStream {
        let base = json!({
            "conversation": {"tools": {"*": {"run": "ask"}}},
            "assistant": {"model": {"id": {"provider": "anthropic", "name": "claude"}}}
        });
        let mut s = ConversationStream::from_parts(base, Vec::new()).expect("a stream");
        for t in 0..turns {
            add_turn(&mut s, t);
        }
        s
    }

    fn add_turn(s: &mut ConversationStream, t: usize) {
        s.start_turn(ChatRequest::from(format!("question {t}")));
        answer(s, t);
    }

    fn answer(s: &mut ConversationStream, t: usize) {
        s.current_turn_mut()
            .add_chat_response(ChatResponse::message(format!("answer {t}")))
            .build()
            .expect("an answer");
    }

    fn delta(s: &mut ConversationStream, tokens: u64) {
        let delta: jp_config::PartialAppConfig = serde_json::from_value(json!({
            "assistant": {"model": {"parameters": {"max_tokens": tokens}}}
        }))
        .expect("a delta");
        s.add_config_delta(delta);
    }

    fn known(s: &ConversationStream) -> KnownStream {
        KnownStream {
            stream: s.clone(),
            parts: parts(&id(), s).expect("parts").1.len(),
        }
    }

    /// `known` holds `new`: equal to it, with its parts.
    fn holds(known: &KnownStream, new: &ConversationStream) -> bool {
        known.stream == *new && known.parts == parts(&id(), new).expect("parts").1.len()
    }

    fn appended(plan: Plan) -> Vec<Value> {
        match plan {
            Plan::Append(values) => values,
            Plan::Rewrite(why) => panic!("rewritten: {why}"),
        }
    }

    /// The values `new` has after the `n` first.
    fn after(new: &ConversationStream, n: usize) -> Vec<Value> {
        parts(&id(), new).expect("parts").1.split_off(n)
    }

    #[test]
    fn turn_events_are_pushed_onto_the_known_stream_in_place() {
        let old = stream(3);
        let mut k = known(&old);
        let mut new = old.clone();
        add_turn(&mut new, 3);
        answer(&mut new, 3);
        let n = k.parts;
        match added_turn_events(&id(), &mut k, &new).expect("compared") {
            Ok(plan) => assert_eq!(appended(plan), after(&new, n)),
            Err(_) => panic!("not the turn events added"),
        }
        assert!(holds(&k, &new));
        // Nothing added: nothing appended, the same stream.
        match added_turn_events(&id(), &mut k, &new).expect("compared") {
            Ok(plan) => assert!(appended(plan).is_empty()),
            Err(_) => panic!("not the same stream"),
        }
        assert!(holds(&k, &new));
    }

    #[test]
    fn other_parts_leave_the_known_stream_as_it_was_or_say_it_spoiled() {
        let old = stream(3);
        let mut new = old.clone();
        delta(&mut new, 1000);
        add_turn(&mut new, 3);
        let mut k = known(&old);
        assert!(matches!(
            added_turn_events(&id(), &mut k, &new).expect("compared"),
            Err(KnownAfter::Intact)
        ));
        assert!(holds(&k, &old), "put back as it was");
        // A compaction of the last turn goes with the answer taken off it.
        let mut old = stream(3);
        old.add_compaction(Compaction::new(0, 2));
        let mut new = old.clone();
        delta(&mut new, 1000);
        answer(&mut new, 2);
        let mut k = known(&old);
        assert!(matches!(
            added_turn_events(&id(), &mut k, &new).expect("compared"),
            Err(KnownAfter::Spoiled)
        ));
    }

    #[test]
    fn config_deltas_and_compactions_at_the_end_are_added_to_the_known_stream() {
        let mut old = stream(2);
        delta(&mut old, 900);
        add_turn(&mut old, 2);
        let mut new = old.clone();
        delta(&mut new, 1000);
        add_turn(&mut new, 3);
        new.add_compaction(Compaction::new(0, 1));
        answer(&mut new, 3);
        let mut k = known(&old);
        let n = k.parts;
        match added_parts(&id(), &mut k, &new).expect("compared") {
            Ok(plan) => assert_eq!(appended(plan), after(&new, n)),
            Err(_) => panic!("not parts added at the end"),
        }
        assert!(holds(&k, &new));
        // A config delta and an answer, without a compaction: from a copy
        // of `new` cut to its config deltas and new events.
        let old = new.clone();
        delta(&mut new, 1100);
        answer(&mut new, 3);
        let n = k.parts;
        match added_parts(&id(), &mut k, &new).expect("compared") {
            Ok(plan) => assert_eq!(appended(plan), after(&new, n)),
            Err(_) => panic!("not parts added at the end"),
        }
        assert!(holds(&k, &new));
        assert!(!holds(&k, &old));
    }

    #[test]
    fn a_changed_history_is_not_added_to_the_known_stream() {
        let mut old = stream(3);
        old.add_compaction(Compaction::new(0, 0));
        let mut new = old.clone();
        new.remove_compactions();
        add_turn(&mut new, 3);
        let mut k = known(&old);
        assert!(matches!(
            added_parts(&id(), &mut k, &new).expect("compared"),
            Err(KnownAfter::Intact)
        ));
        assert!(holds(&k, &old), "as it was");
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(&dir.path().join("s"), Default::default()).expect("store");
        let mut k = known(&old);
        assert!(matches!(
            plan(&store, &id(), &mut k, &new).expect("planned"),
            Plan::Rewrite(_)
        ));
    }
}
