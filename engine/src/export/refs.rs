//! `view --refs` of a version 2 log, written straight from entry heads and
//! aux (format-spec.md 4.2): no entry is decoded and no body read but a
//! config delta's or, rarely, an entry's unknown fields. Body parts are
//! written as `{"$text": "<entry>/<field>", "size": n}` references, content
//! as `{"$blob", "size"}` references; the text the projection and
//! deduplication create is inline. The JSON is what `serde_json`'s pretty
//! printer writes (two-space indentation), with keys in the renderer's
//! order (`event::render`).

use crate::conversation::image::{LogImage, ParsedEntry};
use crate::error::{Error, Result};
use crate::event::binary::decode::{AuxFields, BlockFields, BodyParts, RawValue, ResourceFields};
use crate::event::binary::value::{
    push_json_str, push_pretty_indent, push_u64, put_value, write_json, JsonStyle,
};
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
    /// Keys written in the open objects, innermost last (to leave out
    /// unknown fields that would repeat one), and where each object's
    /// start: two stacks reused for every object. Kept only inside objects
    /// that have unknown fields (`tracking`: how many such are open).
    keys: Vec<&'static str>,
    objects: Vec<usize>,
    tracking: usize,
}

impl<'o> Pretty<'o> {
    /// A writer at `depth` containers, `fresh` if nothing was written in the
    /// innermost one yet.
    fn new(out: &'o mut Vec<u8>, depth: usize, fresh: bool) -> Self {
        Pretty {
            out,
            depth,
            fresh,
            keys: Vec::new(),
            objects: Vec::new(),
            tracking: 0,
        }
    }

    fn newline(&mut self) {
        push_pretty_indent(self.out, self.depth);
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
        if self.tracking > 0 {
            self.objects.push(self.keys.len());
        }
    }

    /// An object with unknown fields: its keys are kept until they are
    /// written ([`Pretty::extra_key`]); closed by [`Pretty::close_tracked`].
    fn open_tracked(&mut self) {
        self.tracking += 1;
        self.open_object();
    }

    fn close_tracked(&mut self) {
        self.close(b'}');
        self.tracking -= 1;
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
        if bracket == b'}' && self.tracking > 0 {
            let start = self.objects.pop().unwrap_or(0);
            self.keys.truncate(start);
        }
    }

    /// A key the renderer knows (no character of it needs escaping).
    fn key(&mut self, key: &'static str) {
        self.next();
        if self.tracking > 0 {
            self.keys.push(key);
        }
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\": ");
    }

    /// A key of an unknown field, written unless a known key of the object
    /// has its name; returns whether it was.
    fn extra_key(&mut self, key: &str) -> bool {
        let start = self.objects.last().copied().unwrap_or(0);
        if self.keys[start..].contains(&key) {
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

    /// A string the renderer knows needs no escape (a type name).
    fn known(&mut self, s: &'static str) {
        self.out.push(b'"');
        self.out.extend_from_slice(s.as_bytes());
        self.out.push(b'"');
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
        self.out.push(b'"');
        t.write_jp(self.out);
        self.out.push(b'"');
    }

    /// A value in the binary form (checked when the aux was read).
    fn value(&mut self, v: RawValue<'_>) -> std::result::Result<(), String> {
        write_json(
            &mut Reader::new(v.0),
            self.out,
            JsonStyle::Pretty(self.depth),
        )
    }

    fn blob(&mut self, r: &BlobRef) {
        self.open_object();
        self.key("$blob");
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [b'"'; 66];
        for (pair, b) in hex[1..65].chunks_exact_mut(2).zip(r.id.as_bytes()) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 0x0f)];
        }
        self.out.extend_from_slice(&hex);
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

/// Items rendered on all cores from this many on.
const PARALLEL_RENDER: usize = 2048;
/// Room made in the output for each item (more than an entry of a coding
/// agent's conversation takes: room not written to costs nothing).
const BYTES_PER_ITEM: usize = 512;

/// Writes the view `plan` of the conversation in `image` (whose entries
/// `parsed` the plan was made from) as a pretty JSON array into `out`,
/// content and body parts as references; long views in parts on all
/// cores, joined in order.
pub(crate) fn render_refs(
    image: &LogImage,
    parsed: &[ParsedEntry<'_>],
    plan: &ViewPlan,
    out: &mut Vec<u8>,
) -> Result<()> {
    let threads = crate::parallel::cores();
    if plan.items.len() < PARALLEL_RENDER || threads < 2 {
        out.reserve(plan.items.len() * BYTES_PER_ITEM + 3);
        out.push(b'[');
        render_items(image, parsed, plan, 0..plan.items.len(), out)?;
    } else {
        let per = plan.items.len().div_ceil(threads);
        let ranges: Vec<std::ops::Range<usize>> = (0..threads)
            .map(|t| t * per..((t + 1) * per).min(plan.items.len()))
            .collect();
        // The first part is written into `out` (room made for all of
        // them), the others beside it and copied after it.
        out.reserve(plan.items.len() * BYTES_PER_ITEM + 3);
        out.push(b'[');
        let first = std::sync::Mutex::new(Some(std::mem::take(out)));
        let mut parts = crate::parallel::map_ordered(&ranges, |range| {
            let taken = match range.start {
                0 => first.lock().ok().and_then(|mut f| f.take()),
                _ => None,
            };
            let mut part =
                taken.unwrap_or_else(|| Vec::with_capacity(range.len() * BYTES_PER_ITEM));
            render_items(image, parsed, plan, range.clone(), &mut part).map(|()| part)
        })
        .into_iter();
        *out = parts.next().unwrap_or_else(|| Ok(Vec::new()))?;
        for part in parts {
            out.extend_from_slice(&part?);
        }
    }
    out.extend_from_slice(if plan.items.is_empty() { b"]" } else { b"\n]" });
    Ok(())
}

/// Writes items `range` of the plan, each preceded by its separator and
/// indentation (as elements of the top array): the common shapes of
/// entries by [`fast_item`], the others by the general writer.
fn render_items(
    image: &LogImage,
    parsed: &[ParsedEntry<'_>],
    plan: &ViewPlan,
    range: std::ops::Range<usize>,
    out: &mut Vec<u8>,
) -> Result<()> {
    for index in range {
        if !fast_item(parsed, plan, index, out) {
            general_item(image, parsed, plan, index, out)?;
        }
    }
    Ok(())
}

/// Writes item `index` of the plan if it is of a common shape (an entry
/// with no unknown field, no resource, no annotation and no type of text
/// block, a projected item), with the literal spans of its indentation;
/// returns whether it did. The bytes are those the general writer gives.
fn fast_item(parsed: &[ParsedEntry<'_>], plan: &ViewPlan, index: usize, out: &mut Vec<u8>) -> bool {
    let item = &plan.items[index];
    let open: &[u8] = if index == 0 {
        b"\n  {\n    \"type\": \""
    } else {
        b",\n  {\n    \"type\": \""
    };
    let timestamp = |out: &mut Vec<u8>, t: Timestamp| {
        out.extend_from_slice(b"\",\n    \"timestamp\": \"");
        t.write_jp(out);
        out.push(b'"');
    };
    match &item.kind {
        ItemKind::Entry | ItemKind::StripArguments | ItemKind::CompactedResponse { .. } => {}
        // Rare: the general writer.
        _ => return false,
    }
    let Some(entry) = parsed.get(item.origin) else {
        return false;
    };
    let raw = &entry.raw;
    if raw.parts.find(Part::Extra).is_some() || !plan.replaced(index).is_empty() {
        return false;
    }
    let mark = out.len();
    let part = |p: Part| raw.parts.find(p).map(|(_, len)| len);
    let text_ref = |out: &mut Vec<u8>, p: Part, len: u32| {
        out.extend_from_slice(b",\n    \"");
        out.extend_from_slice(p.name().as_bytes());
        out.extend_from_slice(b"\": {\n      \"$text\": \"");
        push_u64(out, item.origin as u64);
        out.push(b'/');
        out.extend_from_slice(p.name().as_bytes());
        out.extend_from_slice(b"\",\n      \"size\": ");
        push_u64(out, u64::from(len));
        out.extend_from_slice(b"\n    }");
    };
    out.extend_from_slice(open);
    match (raw.kind, &entry.fields) {
        (Kind::TurnStart, _) => {
            out.extend_from_slice(b"turn_start");
            timestamp(out, raw.timestamp);
        }
        (
            Kind::ChatRequest,
            AuxFields::ChatRequest {
                author: None,
                resources,
            },
        ) if resources.count == 0 && part(Part::Schema).is_none() => {
            out.extend_from_slice(b"chat_request");
            timestamp(out, raw.timestamp);
            text_ref(out, Part::Content, part(Part::Content).unwrap_or(0));
        }
        (Kind::Message | Kind::Reasoning | Kind::Data, _) => {
            out.extend_from_slice(b"chat_response");
            timestamp(out, raw.timestamp);
            let p = match raw.kind {
                Kind::Message => Part::Message,
                Kind::Reasoning => Part::Reasoning,
                _ => Part::Data,
            };
            text_ref(out, p, part(p).unwrap_or(0));
        }
        (Kind::ToolCallRequest, AuxFields::ToolCallRequest { id, name }) => {
            out.extend_from_slice(b"tool_call_request");
            timestamp(out, raw.timestamp);
            out.extend_from_slice(b",\n    \"id\": ");
            push_json_str(out, id);
            out.extend_from_slice(b",\n    \"name\": ");
            push_json_str(out, name);
            if matches!(item.kind, ItemKind::StripArguments) {
                out.extend_from_slice(b",\n    \"arguments\": {}");
            } else {
                text_ref(out, Part::Arguments, part(Part::Arguments).unwrap_or(0));
            }
        }
        (Kind::ToolCallResponse, AuxFields::ToolCallResponse { id, blocks }) => {
            out.extend_from_slice(b"tool_call_response");
            timestamp(out, raw.timestamp);
            out.extend_from_slice(b",\n    \"id\": ");
            push_json_str(out, id);
            out.extend_from_slice(b",\n    \"content\": [");
            if let ItemKind::CompactedResponse { name } = &item.kind {
                out.extend_from_slice(
                    b"\n      {\n        \"type\": \"text\",\n        \"text\": ",
                );
                push_json_str(out, &compacted_text(name, is_error(raw)));
                out.extend_from_slice(b"\n      }\n    ]");
            } else if blocks.count == 0 {
                out.push(b']');
            } else {
                for (i, b) in blocks.blocks().enumerate() {
                    let BlockFields::Text {
                        text,
                        mime_type: None,
                        annotations: None,
                        extra: None,
                    } = b
                    else {
                        out.truncate(mark);
                        return false;
                    };
                    out.extend_from_slice(if i == 0 {
                        &b"\n      {\n        \"type\": \"text\",\n        \"text\": {\n          \"$blob\": \""[..]
                    } else {
                        &b",\n      {\n        \"type\": \"text\",\n        \"text\": {\n          \"$blob\": \""[..]
                    });
                    push_hex(out, &text);
                    out.extend_from_slice(b"\",\n          \"size\": ");
                    push_u64(out, text.size);
                    out.extend_from_slice(b"\n        }\n      }");
                }
                out.extend_from_slice(b"\n    ]");
            }
            out.extend_from_slice(if is_error(raw) {
                &b",\n    \"is_error\": true"[..]
            } else {
                &b",\n    \"is_error\": false"[..]
            });
        }
        _ => {
            out.truncate(mark);
            return false;
        }
    }
    if let Some(len) = part(Part::Metadata) {
        text_ref(out, Part::Metadata, len);
    }
    out.extend_from_slice(b"\n  }");
    true
}

/// Appends the 64 hex digits of a blob id.
fn push_hex(out: &mut Vec<u8>, r: &BlobRef) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = [0u8; 64];
    for (pair, b) in hex.chunks_exact_mut(2).zip(r.id.as_bytes()) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 0x0f)];
    }
    out.extend_from_slice(&hex);
}

/// Writes item `index` of the plan with the general writer.
fn general_item(
    image: &LogImage,
    parsed: &[ParsedEntry<'_>],
    plan: &ViewPlan,
    index: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    let mut w = Pretty::new(out, 1, index == 0);
    {
        let item = &plan.items[index];
        w.next();
        let entry_at = match item.kind {
            ItemKind::Entry | ItemKind::StripArguments | ItemKind::CompactedResponse { .. } => {
                Some(parsed.get(item.origin).ok_or_else(|| {
                    corrupt(image, image.log_end(), format!("no entry {}", item.origin))
                })?)
            }
            _ => None,
        };
        let tracked = entry_at.is_some_and(|e| e.raw.parts.find(Part::Extra).is_some());
        if tracked {
            w.open_tracked();
        } else {
            w.open_object();
        }
        match &item.kind {
            ItemKind::SummaryStart { timestamp } => {
                w.key("type");
                w.known("turn_start");
                w.key("timestamp");
                w.timestamp(*timestamp);
            }
            ItemKind::SummaryRequest { timestamp } => {
                w.key("type");
                w.known("chat_request");
                w.key("timestamp");
                w.timestamp(*timestamp);
                w.key("content");
                w.str(SUMMARY_REQUEST);
            }
            ItemKind::Summary { timestamp, text } => {
                w.key("type");
                w.known("chat_response");
                w.key("timestamp");
                w.timestamp(*timestamp);
                w.key("message");
                w.str(text);
            }
            ItemKind::Interrupted { timestamp, id } => {
                w.key("type");
                w.known("tool_call_response");
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
                if let Some(entry_at) = entry_at {
                    entry(image, plan, index, item.origin, entry_at, &mut w)
                        .map_err(|found| corrupt(image, entry_at.offset, found))?;
                }
            }
        }
        if tracked {
            w.close_tracked();
        } else {
            w.close(b'}');
        }
    }
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
    w.known("text");
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
    parsed: &ParsedEntry<'_>,
    w: &mut Pretty<'_>,
) -> std::result::Result<(), String> {
    let item = &plan.items[index];
    let (raw, fields) = (&parsed.raw, &parsed.fields);
    let part = |p: Part| raw.parts.find(p).map(|(_, len)| len);
    w.key("type");
    let not_in_view = || format!("a {:?} entry in a view", raw.kind);
    w.known(match raw.kind.type_name() {
        Some(name) if raw.kind.in_view() => name,
        _ => return Err(not_in_view()),
    });
    w.key("timestamp");
    w.timestamp(raw.timestamp);
    let replaced = plan.replaced(index);
    let mismatch = || {
        format!(
            "aux fields {fields:?} that are not those of a {:?} entry",
            raw.kind
        )
    };
    let mut text_part = |p: Part| {
        w.key(p.name());
        w.text_ref(origin, p, part(p).unwrap_or(0));
    };
    // Exhaustive on the kind: a new kind does not compile until it is
    // written here (or refused, as not in a view).
    match raw.kind {
        Kind::ChatRequest => {
            let AuxFields::ChatRequest { author, resources } = fields else {
                return Err(mismatch());
            };
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
        Kind::Message => text_part(Part::Message),
        Kind::Reasoning => text_part(Part::Reasoning),
        Kind::Data => text_part(Part::Data),
        Kind::ToolCallRequest => {
            let AuxFields::ToolCallRequest { id, name } = fields else {
                return Err(mismatch());
            };
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
        Kind::ToolCallResponse => {
            let AuxFields::ToolCallResponse { id, blocks } = fields else {
                return Err(mismatch());
            };
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
                                w.known("text");
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
        Kind::TurnStart => {}
        Kind::InquiryRequest
        | Kind::InquiryResponse
        | Kind::ConfigDelta
        | Kind::Compaction
        | Kind::CompactionUndo
        | Kind::Unknown
        | Kind::MetaPatch => return Err(not_in_view()),
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

/// Opens an object, keeping its keys if it has unknown fields.
fn open(w: &mut Pretty<'_>, tracked: bool) {
    if tracked {
        w.open_tracked();
    } else {
        w.open_object();
    }
}

/// Closes an object [`open`] opened.
fn close(w: &mut Pretty<'_>, tracked: bool) {
    if tracked {
        w.close_tracked();
    } else {
        w.close(b'}');
    }
}

fn is_error(raw: &RawHead<'_>) -> bool {
    raw.flags & crate::event::binary::FLAG_IS_ERROR != 0
}

/// A resource (RFD 065 form), content as a reference.
fn resource(w: &mut Pretty<'_>, r: &ResourceFields<'_>) -> std::result::Result<(), String> {
    open(w, r.extra.is_some());
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
    close(w, r.extra.is_some());
    Ok(())
}

/// A resource deduplication replaced: its URI and descriptive fields, the
/// reference message as its `text/plain` content, no `formatted`.
fn replaced_resource(
    w: &mut Pretty<'_>,
    r: &ResourceFields<'_>,
    message: &str,
) -> std::result::Result<(), String> {
    open(w, r.extra.is_some());
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
    close(w, r.extra.is_some());
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
            open(w, extra.is_some());
            w.key("type");
            w.known("text");
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
            close(w, extra.is_some());
        }
        BlockFields::Resource { resource: r, extra } => {
            open(w, extra.is_some());
            w.key("type");
            w.known("resource");
            w.key("resource");
            resource(w, r)?;
            if let Some(extra) = extra {
                w.fields_of(*extra)?;
            }
            close(w, extra.is_some());
        }
        BlockFields::Other(o) => w.value(*o)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::read::open_reader;
    use crate::conversation::ConversationId;
    use crate::event::input::parse_input;
    use crate::event::json::ParseMode;
    use crate::{NewConversation, Store, StoreOptions};
    use serde_json::json;

    /// Every item the fast path writes is byte for byte what the general
    /// writer writes, and the whole is what `serde_json` pretty-prints.
    #[test]
    fn the_fast_path_writes_what_the_general_writer_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
        let id = ConversationId::parse("c").expect("id");
        let mut w = store
            .create(NewConversation {
                id: Some(id.clone()),
                ..NewConversation::default()
            })
            .expect("create");
        let lines = [
            json!({"type": "turn_start"}),
            json!({"type": "chat_request", "content": "q \"1\"", "metadata": {"k": "v"}}),
            json!({"type": "chat_request", "content": "q", "author": "me", "schema": {"type": "object"}}),
            json!({"type": "chat_response", "reasoning": "r"}),
            json!({"type": "chat_response", "data": {"x": [1]}}),
            json!({"type": "tool_call_request", "id": "a\"b", "name": "fs_read_file", "arguments": {"p": 1}}),
            json!({"type": "tool_call_response", "id": "a\"b", "content": "out", "is_error": false}),
            json!({"type": "tool_call_request", "id": "c", "name": "grep", "arguments": {}}),
            json!({"type": "tool_call_response", "id": "c", "content": [], "is_error": true}),
            json!({"type": "tool_call_request", "id": "d", "name": "grep", "arguments": {}, "later": 1}),
            json!({"type": "tool_call_response", "id": "d", "content": [{"type": "text", "text": "t", "mimeType": "text/x"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "A"}}], "is_error": false}),
            json!({"type": "tool_call_request", "id": "e", "name": "grep", "arguments": {}}),
            json!({"type": "chat_response", "message": "m"}),
            json!({"type": "turn_start"}),
            json!({"type": "chat_request", "content": "q2"}),
            json!({"type": "compaction", "from_turn": 1, "to_turn": 1, "tool_calls": {"policy": "strip", "request": true, "response": true}}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let entries = parse_input(
            &text,
            ParseMode::Strict {
                now: crate::timestamp::Timestamp::from_unix(1_780_000_000, 5).expect("time"),
            },
        )
        .expect("input")
        .entries;
        w.append(entries).expect("append");
        drop(w);
        let mut reader = open_reader(&**store.backend(), &id, store.options().log).expect("reader");
        let image = LogImage::read(&mut reader, &id).expect("image");
        let (parsed, heads) = image.parse_entries_and_heads().expect("parse");
        let plan = crate::projection::plan_view(&heads, Some(&Default::default()));
        let mut fast_ones = 0;
        for index in 0..plan.items.len() {
            let mut fast = Vec::new();
            if fast_item(&parsed, &plan, index, &mut fast) {
                fast_ones += 1;
                let mut general = Vec::new();
                general_item(&image, &parsed, &plan, index, &mut general).expect("general");
                assert_eq!(
                    String::from_utf8_lossy(&fast),
                    String::from_utf8_lossy(&general),
                    "item {index}"
                );
            }
        }
        assert!(fast_ones >= 8, "{fast_ones} items on the fast path");
        let mut out = Vec::new();
        render_refs(&image, &parsed, &plan, &mut out).expect("render");
        let value: serde_json::Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(
            String::from_utf8_lossy(&out),
            serde_json::to_string_pretty(&value).expect("pretty")
        );
    }
}
