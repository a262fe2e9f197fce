//! JP's files as text, from entries with their content inline or in the
//! blob store: what export writes, and what import renders to compare with
//! the bytes it read (so that byte identity is checked when a conversation
//! is imported, not hoped for at export).
//!
//! A file is a sequence of values, each rendered on its own
//! ([`Element`]: an entry of `events.json`, or the one value of
//! `metadata.json` or `base_config.json`), joined by the text between them
//! (the *gaps*: `[`, `,`, `]`, line breaks and indentation). [`assemble`]
//! writes a file from its elements and its [`FileText`]: the layout, the
//! gaps that are not the layout's, and the edits of the values whose text
//! is not their rendering. [`record`] is the inverse at import: from the
//! elements and the file's bytes, the [`FileText`] that assembles back to
//! exactly those bytes.

use serde_json::Value;

use super::base64::{encode_leaves_as, Base64};
use super::order;
use super::text::{self, apply, diff, pretty, Shape};
use super::{FileText, Fix, JpInfo};
use jpstore_engine::event::{Entry, EventKind, Object};
use jpstore_engine::internal::event::json::{render_entry, PayloadKind};

/// The key of the first entry of the legacy layout in [`FileText::fixes`]
/// and `gaps`.
pub const FIRST_KEY: &str = "first";
/// The key of the one value of `metadata.json` and `base_config.json`.
pub const VALUE_KEY: &str = "value";
/// The gap before the first value.
pub const START_KEY: &str = "start";
/// The gap after the last value.
pub const END_KEY: &str = "end";

/// One value of a file as rendered, before the file's fixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// Its key in [`FileText::fixes`] and `gaps`: the stored entry's index,
    /// [`FIRST_KEY`] or [`VALUE_KEY`].
    pub key: String,
    /// The rendering, pretty-printed at its depth in the file (1 for an
    /// entry of `events.json`, 0 for a file of one value), without the
    /// indentation of its first line.
    pub text: String,
}

/// The two kinds of JP file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `events.json`: a JSON array of entries.
    Array,
    /// `metadata.json`, `base_config.json`: one JSON object.
    Single,
}

/// The gaps a file of `kind` with `n` values has in `shape`: before the
/// first, between two, after the last (with the final line break JP
/// writes).
fn default_gaps(kind: FileKind, shape: &Shape, n: usize) -> (String, String, String) {
    let nl = shape.newline();
    let indent = shape.indent.as_deref();
    match (kind, indent) {
        (FileKind::Single, _) => (String::new(), String::new(), nl.to_owned()),
        (FileKind::Array, _) if n == 0 => ("[".to_owned(), String::new(), format!("]{nl}")),
        (FileKind::Array, Some(unit)) => (
            format!("[{nl}{unit}"),
            format!(",{nl}{unit}"),
            format!("{nl}]{nl}"),
        ),
        (FileKind::Array, None) => ("[".to_owned(), ",".to_owned(), format!("]{nl}")),
    }
}

/// Writes a file from its elements and what import recorded of its text
/// (`file`; `FileText::default()` for JP's layout and nothing else). A fix
/// whose rendering has changed since import (a build that renders that
/// value otherwise) is not applied: the value is written as rendered and
/// `lossy` says so, naming `what` (the file).
pub fn assemble(
    elements: &[Element],
    file: &FileText,
    kind: FileKind,
    what: &str,
    lossy: &mut Vec<String>,
) -> String {
    let total: usize = elements.iter().map(|e| e.text.len() + 8).sum();
    let mut out = String::with_capacity(total + 16);
    write_pieces(elements, file, kind, what, lossy, &mut |piece| {
        out.push_str(piece);
        true
    });
    out
}

/// Whether [`assemble`] gives `original`, compared piece by piece (no
/// copy of the file is made); false also when a fix does not apply.
fn assembles_to(elements: &[Element], file: &FileText, kind: FileKind, original: &str) -> bool {
    let mut lossy = Vec::new();
    let mut rest = original.as_bytes();
    let whole = write_pieces(
        elements,
        file,
        kind,
        "",
        &mut lossy,
        &mut |piece| match rest.strip_prefix(piece.as_bytes()) {
            Some(after) => {
                rest = after;
                true
            }
            None => false,
        },
    );
    whole && rest.is_empty() && lossy.is_empty()
}

/// The pieces of a file in order (gaps, values with their fixes applied),
/// each given to `sink` until it answers false; whether all were taken.
fn write_pieces(
    elements: &[Element],
    file: &FileText,
    kind: FileKind,
    what: &str,
    lossy: &mut Vec<String>,
    sink: &mut dyn FnMut(&str) -> bool,
) -> bool {
    let shape = file.shape();
    let (start, sep, end) = default_gaps(kind, &shape, elements.len());
    if !sink(file.gaps.get(START_KEY).unwrap_or(&start)) {
        return false;
    }
    for (i, element) in elements.iter().enumerate() {
        if i > 0 && !sink(file.gaps.get(&element.key).unwrap_or(&sep)) {
            return false;
        }
        if !sink(&element_text(element, file, what, lossy)) {
            return false;
        }
    }
    sink(file.gaps.get(END_KEY).unwrap_or(&end))
}

/// The text of `element` in a file whose text is `file`: its rendering
/// with its fix applied, if it has one. A fix whose rendering has changed
/// since import is not applied: the value is as rendered, and `lossy` says
/// so, naming `what` (the file).
pub fn element_text<'e>(
    element: &'e Element,
    file: &FileText,
    what: &str,
    lossy: &mut Vec<String>,
) -> std::borrow::Cow<'e, str> {
    let Some(Fix(crc, edits)) = file.fixes.get(&element.key) else {
        return std::borrow::Cow::Borrowed(&element.text);
    };
    let fixed = (crc32fast::hash(element.text.as_bytes()) == *crc)
        .then(|| apply(&element.text, edits))
        .flatten();
    match fixed {
        Some(text) => std::borrow::Cow::Owned(text),
        None => {
            lossy.push(format!(
                "{what}: the text of value `{}` as it was imported could not be \
                 restored (this build renders it otherwise); written as rendered",
                element.key
            ));
            std::borrow::Cow::Borrowed(&element.text)
        }
    }
}

/// What [`assemble`] needs to give back `original` (the bytes of a file,
/// as UTF-8, whose values lie at `spans`: [`text::array_items`] or
/// [`text::value_span`]) from `elements` in `shape`: the gaps that are not
/// the layout's and the edits of every value whose text is not its
/// rendering. `None` when the file's values do not correspond one to one
/// with the elements (nothing can be recorded that would give the bytes
/// back).
pub fn record(
    elements: &[Element],
    original: &str,
    spans: &[std::ops::Range<usize>],
    kind: FileKind,
    shape: &Shape,
) -> Option<FileText> {
    if spans.len() != elements.len() {
        return None;
    }
    let mut file = FileText::default();
    file.set_shape(shape);
    let (start, sep, end) = default_gaps(kind, shape, elements.len());
    let mut gap = |key: &str, found: &str, expected: &str| {
        if found != expected {
            file.gaps.insert(key.to_owned(), found.to_owned());
        }
    };
    match (spans.first(), spans.last()) {
        (Some(first), Some(last)) => {
            gap(START_KEY, original.get(..first.start)?, &start);
            gap(END_KEY, original.get(last.end..)?, &end);
        }
        _ => {
            // An empty array: its `[` ends the first gap.
            let open = original.find('[')? + 1;
            gap(START_KEY, original.get(..open)?, &start);
            gap(END_KEY, original.get(open..)?, &end);
        }
    }
    for (i, (element, span)) in elements.iter().zip(spans).enumerate() {
        if i > 0 {
            gap(
                &element.key,
                original.get(spans[i - 1].end..span.start)?,
                &sep,
            );
        }
        let found = original.get(span.clone())?;
        if found != element.text {
            file.fixes.insert(
                element.key.clone(),
                Fix(
                    crc32fast::hash(element.text.as_bytes()),
                    diff(&element.text, found),
                ),
            );
        }
    }
    assembles_to(elements, &file, kind, original).then_some(file)
}

/// The bytes a [`FileText`] keeps beside the rendering (for the budget of
/// what import keeps).
pub fn kept_bytes(file: &FileText) -> usize {
    let gaps: usize = file.gaps.iter().map(|(k, v)| k.len() + v.len()).sum();
    let fixes: usize = file
        .fixes
        .iter()
        .map(|(k, Fix(_, edits))| k.len() + 5 + text::edit_bytes(edits))
        .sum();
    gaps + fixes
}

/// The entries of `events.json`, rendered: the first entry of the legacy
/// layout (from `info.first_entry` and `base_text`, the base config's
/// text) when there is one, then every stored entry except compactions an
/// undo revoked and the undo entries (JP has no undo; its view is the same
/// without both, and `lossy` says so). `content` renders a payload inline
/// (from the blob store).
pub fn event_elements<C, E>(
    entries: &[Entry<C>],
    info: &JpInfo,
    base_text: Option<&str>,
    content: &mut impl FnMut(&C, PayloadKind) -> Result<Value, E>,
    lossy: &mut Vec<String>,
) -> Result<Vec<Element>, E> {
    let shape = info.events_text.shape();
    let mut out = Vec::with_capacity(entries.len() + 1);
    out.extend(first_element(info, base_text, &shape));
    let (written, left_out) = written_entries(entries);
    for i in written {
        // Put in the recorded order by `entry_element`.
        let value = jp_value_unordered(&entries[i], i, info, Base64::Always, content, lossy)?;
        out.push(entry_element(&entries[i], i, value, info, &shape));
    }
    if left_out > 0 {
        lossy.push(format!(
            "{left_out} undone compaction(s) and undo entries left out (JP has no undo; its view is the same)"
        ));
    }
    Ok(out)
}

/// The indices of the entries `events.json` holds, and how many are left
/// out: every entry but compactions an undo revoked and the undo entries.
pub fn written_entries<C>(entries: &[Entry<C>]) -> (Vec<usize>, usize) {
    let revoked = jpstore_engine::internal::projection::revoked_compactions(entries);
    let mut ordinal = 0u64;
    let mut written = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        match entry.event().map(|e| &e.kind) {
            Some(EventKind::CompactionUndo(_)) => continue,
            Some(EventKind::Compaction(_)) => {
                ordinal += 1;
                if revoked.contains(&(ordinal - 1)) {
                    continue;
                }
            }
            _ => {}
        }
        written.push(i);
    }
    let left_out = entries.len() - written.len();
    (written, left_out)
}

/// The first entry of the legacy layout, when the conversation has that
/// layout.
pub fn first_element(info: &JpInfo, base_text: Option<&str>, shape: &Shape) -> Option<Element> {
    (info.layout == super::ConfigLayout::FirstConfigDelta).then(|| {
        let first = info.first_entry.clone().unwrap_or_default();
        Element {
            key: FIRST_KEY.to_owned(),
            text: first_entry_text(&first, base_text.unwrap_or("{}"), shape),
        }
    })
}

/// The element of stored entry `index` from its value ([`jp_value`]): an
/// event's keys put in the recorded order, written in `shape` at depth 1.
pub fn entry_element<C>(
    entry: &Entry<C>,
    index: usize,
    value: Value,
    info: &JpInfo,
    shape: &Shape,
) -> Element {
    let value = match (entry, value) {
        (Entry::Event(e), Value::Object(o)) => {
            Value::Object(order::arrange(info, Some(index), e.kind.type_name(), o))
        }
        (_, v) => v,
    };
    let mut text = Vec::new();
    text::write_value(&value, 1, shape, &mut text);
    Element {
        key: index.to_string(),
        // serde_json writes UTF-8.
        text: String::from_utf8(text)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    }
}

/// The value of a file of one object (`metadata.json`, `base_config.json`)
/// from its text (any layout), rendered in `shape`.
pub fn value_element(json: &str, shape: &Shape) -> Element {
    let mut text = String::new();
    pretty(json, 0, shape, &mut text);
    Element {
        key: VALUE_KEY.to_owned(),
        text,
    }
}

/// The value of `metadata.json`, rendered in `shape`.
pub fn object_element(value: &Value, shape: &Shape) -> Element {
    let mut text = Vec::new();
    text::write_value(value, 0, shape, &mut text);
    Element {
        key: VALUE_KEY.to_owned(),
        text: String::from_utf8(text)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    }
}

/// The first entry of the legacy layout: `first` (the entry as the file
/// had it, its `delta` holding `{}` as a placeholder) with the base
/// config's text as its `delta` (written last if `first` has no `delta`,
/// as earlier builds stored it).
fn first_entry_text(first: &Object, base_text: &str, shape: &Shape) -> String {
    let mut json = String::from("{");
    let mut delta_written = false;
    for (k, v) in first {
        if json.len() > 1 {
            json.push(',');
        }
        json.push_str(&Value::String(k.clone()).to_string());
        json.push(':');
        if k == "delta" {
            json.push_str(base_text);
            delta_written = true;
        } else {
            json.push_str(&v.to_string());
        }
    }
    if !delta_written {
        if json.len() > 1 {
            json.push(',');
        }
        json.push_str("\"delta\":");
        json.push_str(base_text);
    }
    json.push('}');
    let mut text = String::new();
    pretty(&json, 1, shape, &mut text);
    text
}

/// One entry as JP writes it ([`jp_value_unordered`]), an event's keys in
/// the recorded order ([`order::arrange`]).
pub fn jp_value<C, E>(
    entry: &Entry<C>,
    index: usize,
    info: &JpInfo,
    content: &mut impl FnMut(&C, PayloadKind) -> Result<Value, E>,
    lossy: &mut Vec<String>,
) -> Result<Value, E> {
    let value = jp_value_unordered(entry, index, info, Base64::Always, content, lossy)?;
    Ok(match (entry, value) {
        (Entry::Event(event), Value::Object(o)) => {
            Value::Object(order::arrange(info, Some(index), event.kind.type_name(), o))
        }
        (_, value) => value,
    })
}

/// One entry as JP writes it, an event's keys still in the rendering's
/// order (equal, as a JSON value, to the entry in the file): its JSON with
/// JP's base64 as `base64` says (except on the leaves that were not base64
/// in the file). Content JP's format cannot express (typed blocks other
/// than one text, resources on a request) is written in the closest form JP
/// reads and reported in `lossy`.
pub fn jp_value_unordered<C, E>(
    entry: &Entry<C>,
    index: usize,
    info: &JpInfo,
    base64: Base64,
    content: &mut impl FnMut(&C, PayloadKind) -> Result<Value, E>,
    lossy: &mut Vec<String>,
) -> Result<Value, E> {
    let event = match entry {
        // A non-object entry of a JP file, kept under `$value`.
        Entry::Unknown(o) if o.len() == 1 && o.contains_key("$value") => {
            return Ok(o.get("$value").cloned().unwrap_or(Value::Null));
        }
        Entry::Unknown(o) => return Ok(Value::Object(o.clone())),
        Entry::Event(event) => event,
    };
    let raw: &[String] = info.raw.get(&index.to_string()).map_or(&[], Vec::as_slice);
    let mut o = match render_entry(entry, content)? {
        Value::Object(o) => o,
        // An event renders as an object; anything else is written as it is.
        other => return Ok(other),
    };
    match &event.kind {
        EventKind::ToolCallResponse(r) => {
            if let Some(c) = o.get_mut("content") {
                if !c.is_string() {
                    lossy.push(format!(
                        "tool call `{}`: {} content blocks written as one text",
                        r.id,
                        r.content.len()
                    ));
                    *c = Value::String(blocks_as_text(c));
                }
                if let Value::String(s) = c {
                    if !raw.iter().any(|p| p == "/content") {
                        if let Some(encoded) = base64.apply(s) {
                            *s = encoded;
                        }
                    }
                }
            }
        }
        EventKind::ToolCallRequest(_) => {
            if let Some(args) = o.get_mut("arguments") {
                encode_leaves_as(args, &mut "/arguments".to_string(), raw, base64);
            }
        }
        EventKind::ChatRequest(r) if !r.resources.is_empty() => {
            lossy.push(format!(
                "a chat request's {} resources written into its content",
                r.resources.len()
            ));
            let resources = o.shift_remove("resources").unwrap_or(Value::Null);
            let mut text = o
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            if let Value::Array(items) = resources {
                for item in items {
                    text.push_str("\n\n");
                    text.push_str(&resource_as_text(&item));
                }
            }
            o.insert("content".into(), text.into());
        }
        _ => {}
    }
    if let Some(meta) = o.get_mut("metadata") {
        encode_leaves_as(meta, &mut "/metadata".to_string(), raw, base64);
    }
    Ok(Value::Object(o))
}

/// Typed blocks as one text, the closest form JP reads.
fn blocks_as_text(content: &Value) -> String {
    let Value::Array(blocks) = content else {
        return content.to_string();
    };
    let parts: Vec<String> = blocks
        .iter()
        .map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => b
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            Some("resource") => b.get("resource").map_or(String::new(), resource_as_text),
            _ => b.to_string(),
        })
        .collect();
    parts.join("\n\n")
}

fn resource_as_text(r: &Value) -> String {
    let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
    if let Some(f) = r.get("formatted").and_then(Value::as_str) {
        return f.to_owned();
    }
    match (r.get("text").and_then(Value::as_str), r.get("blob")) {
        (Some(t), _) => format!("{uri}:\n{t}"),
        (None, Some(Value::String(b))) => {
            format!("{uri}: binary content, {} bytes of base64", b.len())
        }
        _ => uri.to_owned(),
    }
}
