//! The event model: JP's entry types with the extensions of RFD 058 (typed
//! tool response blocks), RFD 065 (resources on requests), D17 (per-tool
//! compaction overrides) and the compaction `source`.
//!
//! Types are generic over the content payload `C`: in the log and in memory
//! after reading, `C` is a [`BlobRef`] (content lives in the blob store); in
//! JSON input and rendered output it is a [`Payload`] (inline bytes or a
//! reference). [`Entry::try_map_content`] converts between the two.
//!
//! The serde derives define the MessagePack form of log entries
//! (format-spec.md section 4); the JSON form is hand-written in
//! `event/json.rs` so that errors can name the field that is wrong.

use std::collections::BTreeMap;

use jpstore_blobstore::BlobId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::kind::{Kind, TurnRole};
use crate::timestamp::Timestamp;

/// A JSON object (field order kept).
pub type Object = Map<String, Value>;

/// A reference to content in the blob store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobRef {
    /// SHA-256 of the raw content.
    pub id: BlobId,
    /// Length of the raw content in bytes.
    pub size: u64,
}

/// Content as it appears in JSON: inline bytes, or a reference to a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// The content itself (UTF-8 text for text fields, any bytes for binary).
    Inline(Vec<u8>),
    /// A reference to content already in the blob store.
    Ref(BlobRef),
}

impl Payload {
    /// Length of the content in bytes (a reference's recorded size).
    pub fn len(&self) -> u64 {
        match self {
            Payload::Inline(b) => b.len() as u64,
            Payload::Ref(r) => r.size,
        }
    }

    /// Whether the content is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Entry<BlobRef> {
    /// The entry with each reference as a [`Payload::Ref`] (no blob is
    /// read): a logged entry in the form the view and its renderers take.
    pub(crate) fn into_payload_refs(self) -> Entry<Payload> {
        self.try_map_content(&mut |r| Ok::<_, std::convert::Infallible>(Payload::Ref(r)))
            .unwrap_or_else(|never| match never {})
    }
}

#[cfg(test)]
impl Entry<Payload> {
    /// The entry as a log holds it, each inline payload replaced by a
    /// reference to its SHA-256 (for tests that need no blob store).
    pub(crate) fn hashed(self) -> Entry<BlobRef> {
        self.try_map_content(&mut |p| match p {
            Payload::Inline(b) => Ok::<_, std::convert::Infallible>(BlobRef {
                id: BlobId::of(&b),
                size: b.len() as u64,
            }),
            Payload::Ref(r) => Ok(r),
        })
        .unwrap_or_else(|never| match never {})
    }
}

/// One entry of a conversation: a known event, or an entry of a type this
/// build does not know, kept verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
// Nearly every entry is an event: boxing it would cost an allocation per
// entry to save space only on the rare unknown ones.
#[allow(clippy::large_enum_variant)]
pub enum Entry<C = BlobRef> {
    /// An entry of a known type.
    Event(Event<C>),
    /// An entry of unknown type (or, from a lenient import, of a known type
    /// whose fields do not fit the model): the whole JSON object, untouched.
    Unknown(Object),
}

/// An entry of a known type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
#[serde(deny_unknown_fields)]
pub struct Event<C = BlobRef> {
    /// When it happened (UTC).
    pub timestamp: Timestamp,
    /// What happened.
    pub kind: EventKind<C>,
    /// The event's opaque `metadata` object (empty when absent).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Object,
    /// Top-level fields this build does not know, kept for export.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Object,
}

/// The known entry types (jp-format.md section 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
pub enum EventKind<C = BlobRef> {
    /// Opens a new turn if the current one holds a conversation event.
    TurnStart,
    /// A user message, with attached resources (RFD 065).
    ChatRequest(ChatRequest<C>),
    /// One piece of the assistant's answer.
    ChatResponse(ChatResponse),
    /// The assistant calls a tool.
    ToolCallRequest(ToolCallRequest),
    /// A tool's result, as content blocks (RFD 058).
    ToolCallResponse(ToolCallResponse<C>),
    /// A question to the user, the assistant or a tool.
    InquiryRequest(InquiryRequest),
    /// The answer to an inquiry.
    InquiryResponse(InquiryResponse),
    /// A sparse config object merged over the config before it.
    ConfigDelta(ConfigDelta),
    /// A non-destructive compaction overlay (RFD 064, D17).
    Compaction(Compaction),
    /// Revokes an earlier compaction (`compact --undo`): the view is as if
    /// that compaction had never been made. A jp-store extension.
    CompactionUndo(CompactionUndo),
}

impl<C> EventKind<C> {
    /// The `type` name of the entry in JSON.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::TurnStart => "turn_start",
            EventKind::ChatRequest(_) => "chat_request",
            EventKind::ChatResponse(_) => "chat_response",
            EventKind::ToolCallRequest(_) => "tool_call_request",
            EventKind::ToolCallResponse(_) => "tool_call_response",
            EventKind::InquiryRequest(_) => "inquiry_request",
            EventKind::InquiryResponse(_) => "inquiry_response",
            EventKind::ConfigDelta(_) => "config_delta",
            EventKind::Compaction(_) => "compaction",
            EventKind::CompactionUndo(_) => "compaction_undo",
        }
    }

    /// The kind of the event (a chat response's by the field it has).
    pub(crate) fn kind(&self) -> Kind {
        match self {
            EventKind::TurnStart => Kind::TurnStart,
            EventKind::ChatRequest(_) => Kind::ChatRequest,
            EventKind::ChatResponse(ChatResponse::Message(_)) => Kind::Message,
            EventKind::ChatResponse(ChatResponse::Reasoning(_)) => Kind::Reasoning,
            EventKind::ChatResponse(ChatResponse::Data(_)) => Kind::Data,
            EventKind::ToolCallRequest(_) => Kind::ToolCallRequest,
            EventKind::ToolCallResponse(_) => Kind::ToolCallResponse,
            EventKind::InquiryRequest(_) => Kind::InquiryRequest,
            EventKind::InquiryResponse(_) => Kind::InquiryResponse,
            EventKind::ConfigDelta(_) => Kind::ConfigDelta,
            EventKind::Compaction(_) => Kind::Compaction,
            EventKind::CompactionUndo(_) => Kind::CompactionUndo,
        }
    }

    /// Whether the event is a conversation event (one that makes a later
    /// `turn_start` open a new turn, jp-format.md section 3). Turn starts,
    /// config deltas and compactions are not ([`Kind::turn_role`]).
    pub(crate) fn is_conversation_event(&self) -> bool {
        self.kind().turn_role() == TurnRole::Event
    }
}

/// A user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
#[serde(deny_unknown_fields)]
pub struct ChatRequest<C = BlobRef> {
    /// The message text (kept in the log, not in the blob store).
    pub content: String,
    /// A JSON schema the answer must follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Object>,
    /// Who wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Attached resources (RFD 065).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Resource<C>>,
}

/// One piece of the assistant's answer: exactly one of the three.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatResponse {
    /// Text for the user.
    Message(String),
    /// The model's reasoning.
    Reasoning(String),
    /// Structured output (any JSON).
    Data(Value),
}

/// A tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallRequest {
    /// The call's id (matched by the response; may be reused in JP files).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments (an object; `{}` when absent).
    #[serde(default)]
    pub arguments: Object,
}

/// A tool's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
#[serde(deny_unknown_fields)]
pub struct ToolCallResponse<C = BlobRef> {
    /// Id of the request it answers.
    pub id: String,
    /// The content blocks (RFD 058).
    pub content: Vec<Block<C>>,
    /// Whether the content was given as a plain string (one text block): kept
    /// so that export gives back the form that was appended.
    #[serde(default, skip_serializing_if = "is_false")]
    pub plain: bool,
    /// Whether the tool failed.
    pub is_error: bool,
}

/// A content block of a tool response (RFD 058).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
pub enum Block<C = BlobRef> {
    /// Text for the model, formatted by the tool.
    Text(TextBlock<C>),
    /// Identified content (RFD 065 resource).
    Resource(ResourceBlock<C>),
    /// A block of a type this build does not know (e.g. `question`), kept
    /// verbatim and inline.
    Other(Object),
}

/// A `text` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
#[serde(deny_unknown_fields)]
pub struct TextBlock<C = BlobRef> {
    /// The text (UTF-8).
    pub text: C,
    /// Format of the text (JP extension), e.g. `text/markdown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// MCP annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// Fields this build does not know.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Object,
}

/// A `resource` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
#[serde(deny_unknown_fields)]
pub struct ResourceBlock<C = BlobRef> {
    /// The resource.
    pub resource: Resource<C>,
    /// Fields of the block (beside `type` and `resource`) this build does not
    /// know.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Object,
}

/// A resource (RFD 065): identified content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
#[serde(deny_unknown_fields)]
pub struct Resource<C = BlobRef> {
    /// Canonical URI: the identity key for deduplication.
    pub uri: String,
    /// The raw content (checksums are always of this, never of `formatted`).
    pub content: ResourceContent<C>,
    /// MIME type of the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// MCP annotations (audience, priority, lastModified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// Short name (e.g. the path relative to the workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Pre-formatted text for delivery to the model (stored as a blob, like
    /// the content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formatted: Option<C>,
    /// Fields this build does not know.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Object,
}

/// The content of a resource: text (`text` in JSON) or binary (`blob`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
pub enum ResourceContent<C = BlobRef> {
    /// UTF-8 text.
    Text(C),
    /// Binary data (base64 in JSON).
    Binary(C),
}

impl<C> ResourceContent<C> {
    /// The payload, whichever kind it is.
    pub fn payload(&self) -> &C {
        match self {
            ResourceContent::Text(c) | ResourceContent::Binary(c) => c,
        }
    }
}

/// A question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InquiryRequest {
    /// The inquiry's id.
    pub id: String,
    /// Who asks: `{"source": "tool", "name": ..}`, `{"source": "assistant"}`,
    /// `{"source": "user"}` or `{"source": "other", "name": ..}`.
    pub source: Object,
    /// `{text, answer_type, default?}`.
    pub question: Object,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InquiryResponse {
    /// Id of the inquiry it answers.
    pub id: String,
    /// The answer (any JSON).
    pub answer: Value,
}

/// A config delta.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigDelta {
    /// The sparse config object.
    pub delta: Object,
}

/// A compaction overlay (jp-format.md sections 4-5; RFD 064; D17).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compaction {
    /// First covered turn (0-based, inclusive).
    pub from_turn: u64,
    /// Last covered turn (inclusive).
    pub to_turn: u64,
    /// Summary text replacing the covered turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Whether reasoning is stripped.
    #[serde(default, skip_serializing_if = "is_false")]
    pub strip_reasoning: bool,
    /// What happens to tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolCallPolicy>,
    /// Per-tool hints frozen when the compaction was created (D17).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_overrides: BTreeMap<String, ToolOverride>,
    /// Who created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<CompactionSource>,
}

/// The revocation of a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionUndo {
    /// Which compaction: its 0-based ordinal among the conversation's
    /// compaction entries, in stream order.
    pub undoes: u64,
}

/// The tool call policy of a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[serde(deny_unknown_fields)]
pub enum ToolCallPolicy {
    /// Strip arguments (`request`) and/or content (`response`).
    Strip {
        /// Strip request arguments.
        request: bool,
        /// Strip response content.
        response: bool,
    },
    /// Drop requests and responses.
    Omit,
}

/// A per-tool hint: `keep` or `strip` for the request and the response;
/// `None` inherits from the compaction's policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// Mode for the request's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<FieldMode>,
    /// Mode for the response's content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<FieldMode>,
}

/// `keep` or `strip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldMode {
    /// Not stripped.
    Keep,
    /// Stripped.
    Strip,
}

impl std::fmt::Display for FieldMode {
    /// The JSON name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FieldMode {
    /// The JSON name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FieldMode::Keep => "keep",
            FieldMode::Strip => "strip",
        }
    }
}

/// Who created a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionSource {
    /// A person, with `compact`.
    Manual,
    /// Automatic compaction (D17).
    Auto,
}

impl std::fmt::Display for CompactionSource {
    /// The JSON name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl CompactionSource {
    /// The JSON name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CompactionSource::Manual => "manual",
            CompactionSource::Auto => "auto",
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

// ----- walking content ---------------------------------------------------------

impl<C> Entry<C> {
    /// Converts every content payload with `f`, keeping everything else.
    /// Payloads are visited in document order.
    pub(crate) fn try_map_content<D, E>(
        self,
        f: &mut impl FnMut(C) -> Result<D, E>,
    ) -> Result<Entry<D>, E> {
        Ok(match self {
            Entry::Unknown(o) => Entry::Unknown(o),
            Entry::Event(e) => Entry::Event(Event {
                timestamp: e.timestamp,
                metadata: e.metadata,
                extra: e.extra,
                kind: e.kind.try_map_content(f)?,
            }),
        })
    }

    /// Calls `f` on every content payload, in document order.
    pub(crate) fn for_each_content(&self, f: &mut impl FnMut(&C)) {
        let Entry::Event(e) = self else { return };
        match &e.kind {
            EventKind::ChatRequest(r) => {
                for res in &r.resources {
                    res.for_each_content(f);
                }
            }
            EventKind::ToolCallResponse(r) => {
                for b in &r.content {
                    match b {
                        Block::Text(t) => f(&t.text),
                        Block::Resource(rb) => rb.resource.for_each_content(f),
                        Block::Other(_) => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// Calls `f` on every content payload with whether it is text (`true`:
    /// text blocks, resource `text`, `formatted`) or binary (resource
    /// `blob`), in document order.
    pub(crate) fn for_each_content_kind(&self, f: &mut impl FnMut(&C, bool)) {
        let Entry::Event(e) = self else { return };
        let resource = |r: &Resource<C>, f: &mut dyn FnMut(&C, bool)| {
            match &r.content {
                ResourceContent::Text(c) => f(c, true),
                ResourceContent::Binary(c) => f(c, false),
            }
            if let Some(c) = &r.formatted {
                f(c, true);
            }
        };
        match &e.kind {
            EventKind::ChatRequest(r) => {
                for res in &r.resources {
                    resource(res, f);
                }
            }
            EventKind::ToolCallResponse(r) => {
                for b in &r.content {
                    match b {
                        Block::Text(t) => f(&t.text, true),
                        Block::Resource(rb) => resource(&rb.resource, f),
                        Block::Other(_) => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// The kind of the entry ([`Kind::Unknown`] for an entry of unknown
    /// type).
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Entry::Event(e) => e.kind.kind(),
            Entry::Unknown(_) => Kind::Unknown,
        }
    }

    /// The event, if the entry is of a known type.
    pub fn event(&self) -> Option<&Event<C>> {
        match self {
            Entry::Event(e) => Some(e),
            Entry::Unknown(_) => None,
        }
    }
}

impl<C> EventKind<C> {
    fn try_map_content<D, E>(
        self,
        f: &mut impl FnMut(C) -> Result<D, E>,
    ) -> Result<EventKind<D>, E> {
        Ok(match self {
            EventKind::TurnStart => EventKind::TurnStart,
            EventKind::ChatRequest(r) => EventKind::ChatRequest(ChatRequest {
                content: r.content,
                schema: r.schema,
                author: r.author,
                resources: r
                    .resources
                    .into_iter()
                    .map(|res| res.try_map_content(f))
                    .collect::<Result<_, _>>()?,
            }),
            EventKind::ChatResponse(r) => EventKind::ChatResponse(r),
            EventKind::ToolCallRequest(r) => EventKind::ToolCallRequest(r),
            EventKind::ToolCallResponse(r) => EventKind::ToolCallResponse(ToolCallResponse {
                id: r.id,
                content: r
                    .content
                    .into_iter()
                    .map(|b| b.try_map_content(f))
                    .collect::<Result<_, _>>()?,
                plain: r.plain,
                is_error: r.is_error,
            }),
            EventKind::InquiryRequest(r) => EventKind::InquiryRequest(r),
            EventKind::InquiryResponse(r) => EventKind::InquiryResponse(r),
            EventKind::ConfigDelta(d) => EventKind::ConfigDelta(d),
            EventKind::Compaction(c) => EventKind::Compaction(c),
            EventKind::CompactionUndo(u) => EventKind::CompactionUndo(u),
        })
    }
}

impl<C> Block<C> {
    fn try_map_content<D, E>(self, f: &mut impl FnMut(C) -> Result<D, E>) -> Result<Block<D>, E> {
        Ok(match self {
            Block::Text(t) => Block::Text(TextBlock {
                text: f(t.text)?,
                mime_type: t.mime_type,
                annotations: t.annotations,
                extra: t.extra,
            }),
            Block::Resource(rb) => Block::Resource(ResourceBlock {
                resource: rb.resource.try_map_content(f)?,
                extra: rb.extra,
            }),
            Block::Other(o) => Block::Other(o),
        })
    }
}

impl<C> Resource<C> {
    fn try_map_content<D, E>(
        self,
        f: &mut impl FnMut(C) -> Result<D, E>,
    ) -> Result<Resource<D>, E> {
        let content = match self.content {
            ResourceContent::Text(c) => ResourceContent::Text(f(c)?),
            ResourceContent::Binary(c) => ResourceContent::Binary(f(c)?),
        };
        let formatted = match self.formatted {
            Some(c) => Some(f(c)?),
            None => None,
        };
        Ok(Resource {
            uri: self.uri,
            content,
            mime_type: self.mime_type,
            annotations: self.annotations,
            name: self.name,
            title: self.title,
            description: self.description,
            formatted,
            extra: self.extra,
        })
    }

    fn for_each_content(&self, f: &mut impl FnMut(&C)) {
        f(self.content.payload());
        if let Some(c) = &self.formatted {
            f(c);
        }
    }
}

/// Whether an entry of a view is part of what `view` prints: the five
/// conversation event types (config deltas, inquiries, compactions and
/// unknown entries are not part of a view; [`Kind::in_view`]).
pub(crate) fn in_view<C>(entry: &Entry<C>) -> bool {
    entry.kind().in_view()
}
