//! The events of a view as a provider request is made from them
//! ([`ViewEvent`]), borrowed from where they lie: for a version 2 log, its
//! image in memory ([`ViewEvents`]), the text of an entry read from its
//! record's body and the arguments of a tool call written from their
//! binary form, so that a request body is written without the view's
//! entries being decoded, moved and dropped; entries of rarer shapes (a
//! request with resources, a response with resource blocks, structured
//! output, what deduplication or compaction changed) decoded one by one.
//! For a version 1 log, the view's entries decoded as before.

use std::borrow::Cow;

use serde_json::Value;

use crate::conversation::image::LogImage;
use crate::error::{Error, Result};
use crate::event::binary::decode::{
    check_entry_with_texts, AuxFields, BlockFields, BodyParts, List,
};
use crate::event::binary::value::{find_string_leaf, write_json, JsonStyle};
use crate::event::binary::wire::Reader;
use crate::event::binary::{Kind, Part, RawHead, FLAG_IS_ERROR};
use crate::event::{
    BlobRef, Block, ChatRequest, ChatResponse, Entry, EventKind, Object, Payload, Resource,
    ToolCallRequest, ToolCallResponse,
};
use crate::projection::{ItemKind, ViewPlan};

/// The key of the string a reasoning's metadata holds its signature under
/// (the first such string leaf, depth first in document order).
pub const SIGNATURE_KEY: &str = "signature";

/// One event of a view, as a provider request reads it: the fields a
/// request is made of, borrowed.
#[derive(Debug, Clone)]
pub enum ViewEvent<'v> {
    /// A `turn_start`.
    TurnStart,
    /// A `chat_request`: its content and resources (`schema` and `author`
    /// are not sent).
    Request {
        /// The message text.
        content: &'v str,
        /// The attached resources.
        resources: &'v [Resource<Payload>],
    },
    /// A `chat_response` message.
    Message(&'v str),
    /// A `chat_response` reasoning, with the signature its metadata holds
    /// (the first string leaf named [`SIGNATURE_KEY`]).
    Reasoning {
        /// The reasoning text.
        text: &'v str,
        /// The signature, if any.
        signature: Option<Cow<'v, str>>,
    },
    /// A `chat_response` of structured output.
    Data(&'v Value),
    /// A `tool_call_request`.
    ToolCall {
        /// The call id.
        id: &'v str,
        /// The tool's name.
        name: &'v str,
        /// The arguments.
        arguments: Arguments<'v>,
    },
    /// A `tool_call_response`.
    ToolResult {
        /// The id of the request it answers.
        id: &'v str,
        /// Whether the tool failed.
        is_error: bool,
        /// The content blocks.
        content: ToolContent<'v>,
    },
    /// What is not sent to a model: inquiries, config deltas, compactions
    /// and entries of unknown type.
    Other,
}

/// The arguments of a tool call.
#[derive(Debug, Clone, Copy)]
pub enum Arguments<'v> {
    /// An object of the model.
    Object(&'v Object),
    /// An object in the binary form of a log of version 2 (checked), or
    /// none (`{}`).
    Encoded(Option<&'v [u8]>),
}

impl Arguments<'_> {
    /// About how many bytes the arguments take written.
    pub fn weight(&self) -> usize {
        match self {
            Arguments::Object(o) => 16 * o.len(),
            Arguments::Encoded(bytes) => bytes.map_or(2, <[u8]>::len),
        }
    }

    /// Appends the arguments as JSON text, byte for byte as `serde_json`
    /// writes the object (pretty: as nested `depth` levels deep in a
    /// document written pretty).
    pub fn write_json(&self, out: &mut Vec<u8>, style: JsonStyle) -> Result<()> {
        match self {
            Arguments::Object(o) => {
                match style {
                    JsonStyle::Compact => {
                        serde_json::to_writer(&mut *out, o).map_err(|e| Error::Render {
                            what: format!("tool call arguments as JSON: {e}"),
                        })?
                    }
                    JsonStyle::Pretty(depth) => {
                        crate::event::binary::value::push_object_pretty_at(out, o, depth)
                    }
                }
                Ok(())
            }
            Arguments::Encoded(None) => {
                out.extend_from_slice(b"{}");
                Ok(())
            }
            Arguments::Encoded(Some(bytes)) => write_json(&mut Reader::new(bytes), out, style)
                .map_err(|found| Error::Render {
                    what: format!("tool call arguments that do not read ({found})"),
                }),
        }
    }
}

/// The content blocks of a tool call response.
#[derive(Debug, Clone, Copy)]
pub enum ToolContent<'v> {
    /// Blocks of the model.
    Blocks(&'v [Block<Payload>]),
    /// Text blocks, each text a blob, as a log of version 2 holds them.
    Texts(TextRefs<'v>),
}

/// Text blocks of a log of version 2, each text a blob (their MIME types
/// and annotations, which a request does not send, left out).
#[derive(Debug, Clone, Copy)]
pub struct TextRefs<'v> {
    blocks: List<'v>,
}

impl<'v> TextRefs<'v> {
    /// The texts' blobs, in order.
    pub fn iter(&self) -> impl Iterator<Item = BlobRef> + 'v {
        self.blocks.blocks().filter_map(|b| match b {
            BlockFields::Text { text, .. } => Some(text),
            BlockFields::Resource { .. } | BlockFields::Other(_) => None,
        })
    }
}

impl<'v> ViewEvent<'v> {
    /// The event of an entry of a view.
    pub fn of(entry: &'v Entry<Payload>) -> ViewEvent<'v> {
        let Some(event) = entry.event() else {
            return ViewEvent::Other;
        };
        match &event.kind {
            EventKind::TurnStart => ViewEvent::TurnStart,
            EventKind::ChatRequest(ChatRequest {
                content, resources, ..
            }) => ViewEvent::Request { content, resources },
            EventKind::ChatResponse(ChatResponse::Message(text)) => ViewEvent::Message(text),
            EventKind::ChatResponse(ChatResponse::Reasoning(text)) => ViewEvent::Reasoning {
                text,
                signature: find_signature(&event.metadata).map(Cow::Borrowed),
            },
            EventKind::ChatResponse(ChatResponse::Data(data)) => ViewEvent::Data(data),
            EventKind::ToolCallRequest(ToolCallRequest {
                id,
                name,
                arguments,
            }) => ViewEvent::ToolCall {
                id,
                name,
                arguments: Arguments::Object(arguments),
            },
            EventKind::ToolCallResponse(ToolCallResponse {
                id,
                content,
                is_error,
                ..
            }) => ViewEvent::ToolResult {
                id,
                is_error: *is_error,
                content: ToolContent::Blocks(content),
            },
            EventKind::InquiryRequest(_)
            | EventKind::InquiryResponse(_)
            | EventKind::ConfigDelta(_)
            | EventKind::Compaction(_)
            | EventKind::CompactionUndo(_) => ViewEvent::Other,
        }
    }
}

impl<'v> ViewEvent<'v> {
    /// The event of the stored entry of head `raw` and body bytes `body`
    /// (the record's checksum checked), as the view's item of `kind` (an
    /// entry as it is, or a call with its arguments stripped) shows it:
    /// refused as decoding refuses it (`check_entry`), then read where it
    /// lies. For the shapes a view reads borrowed (any but structured
    /// output, which is an error, and resources, which are left out).
    pub fn of_stored(
        raw: &RawHead<'v>,
        body: &'v [u8],
        kind: &ItemKind,
    ) -> std::result::Result<ViewEvent<'v>, String> {
        // Each entry has one text part at most: the one it sends.
        let mut text = "";
        let fields = check_entry_with_texts(raw, body, &mut |_| {}, &mut |_, t| text = t)?;
        borrowed_event(raw, fields, text, BodyParts::new(raw, body)?, kind)
    }
}

/// The first string leaf named [`SIGNATURE_KEY`] of `metadata`, searched
/// depth first in document order.
pub fn find_signature(metadata: &Object) -> Option<&str> {
    // Values are pushed in reverse so that they pop in document order.
    let mut stack: Vec<(Option<&str>, &Value)> = metadata
        .iter()
        .rev()
        .map(|(k, v)| (Some(k.as_str()), v))
        .collect();
    while let Some((key, value)) = stack.pop() {
        match value {
            Value::String(s) if key == Some(SIGNATURE_KEY) => return Some(s),
            Value::Object(o) => stack.extend(o.iter().rev().map(|(k, v)| (Some(k.as_str()), v))),
            Value::Array(a) => stack.extend(a.iter().rev().map(|v| (None, v))),
            _ => {}
        }
    }
    None
}

/// The events of a view (`ConversationView::into_events`),
/// each read when it is asked for ([`ViewEvents::event`]).
#[derive(Debug)]
pub struct ViewEvents {
    source: Source,
}

#[derive(Debug)]
enum Source {
    /// The view's entries (a log of version 1).
    Entries(Vec<Entry<Payload>>),
    /// A log of version 2.
    Image(Box<ImageEvents>),
}

/// The events of a log of version 2: the plan of its view, and the items
/// of rarer shapes decoded.
#[derive(Debug)]
struct ImageEvents {
    image: LogImage,
    plan: ViewPlan,
    /// By item: `NOT_DECODED`, or its place in `decoded`.
    slots: Vec<u32>,
    decoded: Vec<Entry<Payload>>,
}

/// An item read from the image when it is asked for.
const NOT_DECODED: u32 = u32::MAX;

/// Items of rarer shapes decoded on all cores from this many on.
const PARALLEL_DECODE: usize = 512;

/// Item `index` of the view `plan` of the log in `image`, decoded.
fn item_entry(image: &LogImage, plan: &ViewPlan, index: usize) -> Result<Entry<Payload>> {
    let mut failed = None;
    let entry = plan.item_entry(index, &mut |origin| match image.entry(origin) {
        Ok(e) => Some(e),
        Err(e) => {
            failed = Some(e);
            None
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    entry.ok_or_else(|| {
        image.damage(
            plan.items[index].origin,
            "an entry that is not what the view's plan made of it".into(),
        )
    })
}

impl ViewEvents {
    /// The events of the view's `entries`.
    pub(super) fn of_entries(entries: Vec<Entry<Payload>>) -> ViewEvents {
        ViewEvents {
            source: Source::Entries(entries),
        }
    }

    /// The events of the view `plan` of the log in `image`: the items that
    /// `borrowed` says ([`is_borrowed`]) read from the image when asked
    /// for, the others decoded now.
    pub(super) fn of_image(
        image: LogImage,
        plan: ViewPlan,
        borrowed: &[bool],
    ) -> Result<ViewEvents> {
        let rare: Vec<usize> = (0..plan.items.len())
            .filter(|&i| !borrowed.get(i).copied().unwrap_or(false))
            .collect();
        let decode = |indices: &[usize]| -> Result<Vec<Entry<Payload>>> {
            let mut out = Vec::with_capacity(indices.len());
            for &index in indices {
                out.push(item_entry(&image, &plan, index)?);
            }
            Ok(out)
        };
        // Many of them (a conversation of attachments, say): decoded on
        // every core, in one chunk each.
        let threads = crate::parallel::cores();
        let decoded = if rare.len() < PARALLEL_DECODE || threads < 2 {
            decode(&rare)?
        } else {
            let chunks: Vec<&[usize]> = rare.chunks(rare.len().div_ceil(threads)).collect();
            let mut decoded = Vec::with_capacity(rare.len());
            for part in crate::parallel::map_ordered(&chunks, |c| decode(c)) {
                decoded.extend(part?);
            }
            decoded
        };
        let mut slots = vec![NOT_DECODED; plan.items.len()];
        for (k, &index) in rare.iter().enumerate() {
            slots[index] = k as u32;
        }
        Ok(ViewEvents {
            source: Source::Image(Box::new(ImageEvents {
                image,
                plan,
                slots,
                decoded,
            })),
        })
    }

    /// How many events.
    pub fn len(&self) -> usize {
        match &self.source {
            Source::Entries(entries) => entries.len(),
            Source::Image(events) => events.plan.items.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Event `i` (damage of the entry it is read from is an error naming
    /// the log and the record).
    pub fn event(&self, i: usize) -> Result<ViewEvent<'_>> {
        let ImageEvents {
            image,
            plan,
            slots,
            decoded,
        } = match &self.source {
            Source::Entries(entries) => {
                return Ok(entries.get(i).map_or(ViewEvent::Other, ViewEvent::of))
            }
            Source::Image(events) => &**events,
        };
        match slots.get(i) {
            None => return Ok(ViewEvent::Other),
            Some(&NOT_DECODED) => {}
            Some(&slot) => {
                return Ok(decoded
                    .get(slot as usize)
                    .map_or(ViewEvent::Other, ViewEvent::of))
            }
        }
        let item = &plan.items[i];
        let (raw, body, _) = image.entry_body(item.origin)?;
        ViewEvent::of_stored(&raw, body, &item.kind)
            .map_err(|found| image.damage(item.origin, found))
    }

    /// The first event at or after `i` that is a `turn_start` (one of the
    /// view's entries, or injected before a summary), if any.
    pub fn turn_start_from(&self, i: usize) -> Option<usize> {
        match &self.source {
            Source::Entries(entries) => (i..entries.len()).find(|&j| {
                matches!(
                    entries[j].event().map(|e| &e.kind),
                    Some(EventKind::TurnStart)
                )
            }),
            Source::Image(events) => (i..events.plan.items.len()).find(|&j| {
                let item = &events.plan.items[j];
                match item.kind {
                    ItemKind::SummaryStart { .. } => true,
                    ItemKind::Entry => events
                        .image
                        .raw(item.origin)
                        .is_ok_and(|(raw, _)| raw.kind == Kind::TurnStart),
                    _ => false,
                }
            }),
        }
    }

    /// Every event, in order.
    pub fn iter(&self) -> impl Iterator<Item = Result<ViewEvent<'_>>> {
        (0..self.len()).map(|i| self.event(i))
    }
}

/// Whether item `index` of `plan`, made from entries whose heads and aux
/// are `raw` and `fields` (by origin), is read borrowed from the image
/// ([`borrowed_event`] takes it) rather than decoded: an entry as it is
/// (nothing deduplication replaced) or a call with its arguments stripped,
/// of a shape a request is commonly made of.
pub(super) fn is_borrowed(
    plan: &ViewPlan,
    index: usize,
    raw: &RawHead<'_>,
    fields: &AuxFields<'_>,
) -> bool {
    match plan.items[index].kind {
        ItemKind::Entry if plan.replaced(index).is_empty() => {}
        ItemKind::StripArguments => {}
        _ => return false,
    }
    match (raw.kind, fields) {
        (Kind::ChatRequest, AuxFields::ChatRequest { resources, .. }) => resources.count == 0,
        (Kind::ToolCallResponse, AuxFields::ToolCallResponse { blocks, .. }) => {
            blocks.resources == 0
                && blocks
                    .blocks()
                    .all(|b| matches!(b, BlockFields::Text { .. }))
        }
        (Kind::Data, _) => false,
        _ => true,
    }
}

/// The event of an entry read from its head, aux, text part (`text`, its
/// only one) and other body parts (checked), as the view's item of `kind`
/// shows it.
fn borrowed_event<'v>(
    raw: &RawHead<'v>,
    fields: AuxFields<'v>,
    text: &'v str,
    parts: BodyParts<'_, 'v>,
    kind: &ItemKind,
) -> std::result::Result<ViewEvent<'v>, String> {
    let mismatch = |fields: &AuxFields<'_>| {
        format!(
            "aux fields {fields:?} that are not those of a {:?} entry",
            raw.kind
        )
    };
    // Exhaustive on the kind: a new kind does not compile until it is
    // decided here.
    Ok(match raw.kind {
        Kind::TurnStart => ViewEvent::TurnStart,
        Kind::ChatRequest => {
            let AuxFields::ChatRequest { .. } = fields else {
                return Err(mismatch(&fields));
            };
            ViewEvent::Request {
                content: text,
                resources: &[],
            }
        }
        Kind::Message => ViewEvent::Message(text),
        Kind::Reasoning => ViewEvent::Reasoning {
            text,
            signature: match parts.bytes(Part::Metadata) {
                Some(metadata) => find_string_leaf(&mut Reader::new(metadata), SIGNATURE_KEY)?,
                None => None,
            },
        },
        Kind::ToolCallRequest => {
            let AuxFields::ToolCallRequest { id, name } = fields else {
                return Err(mismatch(&fields));
            };
            ViewEvent::ToolCall {
                id,
                name,
                arguments: Arguments::Encoded(match kind {
                    ItemKind::StripArguments => None,
                    _ => parts.bytes(Part::Arguments),
                }),
            }
        }
        Kind::ToolCallResponse => {
            let AuxFields::ToolCallResponse { id, blocks } = fields else {
                return Err(mismatch(&fields));
            };
            ViewEvent::ToolResult {
                id,
                is_error: raw.flags & FLAG_IS_ERROR != 0,
                content: ToolContent::Texts(TextRefs { blocks }),
            }
        }
        Kind::Data => return Err("structured output where a borrowed event is due".into()),
        // Not sent to a model.
        Kind::InquiryRequest
        | Kind::InquiryResponse
        | Kind::ConfigDelta
        | Kind::Compaction
        | Kind::CompactionUndo
        | Kind::Unknown
        | Kind::MetaPatch => ViewEvent::Other,
    })
}
