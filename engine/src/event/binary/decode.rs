//! Reading the binary form back: the aux fields of an entry, borrowed
//! ([`AuxFields`], what heads and `view --refs` use), and a whole
//! [`Entry`] from its head, aux and body ([`decode_entry`]). Every length is
//! checked against the bytes there are before anything is taken; nothing
//! panics on any bytes.

use std::collections::BTreeMap;

use super::encode::*;
use super::value::{read_object, read_value, skip_object, skip_value};
use super::wire::Reader;
use super::{Kind, Part, RawHead, FLAG_IS_ERROR, FLAG_PLAIN};
use crate::event::{
    BlobRef, Block, ChatRequest, ChatResponse, Compaction, CompactionSource, CompactionUndo,
    ConfigDelta, Entry, Event, EventKind, FieldMode, InquiryRequest, InquiryResponse, Object,
    Resource, ResourceBlock, ResourceContent, TextBlock, ToolCallPolicy, ToolCallRequest,
    ToolCallResponse, ToolOverride,
};

/// The encoded bytes of one value inside aux (checked when read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawValue<'a>(pub &'a [u8]);

impl<'a> RawValue<'a> {
    /// Reads (checks) a value and keeps its bytes.
    fn read(r: &mut Reader<'a>) -> Result<RawValue<'a>, String> {
        let rest = r.rest();
        let start = r.position();
        skip_value(r, 0)?;
        Ok(RawValue(&rest[..r.position() - start]))
    }

    /// The value.
    pub fn value(&self) -> Result<serde_json::Value, String> {
        read_value(&mut Reader::new(self.0), 0)
    }

    /// The value, which must be an object.
    pub fn object(&self) -> Result<Object, String> {
        read_object(&mut Reader::new(self.0), 0)
    }
}

/// A resource as aux holds it, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceFields<'a> {
    /// `uri`.
    pub uri: &'a str,
    /// The content's blob.
    pub content: BlobRef,
    /// Whether the content is binary (`blob`), else text.
    pub binary: bool,
    /// `mimeType`.
    pub mime_type: Option<&'a str>,
    /// `annotations`.
    pub annotations: Option<RawValue<'a>>,
    /// `name`.
    pub name: Option<&'a str>,
    /// `title`.
    pub title: Option<&'a str>,
    /// `description`.
    pub description: Option<&'a str>,
    /// `formatted`'s blob.
    pub formatted: Option<BlobRef>,
    /// Fields this build does not know (an object).
    pub extra: Option<RawValue<'a>>,
}

impl<'a> ResourceFields<'a> {
    /// Reads one resource.
    pub fn read(r: &mut Reader<'a>) -> Result<ResourceFields<'a>, String> {
        let uri = r.str()?;
        let binary = match r.u8()? {
            CONTENT_TEXT => false,
            CONTENT_BINARY => true,
            other => return Err(r.error(format_args!("resource content tag {other}"))),
        };
        let content = r.blob_ref()?;
        let presence = r.u8()?;
        if presence & 0x80 != 0 {
            return Err(r.error(format_args!("resource presence bits {presence:#04x}")));
        }
        let has = |bit: u8| presence & bit != 0;
        let mime_type = if has(RES_MIME) { Some(r.str()?) } else { None };
        let annotations = if has(RES_ANNOTATIONS) {
            Some(RawValue::read(r)?)
        } else {
            None
        };
        let name = if has(RES_NAME) { Some(r.str()?) } else { None };
        let title = if has(RES_TITLE) { Some(r.str()?) } else { None };
        let description = if has(RES_DESCRIPTION) {
            Some(r.str()?)
        } else {
            None
        };
        let formatted = if has(RES_FORMATTED) {
            Some(r.blob_ref()?)
        } else {
            None
        };
        let extra = if has(RES_EXTRA) {
            Some(read_object_raw(r)?)
        } else {
            None
        };
        Ok(ResourceFields {
            uri,
            content,
            binary,
            mime_type,
            annotations,
            name,
            title,
            description,
            formatted,
            extra,
        })
    }

    /// Hands `f` the content's reference, then the `formatted` text's.
    fn visit_content(&self, f: &mut impl FnMut(BlobRef)) {
        f(self.content);
        if let Some(formatted) = self.formatted {
            f(formatted);
        }
    }

    /// The resource, owned.
    pub fn to_resource(&self) -> Result<Resource<BlobRef>, String> {
        Ok(Resource {
            uri: self.uri.to_owned(),
            content: if self.binary {
                ResourceContent::Binary(self.content)
            } else {
                ResourceContent::Text(self.content)
            },
            mime_type: self.mime_type.map(str::to_owned),
            annotations: self.annotations.map(|a| a.value()).transpose()?,
            name: self.name.map(str::to_owned),
            title: self.title.map(str::to_owned),
            description: self.description.map(str::to_owned),
            formatted: self.formatted,
            extra: self
                .extra
                .map(|e| e.object())
                .transpose()?
                .unwrap_or_default(),
        })
    }
}

/// An object value (checked), kept as its bytes.
fn read_object_raw<'a>(r: &mut Reader<'a>) -> Result<RawValue<'a>, String> {
    let rest = r.rest();
    let start = r.position();
    read_object(r, 0)?;
    Ok(RawValue(&rest[..r.position() - start]))
}

/// A tool response block as aux holds it, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFields<'a> {
    /// A `text` block.
    Text {
        /// The text's blob.
        text: BlobRef,
        /// `mimeType`.
        mime_type: Option<&'a str>,
        /// `annotations`.
        annotations: Option<RawValue<'a>>,
        /// Fields this build does not know (an object).
        extra: Option<RawValue<'a>>,
    },
    /// A `resource` block.
    Resource {
        /// The resource.
        resource: ResourceFields<'a>,
        /// Fields of the block this build does not know (an object).
        extra: Option<RawValue<'a>>,
    },
    /// A block of a type this build does not know (an object).
    Other(RawValue<'a>),
}

impl<'a> BlockFields<'a> {
    /// Reads one block.
    pub fn read(r: &mut Reader<'a>) -> Result<BlockFields<'a>, String> {
        match r.u8()? {
            BLOCK_TEXT => {
                let text = r.blob_ref()?;
                let presence = r.u8()?;
                if presence & !(TEXT_MIME | TEXT_ANNOTATIONS | TEXT_EXTRA) != 0 {
                    return Err(r.error(format_args!("text block presence bits {presence:#04x}")));
                }
                let mime_type = if presence & TEXT_MIME != 0 {
                    Some(r.str()?)
                } else {
                    None
                };
                let annotations = if presence & TEXT_ANNOTATIONS != 0 {
                    Some(RawValue::read(r)?)
                } else {
                    None
                };
                let extra = if presence & TEXT_EXTRA != 0 {
                    Some(read_object_raw(r)?)
                } else {
                    None
                };
                Ok(BlockFields::Text {
                    text,
                    mime_type,
                    annotations,
                    extra,
                })
            }
            BLOCK_RESOURCE => {
                let resource = ResourceFields::read(r)?;
                let extra = match r.u8()? {
                    0 => None,
                    RESOURCE_BLOCK_EXTRA => Some(read_object_raw(r)?),
                    other => {
                        return Err(
                            r.error(format_args!("resource block presence bits {other:#04x}"))
                        )
                    }
                };
                Ok(BlockFields::Resource { resource, extra })
            }
            BLOCK_OTHER => Ok(BlockFields::Other(read_object_raw(r)?)),
            other => Err(r.error(format_args!("block tag {other}"))),
        }
    }

    /// The block, owned.
    pub fn to_block(&self) -> Result<Block<BlobRef>, String> {
        Ok(match self {
            BlockFields::Text {
                text,
                mime_type,
                annotations,
                extra,
            } => Block::Text(TextBlock {
                text: *text,
                mime_type: mime_type.map(str::to_owned),
                annotations: annotations.map(|a| a.value()).transpose()?,
                extra: extra.map(|e| e.object()).transpose()?.unwrap_or_default(),
            }),
            BlockFields::Resource { resource, extra } => Block::Resource(ResourceBlock {
                resource: resource.to_resource()?,
                extra: extra.map(|e| e.object()).transpose()?.unwrap_or_default(),
            }),
            BlockFields::Other(o) => Block::Other(o.object()?),
        })
    }
}

/// A list of resources or blocks in aux (checked when the aux was read),
/// borrowed: `count` items back to back in `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct List<'a> {
    /// The items' bytes.
    pub bytes: &'a [u8],
    /// How many.
    pub count: usize,
    /// How many of them are (or hold) resources: all of a list of
    /// resources, the resource blocks of a list of blocks.
    pub resources: usize,
}

impl<'a> List<'a> {
    /// The resources of a list of resources (a list that was checked reads
    /// whole; damage in memory ends it early).
    pub fn resources(self) -> impl Iterator<Item = ResourceFields<'a>> {
        let mut r = Reader::new(self.bytes);
        (0..self.count).map_while(move |_| ResourceFields::read(&mut r).ok())
    }

    /// The blocks of a list of blocks.
    pub fn blocks(self) -> impl Iterator<Item = BlockFields<'a>> {
        let mut r = Reader::new(self.bytes);
        (0..self.count).map_while(move |_| BlockFields::read(&mut r).ok())
    }
}

/// The aux fields of an entry (after its part table), by kind.
#[derive(Debug, Clone, PartialEq)]
pub enum AuxFields<'a> {
    /// Kinds with no aux fields.
    None,
    /// `chat_request`.
    ChatRequest {
        /// `author`.
        author: Option<&'a str>,
        /// `resources`.
        resources: List<'a>,
    },
    /// `tool_call_request`.
    ToolCallRequest {
        /// The call id.
        id: &'a str,
        /// The tool's name.
        name: &'a str,
    },
    /// `tool_call_response`.
    ToolCallResponse {
        /// The call id.
        id: &'a str,
        /// The content blocks.
        blocks: List<'a>,
    },
    /// `inquiry_request` and `inquiry_response`.
    Inquiry {
        /// The inquiry id.
        id: &'a str,
    },
    /// `compaction`.
    Compaction(Box<Compaction>),
    /// `compaction_undo`.
    CompactionUndo(u64),
    /// A metadata patch.
    MetaPatch {
        /// A new base config.
        base_config: Option<BlobRef>,
    },
}

/// Metadata patch presence bit: a base config reference.
pub const META_BASE_CONFIG: u8 = 0x01;

impl<'a> AuxFields<'a> {
    /// Reads and checks the aux fields of an entry of `kind` (every nested
    /// value checked; nothing may follow them).
    pub fn read(kind: Kind, aux: &'a [u8]) -> Result<AuxFields<'a>, String> {
        Self::read_visiting(kind, aux, &mut |_| {})
    }

    /// [`AuxFields::read`] that hands `content` every content payload's
    /// reference as it reads it, in document order (as
    /// [`EntryHead::for_each_content`](crate::event::head::EntryHead::for_each_content)
    /// would call it afterwards): who wants the references and the check
    /// reads the list once. On an error, the references handed before it
    /// are of bytes that do not read: the caller drops them.
    pub fn read_visiting(
        kind: Kind,
        aux: &'a [u8],
        content: &mut impl FnMut(BlobRef),
    ) -> Result<AuxFields<'a>, String> {
        let mut r = Reader::new(aux);
        let fields = match kind {
            Kind::TurnStart
            | Kind::Message
            | Kind::Reasoning
            | Kind::Data
            | Kind::ConfigDelta
            | Kind::Unknown => AuxFields::None,
            Kind::ChatRequest => {
                let author = match r.u8()? {
                    0 => None,
                    REQUEST_AUTHOR => Some(r.str()?),
                    other => {
                        return Err(r.error(format_args!("request presence bits {other:#04x}")))
                    }
                };
                let resources = read_list(&mut r, |r| {
                    let resource = ResourceFields::read(r)?;
                    resource.visit_content(content);
                    Ok(true)
                })?;
                AuxFields::ChatRequest { author, resources }
            }
            Kind::ToolCallRequest => AuxFields::ToolCallRequest {
                id: r.str()?,
                name: r.str()?,
            },
            Kind::ToolCallResponse => {
                let id = r.str()?;
                let blocks = read_list(&mut r, |r| match BlockFields::read(r)? {
                    BlockFields::Text { text, .. } => {
                        content(text);
                        Ok(false)
                    }
                    BlockFields::Resource { resource, .. } => {
                        resource.visit_content(content);
                        Ok(true)
                    }
                    BlockFields::Other(_) => Ok(false),
                })?;
                AuxFields::ToolCallResponse { id, blocks }
            }
            Kind::InquiryRequest | Kind::InquiryResponse => AuxFields::Inquiry { id: r.str()? },
            Kind::Compaction => AuxFields::Compaction(Box::new(read_compaction(&mut r)?)),
            Kind::CompactionUndo => AuxFields::CompactionUndo(r.varint()?),
            Kind::MetaPatch => match r.u8()? {
                0 => AuxFields::MetaPatch { base_config: None },
                META_BASE_CONFIG => AuxFields::MetaPatch {
                    base_config: Some(r.blob_ref()?),
                },
                other => return Err(r.error(format_args!("metadata presence bits {other:#04x}"))),
            },
        };
        r.finish("aux fields of the entry")?;
        Ok(fields)
    }
}

/// A count, then that many items each checked by `item` (which says
/// whether it is a resource).
fn read_list<'a>(
    r: &mut Reader<'a>,
    mut item: impl FnMut(&mut Reader<'a>) -> Result<bool, String>,
) -> Result<List<'a>, String> {
    let count = r.varint()?;
    let count = usize::try_from(count)
        .ok()
        .filter(|&c| c <= r.remaining())
        .ok_or_else(|| r.error(format_args!("a list of {count} items")))?;
    let rest = r.rest();
    let start = r.position();
    let mut resources = 0;
    for _ in 0..count {
        resources += usize::from(item(r)?);
    }
    Ok(List {
        bytes: &rest[..r.position() - start],
        count,
        resources,
    })
}

fn read_compaction(r: &mut Reader<'_>) -> Result<Compaction, String> {
    let from_turn = r.varint()?;
    let to_turn = r.varint()?;
    let bits = r.u8()?;
    let known =
        COMPACTION_SUMMARY | COMPACTION_STRIP_REASONING | COMPACTION_TOOL_CALLS | COMPACTION_SOURCE;
    if bits & !known != 0 {
        return Err(r.error(format_args!("compaction bits {bits:#04x}")));
    }
    let summary = if bits & COMPACTION_SUMMARY != 0 {
        Some(r.str()?.to_owned())
    } else {
        None
    };
    let tool_calls = if bits & COMPACTION_TOOL_CALLS != 0 {
        Some(match r.u8()? {
            POLICY_OMIT => ToolCallPolicy::Omit,
            POLICY_STRIP => {
                let fields = r.u8()?;
                if fields > 3 {
                    return Err(r.error(format_args!("strip fields {fields:#04x}")));
                }
                ToolCallPolicy::Strip {
                    request: fields & 1 != 0,
                    response: fields & 2 != 0,
                }
            }
            other => return Err(r.error(format_args!("tool call policy {other}"))),
        })
    } else {
        None
    };
    let source = if bits & COMPACTION_SOURCE != 0 {
        Some(match r.u8()? {
            SOURCE_MANUAL => CompactionSource::Manual,
            SOURCE_AUTO => CompactionSource::Auto,
            other => return Err(r.error(format_args!("compaction source {other}"))),
        })
    } else {
        None
    };
    let count = r.varint()?;
    if count > r.remaining() as u64 {
        return Err(r.error(format_args!("{count} tool overrides")));
    }
    let mut tool_overrides = BTreeMap::new();
    for _ in 0..count {
        let tool = r.str()?;
        let mut modes = [None; 2];
        for mode in &mut modes {
            *mode = match r.u8()? {
                MODE_NONE => None,
                MODE_KEEP => Some(FieldMode::Keep),
                MODE_STRIP => Some(FieldMode::Strip),
                other => return Err(r.error(format_args!("override mode {other}"))),
            };
        }
        let hint = ToolOverride {
            request: modes[0],
            response: modes[1],
        };
        if tool_overrides.insert(tool.to_owned(), hint).is_some() {
            return Err(r.error(format_args!("the tool override {tool:?} twice")));
        }
    }
    Ok(Compaction {
        from_turn,
        to_turn,
        summary,
        strip_reasoning: bits & COMPACTION_STRIP_REASONING != 0,
        tool_calls,
        tool_overrides,
        source,
    })
}

/// The body parts of one entry, from its body bytes (the head's range of
/// the record's decoded body, which the caller has checked).
#[derive(Debug, Clone, Copy)]
pub struct BodyParts<'h, 'a> {
    head: &'h RawHead<'a>,
    body: &'a [u8],
}

impl<'h, 'a> BodyParts<'h, 'a> {
    /// The parts of `head`'s entry in `body`, its body bytes.
    pub fn new(head: &'h RawHead<'a>, body: &'a [u8]) -> Result<Self, String> {
        if body.len() as u64 != u64::from(head.body_len) {
            return Err(format!(
                "an entry body of {} bytes where its head says {}",
                body.len(),
                head.body_len
            ));
        }
        Ok(BodyParts { head, body })
    }

    /// The bytes of `part`, if present.
    pub fn bytes(&self, part: Part) -> Option<&'a [u8]> {
        let (offset, len) = self.head.parts.find(part)?;
        self.body
            .get(offset as usize..offset as usize + len as usize)
    }

    /// A text part (UTF-8 checked).
    pub fn text(&self, part: Part) -> Result<&'a str, String> {
        let bytes = self.bytes(part).unwrap_or_default();
        std::str::from_utf8(bytes).map_err(|e| {
            format!(
                "body part {} that is not UTF-8 (byte {} of {})",
                part.name(),
                e.valid_up_to(),
                bytes.len()
            )
        })
    }

    /// A value part.
    pub fn value(&self, part: Part) -> Result<serde_json::Value, String> {
        let mut r = Reader::new(self.bytes(part).unwrap_or_default());
        let v = read_value(&mut r, 0).map_err(|e| format!("body part {}: {e}", part.name()))?;
        r.finish(part.name())?;
        Ok(v)
    }

    /// An object part (empty when absent).
    pub fn object(&self, part: Part) -> Result<Object, String> {
        let Some(bytes) = self.bytes(part) else {
            return Ok(Object::new());
        };
        let mut r = Reader::new(bytes);
        let o = read_object(&mut r, 0).map_err(|e| format!("body part {}: {e}", part.name()))?;
        r.finish(part.name())?;
        Ok(o)
    }
}

/// Checks the entry of `head` as [`decode_entry`] would decode it (the same
/// bytes refused, with the same message), without building it: its aux
/// fields read, every body part checked (texts UTF-8, values read through,
/// objects' keys distinct). Returns the aux fields; `content` gets every
/// content payload's reference as they are read
/// ([`AuxFields::read_visiting`]: those handed before an error are to be
/// dropped). A metadata patch is not an entry: an error.
pub fn check_entry<'a>(
    head: &RawHead<'a>,
    body: &[u8],
    content: &mut impl FnMut(BlobRef),
) -> Result<AuxFields<'a>, String> {
    check_entry_with_texts(head, body, content, &mut |_, _| {})
}

/// [`check_entry`] that hands `texts` each text part (its part and its
/// text) as it is checked: who reads the texts where they lie checks them
/// once.
pub fn check_entry_with_texts<'a: 'b, 'b>(
    head: &RawHead<'a>,
    body: &'b [u8],
    content: &mut impl FnMut(BlobRef),
    texts: &mut impl FnMut(Part, &'b str),
) -> Result<AuxFields<'a>, String> {
    let parts = BodyParts::new(head, body)?;
    let fields = AuxFields::read_visiting(head.kind, head.aux, content)?;
    if head.kind == Kind::MetaPatch {
        return Err("a metadata patch where an entry is due".into());
    }
    // The part table was checked against the kind when the head was read
    // (`Parts::read`): every part present is one `decode_entry` decodes,
    // and every part it requires is present.
    for (part, _, _) in head.parts.iter() {
        if part.is_text() {
            texts(part, parts.text(part)?);
            continue;
        }
        let mut r = Reader::new(parts.bytes(part).unwrap_or_default());
        let checked = match part {
            Part::Data | Part::Answer => skip_value(&mut r, 0),
            _ => skip_object(&mut r, 0),
        };
        checked.map_err(|e| format!("body part {}: {e}", part.name()))?;
        r.finish(part.name())?;
    }
    Ok(fields)
}

/// The entry of `head`, whose body bytes are `body` (checked by the
/// caller; every part is checked here as it is decoded). A metadata patch
/// is not an entry: an error.
pub fn decode_entry(head: &RawHead<'_>, body: &[u8]) -> Result<Entry, String> {
    let parts = BodyParts::new(head, body)?;
    let fields = AuxFields::read(head.kind, head.aux)?;
    // Exhaustive on the kind: a new kind does not compile without its
    // decoder. `AuxFields::read` gives the fields of the kind it is given.
    let mismatch = |fields: &AuxFields<'_>| {
        format!(
            "aux fields {fields:?} that are not those of a {:?} entry",
            head.kind
        )
    };
    let kind = match head.kind {
        Kind::TurnStart => EventKind::TurnStart,
        Kind::ChatRequest => {
            let AuxFields::ChatRequest { author, resources } = fields else {
                return Err(mismatch(&fields));
            };
            EventKind::ChatRequest(ChatRequest {
                content: parts.text(Part::Content)?.to_owned(),
                schema: match parts.bytes(Part::Schema) {
                    Some(_) => Some(parts.object(Part::Schema)?),
                    None => None,
                },
                author: author.map(str::to_owned),
                resources: {
                    let mut out = Vec::with_capacity(resources.count);
                    for r in resources.resources() {
                        out.push(r.to_resource()?);
                    }
                    out
                },
            })
        }
        Kind::Message => {
            EventKind::ChatResponse(ChatResponse::Message(parts.text(Part::Message)?.to_owned()))
        }
        Kind::Reasoning => EventKind::ChatResponse(ChatResponse::Reasoning(
            parts.text(Part::Reasoning)?.to_owned(),
        )),
        Kind::Data => EventKind::ChatResponse(ChatResponse::Data(parts.value(Part::Data)?)),
        Kind::ToolCallRequest => {
            let AuxFields::ToolCallRequest { id, name } = fields else {
                return Err(mismatch(&fields));
            };
            EventKind::ToolCallRequest(ToolCallRequest {
                id: id.to_owned(),
                name: name.to_owned(),
                arguments: parts.object(Part::Arguments)?,
            })
        }
        Kind::ToolCallResponse => {
            let AuxFields::ToolCallResponse { id, blocks } = fields else {
                return Err(mismatch(&fields));
            };
            EventKind::ToolCallResponse(ToolCallResponse {
                id: id.to_owned(),
                // Sized first and filled in place: collecting through
                // `Result` grew the vector from nothing, moving every block
                // (a few hundred bytes) at each growth.
                content: {
                    let mut out = Vec::with_capacity(blocks.count);
                    for b in blocks.blocks() {
                        out.push(b.to_block()?);
                    }
                    out
                },
                plain: head.flags & FLAG_PLAIN != 0,
                is_error: head.flags & FLAG_IS_ERROR != 0,
            })
        }
        Kind::InquiryRequest => {
            let AuxFields::Inquiry { id } = fields else {
                return Err(mismatch(&fields));
            };
            EventKind::InquiryRequest(InquiryRequest {
                id: id.to_owned(),
                source: parts.object(Part::Source)?,
                question: parts.object(Part::Question)?,
            })
        }
        Kind::InquiryResponse => {
            let AuxFields::Inquiry { id } = fields else {
                return Err(mismatch(&fields));
            };
            EventKind::InquiryResponse(InquiryResponse {
                id: id.to_owned(),
                answer: parts.value(Part::Answer)?,
            })
        }
        Kind::ConfigDelta => EventKind::ConfigDelta(ConfigDelta {
            delta: parts.object(Part::Delta)?,
        }),
        Kind::Compaction => {
            let AuxFields::Compaction(c) = fields else {
                return Err(mismatch(&fields));
            };
            EventKind::Compaction(*c)
        }
        Kind::CompactionUndo => {
            let AuxFields::CompactionUndo(undoes) = fields else {
                return Err(mismatch(&fields));
            };
            EventKind::CompactionUndo(CompactionUndo { undoes })
        }
        Kind::Unknown => return Ok(Entry::Unknown(parts.object(Part::Entry)?)),
        Kind::MetaPatch => return Err("a metadata patch where an entry is due".into()),
    };
    Ok(Entry::Event(Event {
        timestamp: head.timestamp,
        kind,
        metadata: parts.object(Part::Metadata)?,
        extra: parts.object(Part::Extra)?,
    }))
}
