//! The head of an entry: what the projection, deduplication, the folded
//! state and gc decide from (format-spec.md 4.2), borrowed either from an
//! owned [`Entry`] ([`EntryHead::of`]) or from the heads section of a
//! version 2 record ([`EntryHead::from_raw`]), where nothing of the body is
//! read but a config delta's.

use std::borrow::Cow;

use super::binary::decode::{AuxFields, BlockFields, List, ResourceFields};
use super::binary::{RawHead, FLAG_IS_ERROR};
use super::kind::Kind;
use super::model::{BlobRef, Block, ChatResponse, Compaction, Entry, EventKind, Object, Resource};
use crate::timestamp::Timestamp;

pub use super::kind::TurnRole;

/// What the projection and deduplication read of one entry.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryHead<'a> {
    /// When it happened (the epoch for an unknown entry, which has no
    /// timestamp).
    pub timestamp: Timestamp,
    /// Its type and the fields decided from.
    pub kind: HeadKind<'a>,
}

/// The type of an entry and the fields of it that decisions read.
#[derive(Debug, Clone, PartialEq)]
pub enum HeadKind<'a> {
    /// `turn_start`.
    TurnStart,
    /// `chat_request`, with its resources.
    ChatRequest {
        /// The attached resources.
        resources: Resources<'a>,
    },
    /// `chat_response` with a `message`.
    Message,
    /// `chat_response` with `reasoning`.
    Reasoning,
    /// `chat_response` with `data`.
    Data,
    /// `tool_call_request`.
    ToolCallRequest {
        /// The call id.
        id: &'a str,
        /// The tool's name.
        name: &'a str,
    },
    /// `tool_call_response`.
    ToolCallResponse {
        /// The call id it answers.
        id: &'a str,
        /// Whether the tool failed.
        is_error: bool,
        /// The content blocks.
        blocks: Blocks<'a>,
    },
    /// `inquiry_request`.
    InquiryRequest,
    /// `inquiry_response`.
    InquiryResponse,
    /// `config_delta`, with its delta (a version 2 reader decodes it from
    /// the body: deltas are rare and deduplication follows them).
    ConfigDelta(Cow<'a, Object>),
    /// `compaction`.
    Compaction(Cow<'a, Compaction>),
    /// `compaction_undo`: the ordinal of the compaction it revokes.
    CompactionUndo(u64),
    /// An entry of unknown type.
    Unknown,
}

impl HeadKind<'_> {
    /// The kind of the entry.
    pub fn kind(&self) -> Kind {
        match self {
            HeadKind::TurnStart => Kind::TurnStart,
            HeadKind::ChatRequest { .. } => Kind::ChatRequest,
            HeadKind::Message => Kind::Message,
            HeadKind::Reasoning => Kind::Reasoning,
            HeadKind::Data => Kind::Data,
            HeadKind::ToolCallRequest { .. } => Kind::ToolCallRequest,
            HeadKind::ToolCallResponse { .. } => Kind::ToolCallResponse,
            HeadKind::InquiryRequest => Kind::InquiryRequest,
            HeadKind::InquiryResponse => Kind::InquiryResponse,
            HeadKind::ConfigDelta(_) => Kind::ConfigDelta,
            HeadKind::Compaction(_) => Kind::Compaction,
            HeadKind::CompactionUndo(_) => Kind::CompactionUndo,
            HeadKind::Unknown => Kind::Unknown,
        }
    }
}

impl<'a> EntryHead<'a> {
    /// The head of an owned entry, borrowing it.
    pub fn of(entry: &'a Entry) -> EntryHead<'a> {
        let event = match entry {
            Entry::Unknown(_) => {
                return EntryHead {
                    timestamp: Timestamp::EPOCH,
                    kind: HeadKind::Unknown,
                }
            }
            Entry::Event(e) => e,
        };
        let kind = match &event.kind {
            EventKind::TurnStart => HeadKind::TurnStart,
            EventKind::ChatRequest(r) => HeadKind::ChatRequest {
                resources: Resources(Repr::Model(&r.resources)),
            },
            EventKind::ChatResponse(ChatResponse::Message(_)) => HeadKind::Message,
            EventKind::ChatResponse(ChatResponse::Reasoning(_)) => HeadKind::Reasoning,
            EventKind::ChatResponse(ChatResponse::Data(_)) => HeadKind::Data,
            EventKind::ToolCallRequest(r) => HeadKind::ToolCallRequest {
                id: &r.id,
                name: &r.name,
            },
            EventKind::ToolCallResponse(r) => HeadKind::ToolCallResponse {
                id: &r.id,
                is_error: r.is_error,
                blocks: Blocks(Repr::Model(&r.content)),
            },
            EventKind::InquiryRequest(_) => HeadKind::InquiryRequest,
            EventKind::InquiryResponse(_) => HeadKind::InquiryResponse,
            EventKind::ConfigDelta(d) => HeadKind::ConfigDelta(Cow::Borrowed(&d.delta)),
            EventKind::Compaction(c) => HeadKind::Compaction(Cow::Borrowed(c)),
            EventKind::CompactionUndo(u) => HeadKind::CompactionUndo(u.undoes),
        };
        EntryHead {
            timestamp: event.timestamp,
            kind,
        }
    }

    /// The head of a version 2 entry head (its aux checked), or why it is
    /// not one. `delta` gives the decoded `delta` part of a config delta
    /// (the only body part read: the caller checks the body's checksum
    /// first). A metadata patch is not an entry: an error.
    pub fn from_raw(
        raw: &RawHead<'a>,
        delta: &mut dyn FnMut(&RawHead<'a>) -> Result<Object, String>,
    ) -> Result<EntryHead<'a>, String> {
        let fields = AuxFields::read(raw.kind, raw.aux)?;
        Self::from_fields(raw, &fields, delta)
    }

    /// [`EntryHead::from_raw`] of an entry head whose aux fields were read
    /// already.
    pub fn from_fields(
        raw: &RawHead<'a>,
        fields: &AuxFields<'a>,
        delta: &mut dyn FnMut(&RawHead<'a>) -> Result<Object, String>,
    ) -> Result<EntryHead<'a>, String> {
        // Exhaustive on the kind: a new kind does not compile without its
        // head. `AuxFields::read` gives the fields of the kind it is given.
        let mismatch = || {
            format!(
                "aux fields {fields:?} that are not those of a {:?} entry",
                raw.kind
            )
        };
        let kind = match raw.kind {
            Kind::TurnStart => HeadKind::TurnStart,
            Kind::ChatRequest => {
                let AuxFields::ChatRequest { resources, .. } = fields else {
                    return Err(mismatch());
                };
                HeadKind::ChatRequest {
                    resources: Resources(Repr::Binary(*resources)),
                }
            }
            Kind::Message => HeadKind::Message,
            Kind::Reasoning => HeadKind::Reasoning,
            Kind::Data => HeadKind::Data,
            Kind::ToolCallRequest => {
                let AuxFields::ToolCallRequest { id, name } = fields else {
                    return Err(mismatch());
                };
                HeadKind::ToolCallRequest { id, name }
            }
            Kind::ToolCallResponse => {
                let AuxFields::ToolCallResponse { id, blocks } = fields else {
                    return Err(mismatch());
                };
                HeadKind::ToolCallResponse {
                    id,
                    is_error: raw.flags & FLAG_IS_ERROR != 0,
                    blocks: Blocks(Repr::Binary(*blocks)),
                }
            }
            Kind::InquiryRequest => HeadKind::InquiryRequest,
            Kind::InquiryResponse => HeadKind::InquiryResponse,
            Kind::ConfigDelta => HeadKind::ConfigDelta(Cow::Owned(delta(raw)?)),
            Kind::Compaction => {
                let AuxFields::Compaction(c) = fields else {
                    return Err(mismatch());
                };
                HeadKind::Compaction(Cow::Owned((**c).clone()))
            }
            Kind::CompactionUndo => {
                let AuxFields::CompactionUndo(n) = fields else {
                    return Err(mismatch());
                };
                HeadKind::CompactionUndo(*n)
            }
            Kind::Unknown => HeadKind::Unknown,
            Kind::MetaPatch => return Err("a metadata patch where an entry is due".into()),
        };
        Ok(EntryHead {
            timestamp: raw.timestamp,
            kind,
        })
    }

    /// How the entry counts for turn numbering.
    pub fn turn_role(&self) -> TurnRole {
        self.kind.kind().turn_role()
    }

    /// Whether the entry is part of what `view` prints (as
    /// [`in_view`](super::in_view) says of entries).
    pub fn in_view(&self) -> bool {
        self.kind.kind().in_view()
    }

    /// Whether the entry holds a resource (a request's attachment, or a
    /// resource block of a tool response): what deduplication decides on.
    pub fn has_resources(&self) -> bool {
        match &self.kind {
            HeadKind::ChatRequest { resources } => !resources.is_empty(),
            HeadKind::ToolCallResponse { blocks, .. } => blocks.has_resources(),
            _ => false,
        }
    }

    /// Whether the entry is of a known type.
    pub fn is_event(&self) -> bool {
        !matches!(self.kind, HeadKind::Unknown)
    }

    /// Calls `f` on every content payload, in document order (as
    /// [`Entry::for_each_content`] does).
    pub fn for_each_content(&self, f: &mut impl FnMut(BlobRef)) {
        match &self.kind {
            HeadKind::ChatRequest { resources } => {
                for r in resources.iter() {
                    f(r.content);
                    if let Some(formatted) = r.formatted {
                        f(formatted);
                    }
                }
            }
            HeadKind::ToolCallResponse { blocks, .. } => {
                for b in blocks.iter() {
                    match b {
                        BlockHead::Text(t) => f(t),
                        BlockHead::Resource(r) => {
                            f(r.content);
                            if let Some(formatted) = r.formatted {
                                f(formatted);
                            }
                        }
                        BlockHead::Other => {}
                    }
                }
            }
            _ => {}
        }
    }
}

/// What decisions read of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceHead<'a> {
    /// The URI (the identity key for deduplication).
    pub uri: &'a str,
    /// The raw content's blob.
    pub content: BlobRef,
    /// Whether the content is binary.
    pub binary: bool,
    /// The `formatted` text's blob.
    pub formatted: Option<BlobRef>,
}

/// What decisions read of a tool response block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockHead<'a> {
    /// A `text` block and its blob.
    Text(BlobRef),
    /// A `resource` block.
    Resource(ResourceHead<'a>),
    /// A block of a type this build does not know.
    Other,
}

#[derive(Debug)]
enum Repr<'a, T> {
    /// Owned entries' items (content as [`BlobRef`]s).
    Model(&'a [T]),
    /// A version 2 aux list.
    Binary(List<'a>),
}

impl<T> Clone for Repr<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Repr<'_, T> {}

/// The resources of a chat request (equal when they read the same,
/// whichever form they are read from).
#[derive(Debug, Clone, Copy)]
pub struct Resources<'a>(Repr<'a, Resource<BlobRef>>);

impl PartialEq for Resources<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl<'a> Resources<'a> {
    /// No resources.
    pub fn empty() -> Resources<'a> {
        Resources(Repr::Model(&[]))
    }

    /// The resources, in order.
    pub fn iter(&self) -> impl Iterator<Item = ResourceHead<'a>> + 'a {
        let (model, binary) = match self.0 {
            Repr::Model(items) => (Some(items), None),
            Repr::Binary(list) => (None, Some(list)),
        };
        model.into_iter().flatten().map(resource_head).chain(
            binary
                .into_iter()
                .flat_map(|l| l.resources())
                .map(|r| fields_head(&r)),
        )
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        match self.0 {
            Repr::Model(items) => items.len(),
            Repr::Binary(list) => list.count,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The content blocks of a tool response (equal when they read the same,
/// whichever form they are read from).
#[derive(Debug, Clone, Copy)]
pub struct Blocks<'a>(Repr<'a, Block<BlobRef>>);

impl PartialEq for Blocks<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl<'a> Blocks<'a> {
    /// The blocks, in order.
    pub fn iter(&self) -> impl Iterator<Item = BlockHead<'a>> + 'a {
        let (model, binary) = match self.0 {
            Repr::Model(items) => (Some(items), None),
            Repr::Binary(list) => (None, Some(list)),
        };
        model
            .into_iter()
            .flatten()
            .map(|b| match b {
                Block::Text(t) => BlockHead::Text(t.text),
                Block::Resource(rb) => BlockHead::Resource(resource_head(&rb.resource)),
                Block::Other(_) => BlockHead::Other,
            })
            .chain(
                binary
                    .into_iter()
                    .flat_map(|l| l.blocks())
                    .map(|b| match b {
                        BlockFields::Text { text, .. } => BlockHead::Text(text),
                        BlockFields::Resource { resource, .. } => {
                            BlockHead::Resource(fields_head(&resource))
                        }
                        BlockFields::Other(_) => BlockHead::Other,
                    }),
            )
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        match self.0 {
            Repr::Model(items) => items.len(),
            Repr::Binary(list) => list.count,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether any is a resource block (what deduplication decides on).
    pub fn has_resources(&self) -> bool {
        match self.0 {
            Repr::Model(items) => items.iter().any(|b| matches!(b, Block::Resource(_))),
            Repr::Binary(list) => list.resources > 0,
        }
    }
}

fn resource_head(r: &Resource<BlobRef>) -> ResourceHead<'_> {
    ResourceHead {
        uri: &r.uri,
        content: *r.content.payload(),
        binary: matches!(r.content, super::model::ResourceContent::Binary(_)),
        formatted: r.formatted,
    }
}

fn fields_head<'a>(r: &ResourceFields<'a>) -> ResourceHead<'a> {
    ResourceHead {
        uri: r.uri,
        content: r.content,
        binary: r.binary,
        formatted: r.formatted,
    }
}
