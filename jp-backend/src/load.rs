//! A jp-store conversation as JP's loader reads it.
//!
//! The stream is made from the values JP's `FsStorageBackend` reads from
//! the files `jp-store export --format jp` writes for the conversation,
//! taken from its entries without writing the files
//! (`jpstore_integrations::jp::export::jp_values`), as JP makes it from
//! them: a conversation with a `base_config.json` is its base config and
//! events (created at its id's time), one without is of the legacy layout,
//! its base config the first `config_delta` (created at that entry's
//! time). The metadata is read from the files themselves
//! (`jp_files`).

use jp_conversation::{Conversation, ConversationId, ConversationStream, StreamError};
use jpstore_engine::internal::StoreInterior as _;
use jpstore_engine::Store;
use jpstore_integrations::jp::base64::Base64;
use jpstore_integrations::jp::export::{jp_files, jp_values, JpFiles, JpValues};
use serde_json::Value;

/// Why a conversation could not be read as JP reads it.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The store could not give the conversation.
    #[error(transparent)]
    Store(#[from] jpstore_engine::error::Error),
    /// The conversation's JP files, or the values JP reads from them,
    /// could not be made.
    #[error(transparent)]
    Export(#[from] jpstore_integrations::jp::export::JpExportError),
    /// A JP id that is not a jp-store id, or the other way round.
    #[error("{id}: {reason}")]
    Id {
        /// The id.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file made for the conversation is not what JP reads.
    #[error("conversation {id}: {file}: {source}")]
    Json {
        /// The conversation.
        id: String,
        /// `events.json`, `metadata.json` or `base_config.json`.
        file: &'static str,
        /// What JP's JSON reader says.
        source: serde_json::Error,
    },
    /// JP refuses the conversation's stream (as it would refuse its files).
    #[error("conversation {id}: {source}")]
    Stream {
        /// The conversation.
        id: String,
        /// What JP says.
        source: StreamError,
    },
    /// The conversation holds no base config, in a `base_config.json` or
    /// as its first `config_delta`: JP loads no stream from such files.
    #[error("conversation {id}: no base config (no base_config.json, and the first entry is not a config_delta)")]
    NoBaseConfig {
        /// The conversation.
        id: String,
    },
}

/// The jp-store id of JP conversation `id`: its deciseconds.
pub fn store_id(
    id: &ConversationId,
) -> Result<jpstore_engine::conversation::ConversationId, LoadError> {
    let digits = id.as_deciseconds().to_string();
    jpstore_engine::conversation::ConversationId::parse(&digits).map_err(|e| LoadError::Id {
        id: id.to_string(),
        reason: e.to_string(),
    })
}

/// The JP id of jp-store conversation `id` (digits: JP's deciseconds).
pub fn jp_id(
    id: &jpstore_engine::conversation::ConversationId,
) -> Result<ConversationId, LoadError> {
    ConversationId::try_from_deciseconds_str(id.as_str()).map_err(|e| LoadError::Id {
        id: id.to_string(),
        reason: format!("not a JP conversation id: {e}"),
    })
}

/// The JP files of conversation `id` of `store`.
fn files(store: &Store, id: &ConversationId) -> Result<JpFiles, LoadError> {
    let conv = store.read(&store_id(id)?)?;
    Ok(jp_files(store, &conv)?)
}

/// [`stream`] of `conv`, conversation `id` read from `store`, and how many
/// entries of `events.json` its events are (its parts: JP's events, config
/// deltas, compactions and entries JP keeps as they are; for the legacy
/// layout, without the first, the base config).
pub(crate) fn stream_of(
    store: &Store,
    id: &ConversationId,
    conv: &jpstore_engine::internal::conversation::read::Conversation,
) -> Result<(ConversationStream, usize), LoadError> {
    // JP's base64 only where its loader decodes: the same stream, without
    // encoding and decoding the rest (jp-format.md: JP decodes leniently).
    stream_from(id, jp_values(store, conv, Base64::WhereDecoded)?)
}

/// Conversation `id`'s stream, as JP's `FsStorageBackend` loads it from
/// the files of the conversation.
pub fn stream(store: &Store, id: &ConversationId) -> Result<ConversationStream, LoadError> {
    let conv = store.read(&store_id(id)?)?;
    Ok(stream_of(store, id, &conv)?.0)
}

/// The stream of JP conversation `id` from the values of its files, and
/// the number of its parts.
fn stream_from(
    id: &ConversationId,
    values: JpValues,
) -> Result<(ConversationStream, usize), LoadError> {
    let stream_error = |source| LoadError::Stream {
        id: id.to_string(),
        source,
    };
    let entries = values.events.len();
    match values.base_config {
        Some(base) => ConversationStream::from_parts(base, values.events)
            .map(|s| (s.with_created_at(id.timestamp()), entries))
            .map_err(stream_error),
        // `from_parts` of the entries after the first.
        None => match ConversationStream::from_legacy_events(values.events) {
            Ok(Some(stream)) => Ok((stream, entries - 1)),
            Ok(None) => Err(LoadError::NoBaseConfig { id: id.to_string() }),
            Err(e) => Err(stream_error(e)),
        },
    }
}

/// Conversation `id`'s metadata, as JP's `FsStorageBackend` loads it from
/// the files of the conversation: `metadata.json`, with the number of
/// events and the time of the last one from `events.json`.
pub fn metadata(store: &Store, id: &ConversationId) -> Result<Conversation, LoadError> {
    let files = files(store, id)?;
    let mut conversation: Conversation =
        serde_json::from_slice(&files.metadata).map_err(|source| LoadError::Json {
            id: id.to_string(),
            file: "metadata.json",
            source,
        })?;
    (conversation.events_count, conversation.last_event_at) = count_and_last_time(&files.events);
    Ok(conversation)
}

/// The number of entries of an `events.json` and the time of the last
/// one, as JP counts them: `(0, None)` when an entry has no timestamp.
fn count_and_last_time(events: &[u8]) -> (usize, Option<chrono::DateTime<chrono::Utc>>) {
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(events) else {
        return (0, None);
    };
    let mut last = None;
    for item in &items {
        match item.get("timestamp") {
            Some(t) => last = Some(t),
            None => return (0, None),
        }
    }
    let time = last.and_then(Value::as_str).and_then(parse_time);
    (items.len(), time)
}

/// A timestamp of JP's files: RFC 3339, or `YYYY-MM-DD HH:MM:SS[.fff]` in
/// UTC.
pub(crate) fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc())
}
