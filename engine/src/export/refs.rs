//! `view --refs` of a version 2 log, written straight from entry heads and
//! aux (format-spec.md 4.2): no entry is decoded and no body read but a
//! config delta's or, rarely, an entry's unknown fields. Body parts are
//! written as `{"$text": "<entry>/<field>", "size": n}` references, content
//! as `{"$blob", "size"}` references; the text the projection and
//! deduplication create is inline. The JSON is what `serde_json`'s pretty
//! printer writes (two-space indentation), with keys in the renderer's
//! order (`event::render`).

use crate::conversation::image::LogImage;
use crate::error::{Error, Result};
use crate::event::binary::decode::{AuxFields, BlockFields, BodyParts, RawValue, ResourceFields};
use crate::event::binary::value::{push_json_str, push_u64, put_value, write_json, JsonStyle};
use crate::event::binary::wire::Reader;
use crate::event::binary::{Kind, Part, RawHead};
use crate::event::BlobRef;
use crate::projection::{compacted_text, ItemKind, ViewPlan, INTERRUPTED, SUMMARY_REQUEST};
use crate::timestamp::Timestamp;

/// A pretty JSON writer (as `serde_json::to_writer_pretty`).
struct Pretty<'o> {
    out: &'o mut Vec<u8>,
    /// Containers open.
    depth: usize,
    /// Whether nothing was written in the innermost container yet.
    fresh: bool,
    /// Keys written in each open object (to leave out unknown fields that
    /// would repeat one).
    keys: Vec<Vec<&'static str>>,
}

impl<'o> Pretty<'o> {
    fn new(out: &'o mut Vec<u8>) -> Self {
        Pretty {
            out,
            depth: 0,
            fresh: true,
            keys: Vec::new(),
        }
    }

    fn newline(&mut self) {
        self.out.push(b'\n');
        for _ in 0..self.depth {
            self.out.extend_from_slice(b"  ");
        }
    }

    /// Before an element or a key: the separator and the indentation.
    fn next(&mut self) {
        if !self.fresh {
            self.out.push(b',');
        }
        self.newline();
        self.fresh = false;
    }

    fn open_object(&mut self) {
        self.out.push(b'{');
        self.depth += 1;
        self.fresh = true;
        self.keys.push(Vec::new());
    }

    fn open_array(&mut self) {
        self.out.push(b'[');
        self.depth += 1;
        self.fresh = true;
    }

    fn close(&mut self, bracket: u8) {
        self.depth -= 1;
        if !self.fresh {
            self.newline();
        }
        self.out.push(bracket);
        self.fresh = false;
        if bracket == b'}' {
            self.keys.pop();
        }
    }

    fn key(&mut self, key: &'static str) {
        self.next();
        if let Some(keys) = self.keys.last_mut() {
            keys.push(key);
        }
        push_json_str(self.out, key);
        self.out.extend_from_slice(b": ");
    }

    /// A key of an unknown field, written unless a known key of the object
    /// has its name; returns whether it was.
    fn extra_key(&mut self, key: &str) -> bool {
        if self.keys.last().is_some_and(|k| k.contains(&key)) {
            return false;
        }
        self.next();
        push_json_str(self.out, key);
        self.out.extend_from_slice(b": ");
        true
    }

    fn str(&mut self, s: &str) {
        push_json_str(self.out, s);
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    fn u64(&mut self, n: u64) {
        push_u64(self.out, n);
    }

    fn bool(&mut self, b: bool) {
        self.raw(if b { b"true" } else { b"false" });
    }

    fn timestamp(&mut self, t: Timestamp) {
        t.with_jp_str(|text| push_json_str(self.out, text));
    }

    /// A value in the binary form (checked when the aux was read).
    fn value(&mut self, v: RawValue<'_>) -> std::result::Result<(), String> {
        write_json(&mut Reader::new(v.0), self.out, JsonStyle::Pretty(self.depth))
    }

    fn blob(&mut self, r: &BlobRef) {
        self.open_object();
        self.key("$blob");
        let mut hex = [0u8; 64];
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for (pair, b) in hex.chunks_exact_mut(2).zip(r.id.as_bytes()) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 0x0f)];
        }
        self.out.push(b'"');
        self.out.extend_from_slice(&hex);
        self.out.push(b'"');
        self.key("size");
        self.u64(r.size);
        self.close(b'}');
    }

    /// A body part as a reference: `{"$text": "<entry>/<field>", "size": n}`.
    fn text_ref(&mut self, entry: usize, part: Part, size: u32) {
        self.open_object();
        self.key("$text");
        self.out.push(b'"');
        push_u64(self.out, entry as u64);
        self.out.push(b'/');
        self.out.extend_from_slice(part.name().as_bytes());
        self.out.push(b'"');
        self.key("size");
        self.u64(u64::from(size));
        self.close(b'}');
    }

    /// The fields of an object value (its keys written unless known).
    fn fields_of(&mut self, object: RawValue<'_>) -> std::result::Result<(), String> {
        let obj = object.object()?;
        let mut value = Vec::new();
        for (k, v) in &obj {
            if self.extra_key(k) {
                value.clear();
                put_value(&mut value, v, 0)?;
                self.value(RawValue(&value))?;
            }
        }
        Ok(())
    }
}

/// Writes the view `plan` of the conversation in `image` (whose heads the
/// plan was made from) as a pretty JSON array into `out`, content and body
/// parts as references.
pub(crate) fn render_refs(image: &LogImage, plan: &ViewPlan, out: &mut Vec<u8>) -> Result<()> {
    let mut w = Pretty::new(out);
    w.open_array();
    for (index, item) in plan.items.iter().enumerate() {
        w.next();
        w.open_object();
        match &item.kind {
            ItemKind::SummaryStart { timestamp } => {
                w.key("type");
                w.str("turn_start");
                w.key("timestamp");
                w.timestamp(*timestamp);
            }
            ItemKind::SummaryRequest { timestamp } => {
                w.key("type");
                w.str("chat_request");
                w.key("timestamp");
                w.timestamp(*timestamp);
                w.key("content");
                w.str(SUMMARY_REQUEST);
            }
            ItemKind::Summary { timestamp, text } => {
                w.key("type");
                w.str("chat_response");
                w.key("timestamp");
                w.timestamp(*timestamp);
                w.key("message");
                w.str(text);
            }
            ItemKind::Interrupted { timestamp, id } => {
                w.key("type");
                w.str("tool_call_response");
                w.key("timestamp");
                w.timestamp(*timestamp);
                w.key("id");
                w.str(id);
                w.key("content");
                text_blocks(&mut w, INTERRUPTED);
                w.key("is_error");
                w.bool(true);
            }
            ItemKind::Entry | ItemKind::StripArguments | ItemKind::CompactedResponse { .. } => {
                let (raw, offset) = image.raw(item.origin)?;
                entry(image, plan, index, item.origin, &raw, &mut w)
                    .map_err(|found| corrupt(image, offset, found))?;
            }
        }
        w.close(b'}');
    }
    w.close(b']');
    Ok(())
}

fn corrupt(image: &LogImage, offset: u64, found: String) -> Error {
    Error::Corrupt {
        path: image.path().to_path_buf(),
        offset,
        expected: "entries whose heads, aux and body parts read".into(),
        found,
    }
}

/// A list of one text block holding `text`.
fn text_blocks(w: &mut Pretty<'_>, text: &str) {
    w.open_array();
    w.next();
    w.open_object();
    w.key("type");
    w.str("text");
    w.key("text");
    w.str(text);
    w.close(b'}');
    w.close(b']');
}

/// One entry of the view (as it is, its arguments stripped, or its content
/// compacted; resources deduplication replaced as the plan says).
fn entry(
    image: &LogImage,
    plan: &ViewPlan,
    index: usize,
    origin: usize,
    raw: &RawHead<'_>,
    w: &mut Pretty<'_>,
) -> std::result::Result<(), String> {
    let item = &plan.items[index];
    let fields = AuxFields::read(raw.kind, raw.aux)?;
    let part = |p: Part| raw.parts.find(p).map(|(_, len)| len);
    w.key("type");
    w.str(match raw.kind {
        Kind::TurnStart => "turn_start",
        Kind::ChatRequest => "chat_request",
        Kind::Message | Kind::Reasoning | Kind::Data => "chat_response",
        Kind::ToolCallRequest => "tool_call_request",
        Kind::ToolCallResponse => "tool_call_response",
        // Not in a view (listed so that a new kind must be decided on).
        Kind::InquiryRequest
        | Kind::InquiryResponse
        | Kind::ConfigDelta
        | Kind::Compaction
        | Kind::CompactionUndo
        | Kind::Unknown
        | Kind::MetaPatch => return Err(format!("a {:?} entry in a view", raw.kind)),
    });
    w.key("timestamp");
    w.timestamp(raw.timestamp);
    let replaced = plan.replaced(index);
    match (raw.kind, &fields) {
        (Kind::ChatRequest, AuxFields::ChatRequest { author, resources }) => {
            w.key("content");
            w.text_ref(origin, Part::Content, part(Part::Content).unwrap_or(0));
            if let Some(len) = part(Part::Schema) {
                w.key("schema");
                w.text_ref(origin, Part::Schema, len);
            }
            if let Some(a) = author {
                w.key("author");
                w.str(a);
            }
            if resources.count > 0 {
                w.key("resources");
                w.open_array();
                for (position, r) in resources.resources().enumerate() {
                    w.next();
                    match replaced.iter().find(|rep| rep.position == position) {
                        Some(rep) => replaced_resource(w, &r, &rep.message)?,
                        None => resource(w, &r)?,
                    }
                }
                w.close(b']');
            }
        }
        (Kind::Message | Kind::Reasoning | Kind::Data, _) => {
            let p = match raw.kind {
                Kind::Message => Part::Message,
                Kind::Reasoning => Part::Reasoning,
                _ => Part::Data,
            };
            w.key(p.name());
            w.text_ref(origin, p, part(p).unwrap_or(0));
        }
        (Kind::ToolCallRequest, AuxFields::ToolCallRequest { id, name }) => {
            w.key("id");
            w.str(id);
            w.key("name");
            w.str(name);
            w.key("arguments");
            if matches!(item.kind, ItemKind::StripArguments) {
                w.raw(b"{}");
            } else {
                w.text_ref(origin, Part::Arguments, part(Part::Arguments).unwrap_or(0));
            }
        }
        (Kind::ToolCallResponse, AuxFields::ToolCallResponse { id, blocks }) => {
            w.key("id");
            w.str(id);
            w.key("content");
            match &item.kind {
                ItemKind::CompactedResponse { name } => {
                    text_blocks(w, &compacted_text(name, is_error(raw)))
                }
                _ => {
                    w.open_array();
                    for (position, b) in blocks.blocks().enumerate() {
                        w.next();
                        match replaced.iter().find(|rep| rep.position == position) {
                            Some(rep) => {
                                w.open_object();
                                w.key("type");
                                w.str("text");
                                w.key("text");
                                w.str(&rep.message);
                                w.close(b'}');
                            }
                            None => block(w, &b)?,
                        }
                    }
                    w.close(b']');
                }
            }
            w.key("is_error");
            w.bool(is_error(raw));
        }
        (Kind::TurnStart, _) => {}
        (kind, fields) => {
            return Err(format!(
                "aux fields {fields:?} that are not those of a {kind:?} entry"
            ))
        }
    }
    if let Some(len) = part(Part::Metadata) {
        w.key("metadata");
        w.text_ref(origin, Part::Metadata, len);
    }
    if part(Part::Extra).is_some() {
        // Rare: the entry's unknown fields, read from its body.
        let (raw, body, _) = image.entry_body(origin).map_err(|e| e.to_string())?;
        let parts = BodyParts::new(&raw, body)?;
        if let Some(bytes) = parts.bytes(Part::Extra) {
            w.fields_of(RawValue(bytes))?;
        }
    }
    Ok(())
}

fn is_error(raw: &RawHead<'_>) -> bool {
    raw.flags & crate::event::binary::FLAG_IS_ERROR != 0
}

/// A resource (RFD 065 form), content as a reference.
fn resource(w: &mut Pretty<'_>, r: &ResourceFields<'_>) -> std::result::Result<(), String> {
    w.open_object();
    w.key("uri");
    w.str(r.uri);
    if let Some(m) = r.mime_type {
        w.key("mimeType");
        w.str(m);
    }
    w.key(if r.binary { "blob" } else { "text" });
    w.blob(&r.content);
    if let Some(a) = r.annotations {
        w.key("annotations");
        w.value(a)?;
    }
    for (key, v) in [
        ("name", r.name),
        ("title", r.title),
        ("description", r.description),
    ] {
        if let Some(v) = v {
            w.key(key);
            w.str(v);
        }
    }
    if let Some(f) = &r.formatted {
        w.key("formatted");
        w.blob(f);
    }
    if let Some(extra) = r.extra {
        w.fields_of(extra)?;
    }
    w.close(b'}');
    Ok(())
}

/// A resource deduplication replaced: its URI and descriptive fields, the
/// reference message as its `text/plain` content, no `formatted`.
fn replaced_resource(
    w: &mut Pretty<'_>,
    r: &ResourceFields<'_>,
    message: &str,
) -> std::result::Result<(), String> {
    w.open_object();
    w.key("uri");
    w.str(r.uri);
    w.key("mimeType");
    w.str("text/plain");
    w.key("text");
    w.str(message);
    if let Some(a) = r.annotations {
        w.key("annotations");
        w.value(a)?;
    }
    for (key, v) in [
        ("name", r.name),
        ("title", r.title),
        ("description", r.description),
    ] {
        if let Some(v) = v {
            w.key(key);
            w.str(v);
        }
    }
    if let Some(extra) = r.extra {
        w.fields_of(extra)?;
    }
    w.close(b'}');
    Ok(())
}

/// A tool response block, content as a reference.
fn block(w: &mut Pretty<'_>, b: &BlockFields<'_>) -> std::result::Result<(), String> {
    match b {
        BlockFields::Text {
            text,
            mime_type,
            annotations,
            extra,
        } => {
            w.open_object();
            w.key("type");
            w.str("text");
            w.key("text");
            w.blob(text);
            if let Some(m) = mime_type {
                w.key("mimeType");
                w.str(m);
            }
            if let Some(a) = annotations {
                w.key("annotations");
                w.value(*a)?;
            }
            if let Some(extra) = extra {
                w.fields_of(*extra)?;
            }
            w.close(b'}');
        }
        BlockFields::Resource { resource: r, extra } => {
            w.open_object();
            w.key("type");
            w.str("resource");
            w.key("resource");
            resource(w, r)?;
            if let Some(extra) = extra {
                w.fields_of(*extra)?;
            }
            w.close(b'}');
        }
        BlockFields::Other(o) => w.value(*o)?,
    }
    Ok(())
}
