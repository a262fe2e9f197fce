//! An [`Entry`] in the binary form: its head, aux and body parts appended to
//! the record being built ([`RecordBuilder`]). Every field of the model has
//! its place; a value nested deeper than [`MAX_DEPTH`](super::value::MAX_DEPTH)
//! is refused, so that nothing is written that would not read back.

use super::value::{put_object, put_value};
use super::wire::{put_ref, put_str, put_varint};
use super::{put_head, Kind, Part, Parts, FLAG_IS_ERROR, FLAG_PLAIN};
use crate::event::{
    BlobRef, Block, ChatRequest, ChatResponse, Compaction, CompactionSource, CompactionUndo,
    ConfigDelta, Entry, Event, EventKind, FieldMode, InquiryRequest, InquiryResponse, Object,
    Resource, ResourceBlock, ResourceContent, TextBlock, ToolCallPolicy, ToolCallRequest,
    ToolCallResponse, ToolOverride,
};
use crate::timestamp::Timestamp;

/// Resource presence bit: `mimeType`.
pub const RES_MIME: u8 = 0x01;
/// Resource presence bit: `annotations`.
pub const RES_ANNOTATIONS: u8 = 0x02;
/// Resource presence bit: `name`.
pub const RES_NAME: u8 = 0x04;
/// Resource presence bit: `title`.
pub const RES_TITLE: u8 = 0x08;
/// Resource presence bit: `description`.
pub const RES_DESCRIPTION: u8 = 0x10;
/// Resource presence bit: `formatted`.
pub const RES_FORMATTED: u8 = 0x20;
/// Resource presence bit: fields this build does not know.
pub const RES_EXTRA: u8 = 0x40;
/// Resource content tag: text.
pub const CONTENT_TEXT: u8 = 1;
/// Resource content tag: binary.
pub const CONTENT_BINARY: u8 = 2;
/// Block tag: a `text` block.
pub const BLOCK_TEXT: u8 = 1;
/// Block tag: a `resource` block.
pub const BLOCK_RESOURCE: u8 = 2;
/// Block tag: a block of a type this build does not know.
pub const BLOCK_OTHER: u8 = 3;
/// Text block presence bit: `mimeType`.
pub const TEXT_MIME: u8 = 0x01;
/// Text block presence bit: `annotations`.
pub const TEXT_ANNOTATIONS: u8 = 0x02;
/// Text block presence bit: fields this build does not know.
pub const TEXT_EXTRA: u8 = 0x04;
/// Resource block presence bit: fields this build does not know.
pub const RESOURCE_BLOCK_EXTRA: u8 = 0x01;
/// Chat request presence bit: `author`.
pub const REQUEST_AUTHOR: u8 = 0x01;
/// Compaction bit: a summary follows.
pub const COMPACTION_SUMMARY: u8 = 0x01;
/// Compaction bit: reasoning is stripped.
pub const COMPACTION_STRIP_REASONING: u8 = 0x02;
/// Compaction bit: a tool call policy follows.
pub const COMPACTION_TOOL_CALLS: u8 = 0x04;
/// Compaction bit: a source follows.
pub const COMPACTION_SOURCE: u8 = 0x08;
/// Tool call policy byte: omit.
pub const POLICY_OMIT: u8 = 0;
/// Tool call policy byte: strip (a byte of `request` bit 0 and `response`
/// bit 1 follows).
pub const POLICY_STRIP: u8 = 1;
/// Override mode: none (inherit).
pub const MODE_NONE: u8 = 0;
/// Override mode: keep.
pub const MODE_KEEP: u8 = 1;
/// Override mode: strip.
pub const MODE_STRIP: u8 = 2;
/// Compaction source byte: manual.
pub const SOURCE_MANUAL: u8 = 0;
/// Compaction source byte: automatic.
pub const SOURCE_AUTO: u8 = 1;

/// A place in a [`RecordBuilder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMark {
    heads: usize,
    aux: usize,
    body: usize,
    count: u32,
}

/// The entry heads, aux bytes and decoded body of a record being built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordBuilder {
    /// Entry heads, 32 bytes each.
    pub heads: Vec<u8>,
    /// Aux bytes of every entry.
    pub aux: Vec<u8>,
    /// Body parts of every entry, decoded.
    pub body: Vec<u8>,
    /// Entries so far.
    pub count: u32,
}

impl RecordBuilder {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Where the record is now, to [`rewind`](Self::rewind) to.
    pub fn mark(&self) -> RecordMark {
        RecordMark {
            heads: self.heads.len(),
            aux: self.aux.len(),
            body: self.body.len(),
            count: self.count,
        }
    }

    /// Drops the entries pushed since `mark`.
    pub fn rewind(&mut self, mark: RecordMark) {
        self.heads.truncate(mark.heads);
        self.aux.truncate(mark.aux);
        self.body.truncate(mark.body);
        self.count = mark.count;
    }

    /// Bytes the record takes decoded: heads, aux and body.
    pub fn plain_len(&self) -> u64 {
        self.heads.len() as u64 + self.aux.len() as u64 + self.body.len() as u64
    }

    /// Appends an entry. On error (a value nested too deep, a record past
    /// 4 GiB) the record is left as it was.
    pub fn push_entry(&mut self, entry: &Entry) -> Result<(), String> {
        let mark = self.mark();
        let result = self.push_entry_unchecked(entry);
        if result.is_err() {
            self.rewind(mark);
        }
        result
    }

    fn push_entry_unchecked(&mut self, entry: &Entry) -> Result<(), String> {
        let event = match entry {
            Entry::Unknown(object) => {
                return self.push(Kind::Unknown, 0, None, &mut |b| {
                    b.object(Part::Entry, object)
                })
            }
            Entry::Event(e) => e,
        };
        let Event {
            timestamp,
            kind,
            metadata,
            extra,
        } = event;
        let ts = Some(*timestamp);
        let tail = |b: &mut EntryBuilder<'_>| -> Result<(), String> {
            if !metadata.is_empty() {
                b.object(Part::Metadata, metadata)?;
            }
            if !extra.is_empty() {
                b.object(Part::Extra, extra)?;
            }
            Ok(())
        };
        match kind {
            EventKind::TurnStart => self.push(Kind::TurnStart, 0, ts, &mut |b| tail(b)),
            EventKind::ChatRequest(r) => {
                let ChatRequest {
                    content,
                    schema,
                    author,
                    resources,
                } = r;
                self.push(Kind::ChatRequest, 0, ts, &mut |b| {
                    b.text(Part::Content, content);
                    if let Some(schema) = schema {
                        b.object(Part::Schema, schema)?;
                    }
                    tail(b)?;
                    b.fields
                        .push(if author.is_some() { REQUEST_AUTHOR } else { 0 });
                    if let Some(author) = author {
                        put_str(&mut b.fields, author);
                    }
                    put_varint(&mut b.fields, resources.len() as u64);
                    for resource in resources {
                        put_resource(&mut b.fields, resource)?;
                    }
                    Ok(())
                })
            }
            EventKind::ChatResponse(ChatResponse::Message(m)) => {
                self.push(Kind::Message, 0, ts, &mut |b| {
                    b.text(Part::Message, m);
                    tail(b)
                })
            }
            EventKind::ChatResponse(ChatResponse::Reasoning(m)) => {
                self.push(Kind::Reasoning, 0, ts, &mut |b| {
                    b.text(Part::Reasoning, m);
                    tail(b)
                })
            }
            EventKind::ChatResponse(ChatResponse::Data(d)) => {
                self.push(Kind::Data, 0, ts, &mut |b| {
                    b.value(Part::Data, d)?;
                    tail(b)
                })
            }
            EventKind::ToolCallRequest(r) => {
                let ToolCallRequest {
                    id,
                    name,
                    arguments,
                } = r;
                self.push(Kind::ToolCallRequest, 0, ts, &mut |b| {
                    b.object(Part::Arguments, arguments)?;
                    tail(b)?;
                    put_str(&mut b.fields, id);
                    put_str(&mut b.fields, name);
                    Ok(())
                })
            }
            EventKind::ToolCallResponse(r) => {
                let ToolCallResponse {
                    id,
                    content,
                    plain,
                    is_error,
                } = r;
                let flags =
                    if *is_error { FLAG_IS_ERROR } else { 0 } | if *plain { FLAG_PLAIN } else { 0 };
                self.push(Kind::ToolCallResponse, flags, ts, &mut |b| {
                    tail(b)?;
                    put_str(&mut b.fields, id);
                    put_varint(&mut b.fields, content.len() as u64);
                    for block in content {
                        put_block(&mut b.fields, block)?;
                    }
                    Ok(())
                })
            }
            EventKind::InquiryRequest(r) => {
                let InquiryRequest {
                    id,
                    source,
                    question,
                } = r;
                self.push(Kind::InquiryRequest, 0, ts, &mut |b| {
                    b.object(Part::Source, source)?;
                    b.object(Part::Question, question)?;
                    tail(b)?;
                    put_str(&mut b.fields, id);
                    Ok(())
                })
            }
            EventKind::InquiryResponse(r) => {
                let InquiryResponse { id, answer } = r;
                self.push(Kind::InquiryResponse, 0, ts, &mut |b| {
                    b.value(Part::Answer, answer)?;
                    tail(b)?;
                    put_str(&mut b.fields, id);
                    Ok(())
                })
            }
            EventKind::ConfigDelta(ConfigDelta { delta }) => {
                self.push(Kind::ConfigDelta, 0, ts, &mut |b| {
                    b.object(Part::Delta, delta)?;
                    tail(b)
                })
            }
            EventKind::Compaction(c) => self.push(Kind::Compaction, 0, ts, &mut |b| {
                tail(b)?;
                put_compaction(&mut b.fields, c);
                Ok(())
            }),
            EventKind::CompactionUndo(CompactionUndo { undoes }) => {
                self.push(Kind::CompactionUndo, 0, ts, &mut |b| {
                    tail(b)?;
                    put_varint(&mut b.fields, *undoes);
                    Ok(())
                })
            }
        }
    }

    /// Appends an entry of `kind` built by `build` (its body parts in
    /// order, then its own aux fields into `fields`); used for metadata
    /// patches by the conversation layer. On error the record may hold part
    /// of the entry: [`RecordBuilder::push_entry`] restores it.
    pub fn push(
        &mut self,
        kind: Kind,
        flags: u8,
        timestamp: Option<Timestamp>,
        build: &mut dyn FnMut(&mut EntryBuilder<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let aux_offset = offset(self.aux.len(), "aux")?;
        let body_offset = offset(self.body.len(), "body")?;
        let mut b = EntryBuilder {
            body: &mut self.body,
            parts: Parts::default(),
            fields: Vec::new(),
        };
        build(&mut b)?;
        let EntryBuilder { parts, fields, .. } = b;
        parts.encode(&mut self.aux);
        self.aux.extend_from_slice(&fields);
        let aux_len = offset(self.aux.len(), "aux")? - aux_offset;
        let body_len = offset(self.body.len(), "body")? - body_offset;
        put_head(
            &mut self.heads,
            kind,
            flags,
            timestamp,
            aux_offset,
            aux_len,
            body_offset,
            body_len,
        );
        self.count += 1;
        Ok(())
    }
}

fn offset(len: usize, what: &str) -> Result<u32, String> {
    u32::try_from(len).map_err(|_| format!("a record with more than 4 GiB of {what}"))
}

/// One entry being built: its body parts go into the record's body, its
/// aux fields (after the part table) into `fields`.
#[derive(Debug)]
pub struct EntryBuilder<'r> {
    body: &'r mut Vec<u8>,
    parts: Parts,
    /// The entry's own aux fields.
    pub fields: Vec<u8>,
}

impl EntryBuilder<'_> {
    /// A text part.
    pub fn text(&mut self, part: Part, text: &str) {
        self.body.extend_from_slice(text.as_bytes());
        self.parts.push(part, text.len() as u32);
    }

    /// A value part.
    pub fn value(&mut self, part: Part, value: &serde_json::Value) -> Result<(), String> {
        let start = self.body.len();
        put_value(self.body, value, 0)?;
        self.parts.push(part, (self.body.len() - start) as u32);
        Ok(())
    }

    /// An object part.
    pub fn object(&mut self, part: Part, object: &Object) -> Result<(), String> {
        let start = self.body.len();
        put_object(self.body, object, 0)?;
        self.parts.push(part, (self.body.len() - start) as u32);
        Ok(())
    }
}

/// A resource in aux.
fn put_resource(out: &mut Vec<u8>, resource: &Resource<BlobRef>) -> Result<(), String> {
    let Resource {
        uri,
        content,
        mime_type,
        annotations,
        name,
        title,
        description,
        formatted,
        extra,
    } = resource;
    put_str(out, uri);
    match content {
        ResourceContent::Text(r) => {
            out.push(CONTENT_TEXT);
            put_ref(out, r);
        }
        ResourceContent::Binary(r) => {
            out.push(CONTENT_BINARY);
            put_ref(out, r);
        }
    }
    let mut presence = 0u8;
    for (bit, present) in [
        (RES_MIME, mime_type.is_some()),
        (RES_ANNOTATIONS, annotations.is_some()),
        (RES_NAME, name.is_some()),
        (RES_TITLE, title.is_some()),
        (RES_DESCRIPTION, description.is_some()),
        (RES_FORMATTED, formatted.is_some()),
        (RES_EXTRA, !extra.is_empty()),
    ] {
        if present {
            presence |= bit;
        }
    }
    out.push(presence);
    if let Some(m) = mime_type {
        put_str(out, m);
    }
    if let Some(a) = annotations {
        put_value(out, a, 0)?;
    }
    for s in [name, title, description].into_iter().flatten() {
        put_str(out, s);
    }
    if let Some(f) = formatted {
        put_ref(out, f);
    }
    if !extra.is_empty() {
        put_object(out, extra, 0)?;
    }
    Ok(())
}

/// A tool response block in aux.
fn put_block(out: &mut Vec<u8>, block: &Block<BlobRef>) -> Result<(), String> {
    match block {
        Block::Text(TextBlock {
            text,
            mime_type,
            annotations,
            extra,
        }) => {
            out.push(BLOCK_TEXT);
            put_ref(out, text);
            let mut presence = 0u8;
            if mime_type.is_some() {
                presence |= TEXT_MIME;
            }
            if annotations.is_some() {
                presence |= TEXT_ANNOTATIONS;
            }
            if !extra.is_empty() {
                presence |= TEXT_EXTRA;
            }
            out.push(presence);
            if let Some(m) = mime_type {
                put_str(out, m);
            }
            if let Some(a) = annotations {
                put_value(out, a, 0)?;
            }
            if !extra.is_empty() {
                put_object(out, extra, 0)?;
            }
        }
        Block::Resource(ResourceBlock { resource, extra }) => {
            out.push(BLOCK_RESOURCE);
            put_resource(out, resource)?;
            out.push(if extra.is_empty() {
                0
            } else {
                RESOURCE_BLOCK_EXTRA
            });
            if !extra.is_empty() {
                put_object(out, extra, 0)?;
            }
        }
        Block::Other(object) => {
            out.push(BLOCK_OTHER);
            put_object(out, object, 0)?;
        }
    }
    Ok(())
}

/// A compaction in aux.
fn put_compaction(out: &mut Vec<u8>, c: &Compaction) {
    let Compaction {
        from_turn,
        to_turn,
        summary,
        strip_reasoning,
        tool_calls,
        tool_overrides,
        source,
    } = c;
    put_varint(out, *from_turn);
    put_varint(out, *to_turn);
    let mut bits = 0u8;
    if summary.is_some() {
        bits |= COMPACTION_SUMMARY;
    }
    if *strip_reasoning {
        bits |= COMPACTION_STRIP_REASONING;
    }
    if tool_calls.is_some() {
        bits |= COMPACTION_TOOL_CALLS;
    }
    if source.is_some() {
        bits |= COMPACTION_SOURCE;
    }
    out.push(bits);
    if let Some(s) = summary {
        put_str(out, s);
    }
    match tool_calls {
        None => {}
        Some(ToolCallPolicy::Omit) => out.push(POLICY_OMIT),
        Some(ToolCallPolicy::Strip { request, response }) => {
            out.push(POLICY_STRIP);
            out.push(u8::from(*request) | u8::from(*response) << 1);
        }
    }
    if let Some(s) = source {
        out.push(match s {
            CompactionSource::Manual => SOURCE_MANUAL,
            CompactionSource::Auto => SOURCE_AUTO,
        });
    }
    put_varint(out, tool_overrides.len() as u64);
    for (tool, ToolOverride { request, response }) in tool_overrides {
        put_str(out, tool);
        for mode in [request, response] {
            out.push(match mode {
                None => MODE_NONE,
                Some(FieldMode::Keep) => MODE_KEEP,
                Some(FieldMode::Strip) => MODE_STRIP,
            });
        }
    }
}
