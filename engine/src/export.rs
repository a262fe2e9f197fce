//! The plain JSON form of a conversation (`export --format json`): JP's
//! entries without base64, content inline (or as `{"$blob", "size"}`
//! references on request), metadata and base config beside them; and the
//! view of a conversation as `view` prints it ([`Store::open_view`],
//! [`ConversationView`]): a version 2 log's view with references is written
//! straight from its entry heads (`export/refs.rs`), with the settings from
//! the head cache when they are current.

pub(crate) mod entries;
pub(crate) mod events;
mod refs;

pub(crate) use entries::ConversationEntries;
pub(crate) use events::ViewEvents;

use jpstore_blobstore::BlobId;
use serde_json::{Map, Value};

use crate::conversation::head;
use crate::conversation::image::LogImage;
use crate::conversation::read::{
    open_reader_once, read_conversation, read_conversation_from, Conversation,
};
use crate::conversation::state::ConversationState;
use crate::conversation::ConversationId;
use crate::error::{Error, Result};
use crate::event::head::{EntryHead, HeadKind};
use crate::event::json::{blob_ref_json, payload_json, render_entry, PayloadKind};
use crate::event::render::{PayloadJson, Rendered};
use crate::event::{BlobRef, Entry, EventKind, Payload};
use crate::log::Framing;
use crate::log::TornTail;
use crate::store::ConversationSettings;
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
pub(crate) fn entry_json(store: &Store, entry: &Entry, mode: ContentMode) -> Result<Value> {
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
pub(crate) fn conversation_json(
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
pub(crate) fn view(store: &Store, conversation: &Conversation) -> Result<Vec<Entry<Payload>>> {
    let settings = store.conversation_settings(conversation)?;
    let mut view = crate::projection::view_with_config(&conversation.entries, &settings.base);
    as_blocks(&mut view);
    Ok(view)
}

/// [`view`] of a conversation the caller gives up: the entries of the view
/// are moved out of it, not copied.
pub(crate) fn into_view(store: &Store, conversation: Conversation) -> Result<Vec<Entry<Payload>>> {
    let settings = store.conversation_settings(&conversation)?;
    let mut view =
        crate::projection::view_traced_owned(conversation.entries, &settings.base).entries;
    as_blocks(&mut view);
    Ok(view)
}

/// A conversation read for its view ([`Store::open_view`]).
#[derive(Debug)]
pub struct ConversationView<'s> {
    store: &'s Store,
    source: ViewSource,
    settings: ConversationSettings,
}

/// What a view is made from.
#[derive(Debug)]
enum ViewSource {
    /// A version 1 log, decoded.
    Decoded(Conversation),
    /// A version 2 log, in memory (entries decoded only if the view needs
    /// them owned).
    Image(LogImage),
}

impl Store {
    /// Reads conversation `id` for its view: its log (a version 2 log into
    /// memory, its bodies checked only when they are used: format-spec.md 3,
    /// "Reading") and the settings in effect (`Store::settings_cached`),
    /// from the head cache when they are current (4.6): then neither
    /// `config.toml` nor the base config is parsed. Nothing is written: a
    /// view reads (settings computed anew are cached in the head by the
    /// next writer that closes, `ConversationWriter::close`).
    pub fn open_view(&self, id: &ConversationId) -> Result<ConversationView<'_>> {
        let (source, cached) = self.read_view_source(id)?;
        let cache = cached.as_ref();
        let (settings, fresh) = match &source {
            ViewSource::Decoded(conv) => {
                let deltas = conv
                    .entries
                    .iter()
                    .filter_map(|e| match e.event().map(|e| &e.kind) {
                        Some(EventKind::ConfigDelta(d)) => Some(&d.delta),
                        _ => None,
                    });
                self.settings_cached(conv.state.metadata.base_config, deltas, cache)?
            }
            ViewSource::Image(image) => {
                let deltas = image.config_deltas()?;
                self.settings_cached(image.base_config()?, deltas.iter().map(|(_, d)| d), cache)?
            }
        };
        // Settings computed anew (`fresh`) are not written back: a read
        // writes nothing (on S3 it would be a PUT).
        drop(fresh);
        Ok(ConversationView {
            store: self,
            source,
            settings,
        })
    }

    /// Conversation `id`'s log as a view reads it (a version 2 log into
    /// memory with nothing decoded, a version 1 log decoded), the head
    /// judged against the file the reader reads, and the head cache's
    /// settings if it holds some for this log.
    fn read_view_source(
        &self,
        id: &ConversationId,
    ) -> Result<(ViewSource, Option<head::SettingsCache>)> {
        let backend = &**self.backend();
        let (reader, for_log) = head::open_judged(
            backend,
            id,
            || open_reader_once(backend, id, self.options().log),
            crate::log::LogReader::file,
            &|key| self.remembered_settings(key),
        )?;
        let mut reader = reader.with_proven_end(for_log.proven_end);
        let source = match reader.format().framing {
            Framing::V1 => {
                drop(reader);
                ViewSource::Decoded(read_conversation(backend, id, self.options().log)?)
            }
            Framing::V2 => ViewSource::Image(LogImage::read(&mut reader, id)?),
        };
        Ok((source, for_log.settings))
    }
}

/// The view of the log `reader` reads (a version 2 log into memory, a
/// version 1 log decoded), with `settings`: a conversation handle's, which
/// reads through its writer's own handle and holds the settings
/// (`ConversationHandle::view`).
pub(crate) fn view_of<'s>(
    store: &'s Store,
    mut reader: crate::log::LogReader,
    id: &ConversationId,
    settings: ConversationSettings,
) -> Result<ConversationView<'s>> {
    let source = match reader.format().framing {
        Framing::V1 => ViewSource::Decoded(read_conversation_from(reader, id)?),
        Framing::V2 => ViewSource::Image(LogImage::read(&mut reader, id)?),
    };
    Ok(ConversationView {
        store,
        source,
        settings,
    })
}

impl ConversationView<'_> {
    /// The settings in effect: at the start of the conversation (what the
    /// view's deduplication starts from) and at its end (what a request for
    /// it is sent with).
    pub(crate) fn settings(&self) -> &ConversationSettings {
        &self.settings
    }

    /// What the read of the log left out after its last whole record
    /// (a command says so: [`TornTail::warning`]).
    pub fn torn_tail(&self) -> Option<TornTail> {
        match &self.source {
            ViewSource::Decoded(conv) => conv.torn_tail,
            ViewSource::Image(image) => image.torn_tail(),
        }
    }

    /// The framing version of the conversation's log.
    pub(crate) fn log_version(&self) -> u16 {
        match self.source {
            ViewSource::Decoded(_) => Framing::V1.version(),
            ViewSource::Image(_) => Framing::V2.version(),
        }
    }

    /// The view's entries, owned (`view`: tool response content always a
    /// list of blocks), content as references.
    pub fn into_entries(self) -> Result<Vec<Entry<Payload>>> {
        let entries = match self.source {
            ViewSource::Decoded(conv) => conv.entries,
            ViewSource::Image(image) => image.decode_all()?.0,
        };
        let mut view = crate::projection::view_traced_owned(entries, &self.settings.base).entries;
        as_blocks(&mut view);
        Ok(view)
    }

    /// The view's events, as a provider request is made from them: for a
    /// version 2 log, read from its image when they are asked for (texts
    /// borrowed from the records' bodies, nothing decoded but entries of
    /// rarer shapes), planned from entry heads as [`Self::render`] plans
    /// them; for a version 1 log, [`Self::into_entries`].
    pub(crate) fn into_events(self) -> Result<ViewEvents> {
        let image = match self.source {
            ViewSource::Image(image) => image,
            ViewSource::Decoded(_) => return Ok(ViewEvents::of_entries(self.into_entries()?)),
        };
        let (plan, borrowed) = {
            let (parsed, heads) = image.parse_entries_and_heads()?;
            let plan = crate::projection::plan_view(&heads, Some(&self.settings.base));
            let borrowed: Vec<bool> = (0..plan.items.len())
                .map(|i| {
                    parsed
                        .get(plan.items[i].origin)
                        .is_some_and(|p| events::is_borrowed(&plan, i, &p.raw, &p.fields))
                })
                .collect();
            (plan, borrowed)
        };
        ViewEvents::of_image(image, plan, &borrowed)
    }

    /// The view as `view --format json` prints it: a pretty JSON array of
    /// its entries, content as `mode` says. With [`ContentMode::Refs`] no
    /// blob is read, and a version 2 log's view is written from entry
    /// heads, its body parts shown as `{"$text", "size"}` references
    /// (format-spec.md 4.2); a version 1 log's as before.
    pub fn render(self, mode: ContentMode) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        if let (ViewSource::Image(image), ContentMode::Refs) = (&self.source, mode) {
            let (parsed, heads) = image.parse_entries_and_heads()?;
            let plan = crate::projection::plan_view(&heads, Some(&self.settings.base));
            drop(heads);
            refs::render_refs(image, &parsed, &plan, &mut out)?;
            return Ok(out);
        }
        let store = self.store;
        let view = self.into_entries()?;
        let rendered = render_view(store, &view, mode);
        let written = serde_json::to_writer_pretty(&mut out, &rendered);
        if let Some(e) = rendered.take_error() {
            return Err(e);
        }
        written.map_err(|e| Error::Render {
            what: format!("the view as JSON: {e}"),
        })?;
        Ok(out)
    }
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
pub(crate) fn render_view<'a>(
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
