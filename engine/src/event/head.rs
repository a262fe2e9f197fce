//! The head of an entry: what the projection, deduplication, the folded
//! state and gc decide from (format-spec.md 4.2), borrowed either from an
//! owned [`Entry`] ([`EntryHead::of`]) or from the heads section of a
//! version 2 record ([`EntryHead::from_raw`]), where nothing of the body is
//! read but a config delta's.

use std::borrow::Cow;

use super::binary::decode::{AuxFields, BlockFields, List, ResourceFields};
use super::binary::{Kind, RawHead, FLAG_IS_ERROR};
use super::model::{BlobRef, Block, ChatResponse, Compaction, Entry, EventKind, Object, Resource};
use crate::timestamp::Timestamp;

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

/// How an entry counts for turn numbering (jp-format.md section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnRole {
    /// A `turn_start`.
    TurnStart,
    /// A conversation event (opens turn 0 if there is none, and makes the
    /// next `turn_start` open a new turn).
    Event,
    /// Config deltas, compactions, undos and unknown entries: never open a
    /// turn.
    Other,
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
        let kind = match (raw.kind, fields) {
            (Kind::TurnStart, _) => HeadKind::TurnStart,
            (Kind::ChatRequest, AuxFields::ChatRequest { resources, .. }) => {
                HeadKind::ChatRequest {
                    resources: Resources(Repr::Binary(*resources)),
                }
            }
            (Kind::Message, _) => HeadKind::Message,
            (Kind::Reasoning, _) => HeadKind::Reasoning,
            (Kind::Data, _) => HeadKind::Data,
            (Kind::ToolCallRequest, AuxFields::ToolCallRequest { id, name }) => {
                HeadKind::ToolCallRequest { id, name }
            }
            (Kind::ToolCallResponse, AuxFields::ToolCallResponse { id, blocks }) => {
                HeadKind::ToolCallResponse {
                    id,
                    is_error: raw.flags & FLAG_IS_ERROR != 0,
                    blocks: Blocks(Repr::Binary(*blocks)),
                }
            }
            (Kind::InquiryRequest, _) => HeadKind::InquiryRequest,
            (Kind::InquiryResponse, _) => HeadKind::InquiryResponse,
            (Kind::ConfigDelta, _) => HeadKind::ConfigDelta(Cow::Owned(delta(raw)?)),
            (Kind::Compaction, AuxFields::Compaction(c)) => {
                HeadKind::Compaction(Cow::Owned((**c).clone()))
            }
            (Kind::CompactionUndo, AuxFields::CompactionUndo(n)) => HeadKind::CompactionUndo(*n),
            (Kind::Unknown, _) => HeadKind::Unknown,
            (Kind::MetaPatch, _) => return Err("a metadata patch where an entry is due".into()),
            (kind, fields) => {
                return Err(format!(
                    "aux fields {fields:?} that are not those of a {kind:?} entry"
                ))
            }
        };
        Ok(EntryHead {
            timestamp: raw.timestamp,
            kind,
        })
    }

    /// How the entry counts for turn numbering.
    pub fn turn_role(&self) -> TurnRole {
        match self.kind {
            HeadKind::TurnStart => TurnRole::TurnStart,
            HeadKind::ChatRequest { .. }
            | HeadKind::Message
            | HeadKind::Reasoning
            | HeadKind::Data
            | HeadKind::ToolCallRequest { .. }
            | HeadKind::ToolCallResponse { .. }
            | HeadKind::InquiryRequest
            | HeadKind::InquiryResponse => TurnRole::Event,
            HeadKind::ConfigDelta(_)
            | HeadKind::Compaction(_)
            | HeadKind::CompactionUndo(_)
            | HeadKind::Unknown => TurnRole::Other,
        }
    }

    /// Whether the entry is part of what `view` prints (as
    /// [`in_view`](super::in_view) says of entries).
    pub fn in_view(&self) -> bool {
        matches!(
            self.kind,
            HeadKind::TurnStart
                | HeadKind::ChatRequest { .. }
                | HeadKind::Message
                | HeadKind::Reasoning
                | HeadKind::Data
                | HeadKind::ToolCallRequest { .. }
                | HeadKind::ToolCallResponse { .. }
        )
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
