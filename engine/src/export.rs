//! The plain JSON form of a conversation (`export --format json`): JP's
//! entries without base64, content inline (or as `{"$blob", "size"}`
//! references on request), metadata and base config beside them.

use jpstore_blobstore::BlobId;
use serde_json::{Map, Value};

use crate::config::Settings;
use crate::conversation::read::Conversation;
use crate::error::{Error, Result};
use crate::event::json::{blob_ref_json, payload_json, render_entry, PayloadKind};
use crate::event::render::{PayloadJson, Rendered};
use crate::event::{BlobRef, Entry, EventKind, Payload};
use crate::store::Store;

/// How content appears in rendered JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentMode {
    /// Read every blob and put the content inline.
    Inline,
    /// Leave `{"$blob", "size"}` references; no blob is read.
    Refs,
}

/// Renders one entry.
pub fn entry_json(store: &Store, entry: &Entry, mode: ContentMode) -> Result<Value> {
    render_entry(entry, &mut |r: &BlobRef, kind: PayloadKind| match mode {
        ContentMode::Refs => Ok(blob_ref_json(r)),
        ContentMode::Inline => {
            let bytes = store.blobs().get(&r.id)?;
            inline_json(store, r, bytes, kind)
        }
    })
}

/// Renders a whole conversation: `{"id", "metadata", "base_config",
/// "events"}`. The metadata holds every field set (title, created, labels,
/// and any others).
pub fn conversation_json(
    store: &Store,
    conversation: &Conversation,
    mode: ContentMode,
) -> Result<Value> {
    let events = conversation
        .entries
        .iter()
        .map(|e| entry_json(store, e, mode))
        .collect::<Result<Vec<_>>>()?;
    let base = match (mode, conversation.state.metadata.base_config) {
        (ContentMode::Refs, Some(r)) => blob_ref_json(&r),
        (_, None) => Value::Null,
        (ContentMode::Inline, Some(_)) => Value::Object(store.base_config(conversation)?),
    };
    let mut out = Map::new();
    out.insert("id".into(), conversation.id.to_string().into());
    out.insert(
        "metadata".into(),
        Value::Object(conversation.state.metadata.fields.clone()),
    );
    out.insert("base_config".into(), base);
    out.insert("events".into(), Value::Array(events));
    Ok(Value::Object(out))
}

/// The view of a conversation as it is sent: its projection with orphans
/// repaired and resources deduplicated under the settings in effect
/// ([`Store::conversation_settings`],
/// [`crate::projection::view_with_config`]). Tool response content is always
/// a list of blocks. Reads the base config, no content.
pub fn view(store: &Store, conversation: &Conversation) -> Result<Vec<Entry<Payload>>> {
    let settings = store.conversation_settings(conversation)?;
    let mut view = crate::projection::view_with_config(&conversation.entries, &settings.base)?;
    as_blocks(&mut view);
    Ok(view)
}

/// [`view`] of a conversation the caller gives up: the entries of the view
/// are moved out of it, not copied.
pub fn into_view(store: &Store, conversation: Conversation) -> Result<Vec<Entry<Payload>>> {
    let settings = store.conversation_settings(&conversation)?;
    let mut view =
        crate::projection::view_traced_owned(conversation.entries, &settings.base)?.entries;
    as_blocks(&mut view);
    Ok(view)
}

/// [`view`] and the settings in effect at the end of the conversation
/// (what a request for it is sent with: model, system prompt), from one
/// read of the base config.
pub fn view_and_settings(
    store: &Store,
    conversation: &Conversation,
) -> Result<(Vec<Entry<Payload>>, Settings)> {
    let settings = store.conversation_settings(conversation)?;
    let mut view = crate::projection::view_with_config(&conversation.entries, &settings.base)?;
    as_blocks(&mut view);
    Ok((view, settings.end))
}

fn as_blocks(view: &mut [Entry<Payload>]) {
    for e in view {
        if let Entry::Event(ev) = e {
            if let EventKind::ToolCallResponse(r) = &mut ev.kind {
                r.plain = false;
            }
        }
    }
}

/// Renders the entries of a view ([`view`], [`into_view`]) as a JSON array,
/// written as it is serialized ([`Rendered`]; check
/// [`Rendered::take_error`] after serializing). With [`ContentMode::Refs`]
/// no content blob is read: content stays `{"$blob", "size"}` references
/// (the text the projection and deduplication create is inline).
pub fn render_view<'a>(
    store: &'a Store,
    view: &'a [Entry<Payload>],
    mode: ContentMode,
) -> Rendered<'a, 'a, Payload, Error> {
    Rendered::entries(
        view,
        Box::new(move |p: &Payload, kind: PayloadKind| match (p, mode) {
            (Payload::Ref(r), ContentMode::Refs) => Ok(PayloadJson::Ref(*r)),
            (Payload::Ref(r), ContentMode::Inline) => {
                let bytes = store.blobs().get(&r.id)?;
                inline_json(store, r, bytes, kind).map(PayloadJson::Value)
            }
            (Payload::Inline(b), _) => payload_json(p, kind)
                .map(PayloadJson::Value)
                .map_err(|found| not_text(store, &BlobId::of(b), found)),
        }),
    )
}

fn inline_json(store: &Store, r: &BlobRef, bytes: Vec<u8>, kind: PayloadKind) -> Result<Value> {
    payload_json(&Payload::Inline(bytes), kind).map_err(|found| not_text(store, &r.id, found))
}

fn not_text(store: &Store, id: &BlobId, found: String) -> Error {
    Error::Blob(jpstore_blobstore::Error::Corrupt {
        path: store.display(store.blobs().base()),
        offset: None,
        expected: format!("blob {id} to be UTF-8 text, as it is referenced"),
        found,
    })
}
