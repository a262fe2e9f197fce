//! The JSON form of entries, written as they are serialized (`export --format
//! json`, `view`, JP export and the JSON of `attach`): a rendering borrows the
//! entries and writes each field straight into the serializer, so rendering
//! a long conversation copies none of its strings and maps. A
//! `serde_json::Value`, where one is wanted, is this same rendering
//! serialized with `serde_json::to_value` ([`super::json::render_entry`]).
//!
//! Keys come in a fixed order: `type`, `timestamp`, the fields of the type,
//! `metadata`, then the entry's unknown fields (`extra`), except any whose
//! name was already written.

use std::cell::RefCell;

use serde::ser::{Error as _, Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{json, Map, Value};

use super::model::*;

/// The JSON key of a blob reference.
pub const BLOB_KEY: &str = "$blob";

/// Whether a payload is text or binary (decides string vs base64 when
/// rendered inline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadKind {
    /// UTF-8 text.
    Text,
    /// Binary (base64 when inline).
    Binary,
}

/// Renders one payload as its JSON form, or fails with the caller's error.
pub type ContentFn<'f, C, E> = Box<dyn FnMut(&C, PayloadKind) -> Result<PayloadJson, E> + 'f>;

/// The JSON form of one payload, as a [`ContentFn`] renders it.
#[derive(Debug, Clone, PartialEq)]
pub enum PayloadJson {
    /// Any JSON value (inline text, base64 of binary content).
    Value(Value),
    /// A reference to a blob, written as `{"$blob": <hex>, "size": n}`
    /// without building a value first.
    Ref(BlobRef),
}

impl From<Value> for PayloadJson {
    fn from(v: Value) -> Self {
        PayloadJson::Value(v)
    }
}

impl Serialize for PayloadJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PayloadJson::Value(v) => v.serialize(s),
            PayloadJson::Ref(r) => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry(BLOB_KEY, &r.id)?;
                map.serialize_entry("size", &r.size)?;
                map.end()
            }
        }
    }
}

/// Entries (one, or a list rendered as a JSON array) and how their payloads
/// are rendered. Serialize it with any serde serializer, then call
/// [`Rendered::take_error`]: a payload that could not be rendered stops the
/// serialization with a generic message, and `take_error` returns the real
/// error.
pub struct Rendered<'a, 'f, C, E> {
    items: Items<'a, C>,
    ctx: Ctx<'f, C, E>,
}

enum Items<'a, C> {
    One(&'a Entry<C>),
    Many(&'a [Entry<C>]),
    Resource(&'a Resource<C>),
}

struct Ctx<'f, C, E> {
    content: RefCell<ContentFn<'f, C, E>>,
    error: RefCell<Option<E>>,
}

impl<'a, 'f, C, E> Rendered<'a, 'f, C, E> {
    fn new(items: Items<'a, C>, content: ContentFn<'f, C, E>) -> Self {
        Rendered {
            items,
            ctx: Ctx {
                content: RefCell::new(content),
                error: RefCell::new(None),
            },
        }
    }

    /// One entry, as a JSON object.
    pub fn entry(entry: &'a Entry<C>, content: ContentFn<'f, C, E>) -> Self {
        Self::new(Items::One(entry), content)
    }

    /// A list of entries, as a JSON array.
    pub fn entries(entries: &'a [Entry<C>], content: ContentFn<'f, C, E>) -> Self {
        Self::new(Items::Many(entries), content)
    }

    /// One resource (RFD 065 form), as a JSON object.
    pub fn resource(resource: &'a Resource<C>, content: ContentFn<'f, C, E>) -> Self {
        Self::new(Items::Resource(resource), content)
    }

    /// The content renderer's error, if it failed during a serialization
    /// of `self` (which then failed with a generic message): check it
    /// before the serializer's own result.
    pub fn take_error(&self) -> Option<E> {
        self.ctx.error.borrow_mut().take()
    }

    /// The rendering as a JSON value.
    pub fn to_value(&self) -> Result<Value, E> {
        let value = serde_json::to_value(self);
        match (self.take_error(), value) {
            (Some(e), _) => Err(e),
            (None, Ok(v)) => Ok(v),
            // `to_value` fails only for a map key that is not a string;
            // every map of the model is keyed by strings.
            (None, Err(e)) => unreachable!("rendering entries as a JSON value failed: {e}"),
        }
    }
}

impl<C, E> Serialize for Rendered<'_, '_, C, E> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let sink: &dyn Sink<C> = &self.ctx;
        match self.items {
            Items::One(e) => With(e, sink).serialize(s),
            Items::Many(es) => {
                let mut seq = s.serialize_seq(Some(es.len()))?;
                for e in es {
                    seq.serialize_element(&With(e, sink))?;
                }
                seq.end()
            }
            Items::Resource(r) => With(r, sink).serialize(s),
        }
    }
}

/// Renders payloads for the serializers below; `None` when the renderer
/// failed (its error is kept for [`Rendered::finish`]).
trait Sink<C> {
    fn render(&self, c: &C, kind: PayloadKind) -> Option<PayloadJson>;
}

impl<C, E> Sink<C> for Ctx<'_, C, E> {
    fn render(&self, c: &C, kind: PayloadKind) -> Option<PayloadJson> {
        let rendered = (self.content.borrow_mut())(c, kind);
        match rendered {
            Ok(v) => Some(v),
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                None
            }
        }
    }
}

/// A part of an entry together with the payload renderer.
struct With<'a, T: ?Sized, C>(&'a T, &'a dyn Sink<C>);

/// A payload to render.
struct Content<'a, C>(&'a C, PayloadKind, &'a dyn Sink<C>);

impl<C> Serialize for Content<'_, C> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.2.render(self.0, self.1) {
            Some(v) => v.serialize(s),
            None => Err(S::Error::custom("a payload could not be rendered")),
        }
    }
}

/// A JSON object being written: remembers its keys so that unknown fields
/// never repeat one.
struct Obj<M> {
    map: M,
    keys: [&'static str; 12],
    len: usize,
}

impl<M: SerializeMap> Obj<M> {
    fn new(map: M) -> Self {
        Obj {
            map,
            keys: [""; 12],
            len: 0,
        }
    }

    fn field<V: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &V,
    ) -> Result<(), M::Error> {
        if let Some(slot) = self.keys.get_mut(self.len) {
            *slot = key;
            self.len += 1;
        }
        self.map.serialize_entry(key, value)
    }

    /// Writes the unknown fields not already written, and closes the object.
    fn end(mut self, extra: &Object) -> Result<M::Ok, M::Error> {
        for (k, v) in extra {
            if !self.keys[..self.len].contains(&k.as_str()) {
                self.map.serialize_entry(k, v)?;
            }
        }
        self.map.end()
    }
}

impl<C> Serialize for With<'_, Entry<C>, C> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = match self.0 {
            Entry::Unknown(o) => return o.serialize(s),
            Entry::Event(e) => e,
        };
        let ctx = self.1;
        let mut o = Obj::new(s.serialize_map(None)?);
        o.field("type", e.kind.type_name())?;
        o.field("timestamp", &JpTime(e.timestamp))?;
        match &e.kind {
            EventKind::TurnStart => {}
            EventKind::ChatRequest(r) => {
                o.field("content", &r.content)?;
                if let Some(schema) = &r.schema {
                    o.field("schema", schema)?;
                }
                if let Some(a) = &r.author {
                    o.field("author", a)?;
                }
                if !r.resources.is_empty() {
                    o.field("resources", &List(&r.resources, ctx))?;
                }
            }
            EventKind::ChatResponse(ChatResponse::Message(m)) => o.field("message", m)?,
            EventKind::ChatResponse(ChatResponse::Reasoning(r)) => o.field("reasoning", r)?,
            EventKind::ChatResponse(ChatResponse::Data(d)) => o.field("data", d)?,
            EventKind::ToolCallRequest(r) => {
                o.field("id", &r.id)?;
                o.field("name", &r.name)?;
                o.field("arguments", &r.arguments)?;
            }
            EventKind::ToolCallResponse(r) => {
                o.field("id", &r.id)?;
                match r.content.as_slice() {
                    [Block::Text(t)]
                        if r.plain
                            && t.mime_type.is_none()
                            && t.annotations.is_none()
                            && t.extra.is_empty() =>
                    {
                        o.field("content", &Content(&t.text, PayloadKind::Text, ctx))?
                    }
                    blocks => o.field("content", &List(blocks, ctx))?,
                }
                o.field("is_error", &r.is_error)?;
            }
            EventKind::InquiryRequest(r) => {
                o.field("id", &r.id)?;
                o.field("source", &r.source)?;
                o.field("question", &r.question)?;
            }
            EventKind::InquiryResponse(r) => {
                o.field("id", &r.id)?;
                o.field("answer", &r.answer)?;
            }
            EventKind::ConfigDelta(d) => o.field("delta", &d.delta)?,
            EventKind::Compaction(c) => {
                for (k, v) in compaction_fields(c) {
                    o.field(k, &v)?;
                }
            }
            EventKind::CompactionUndo(u) => o.field("undoes", &u.undoes)?,
        }
        if !e.metadata.is_empty() {
            o.field("metadata", &e.metadata)?;
        }
        o.end(&e.extra)
    }
}

/// A list of blocks or resources.
struct List<'a, T, C>(&'a [T], &'a dyn Sink<C>);

impl<T, C> Serialize for List<'_, T, C>
where
    for<'a> With<'a, T, C>: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            seq.serialize_element(&With(item, self.1))?;
        }
        seq.end()
    }
}

impl<C> Serialize for With<'_, Block<C>, C> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ctx = self.1;
        match self.0 {
            Block::Other(o) => o.serialize(s),
            Block::Text(t) => {
                let mut o = Obj::new(s.serialize_map(None)?);
                o.field("type", "text")?;
                o.field("text", &Content(&t.text, PayloadKind::Text, ctx))?;
                if let Some(m) = &t.mime_type {
                    o.field("mimeType", m)?;
                }
                if let Some(a) = &t.annotations {
                    o.field("annotations", a)?;
                }
                o.end(&t.extra)
            }
            Block::Resource(rb) => {
                let mut o = Obj::new(s.serialize_map(None)?);
                o.field("type", "resource")?;
                o.field("resource", &With(&rb.resource, ctx))?;
                o.end(&rb.extra)
            }
        }
    }
}

impl<C> Serialize for With<'_, Resource<C>, C> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (r, ctx) = (self.0, self.1);
        let mut o = Obj::new(s.serialize_map(None)?);
        o.field("uri", &r.uri)?;
        if let Some(m) = &r.mime_type {
            o.field("mimeType", m)?;
        }
        match &r.content {
            ResourceContent::Text(c) => o.field("text", &Content(c, PayloadKind::Text, ctx))?,
            ResourceContent::Binary(c) => o.field("blob", &Content(c, PayloadKind::Binary, ctx))?,
        }
        if let Some(a) = &r.annotations {
            o.field("annotations", a)?;
        }
        for (k, v) in [
            ("name", &r.name),
            ("title", &r.title),
            ("description", &r.description),
        ] {
            if let Some(v) = v {
                o.field(k, v)?;
            }
        }
        if let Some(f) = &r.formatted {
            o.field("formatted", &Content(f, PayloadKind::Text, ctx))?;
        }
        o.end(&r.extra)
    }
}

/// A value serialized as the string of its `Display`.
/// A timestamp in JP's form, written as one string.
struct JpTime(crate::timestamp::Timestamp);

impl Serialize for JpTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.with_jp_str(|text| s.serialize_str(text))
    }
}

/// The JSON fields of a compaction, in order (compactions are few: these
/// small values are built, not streamed).
fn compaction_fields(c: &Compaction) -> Vec<(&'static str, Value)> {
    let mut out = vec![
        ("from_turn", json!(c.from_turn)),
        ("to_turn", json!(c.to_turn)),
    ];
    if let Some(s) = &c.summary {
        out.push(("summary", json!({ "summary": s })));
    }
    if c.strip_reasoning {
        out.push(("reasoning", json!("strip")));
    }
    match c.tool_calls {
        None => {}
        Some(ToolCallPolicy::Omit) => out.push(("tool_calls", json!({"policy": "omit"}))),
        Some(ToolCallPolicy::Strip { request, response }) => out.push((
            "tool_calls",
            json!({"policy": "strip", "request": request, "response": response}),
        )),
    }
    if !c.tool_overrides.is_empty() {
        let mut to = Map::new();
        for (name, h) in &c.tool_overrides {
            let mut ho = Map::new();
            if let Some(m) = h.request {
                ho.insert("request".into(), m.as_str().into());
            }
            if let Some(m) = h.response {
                ho.insert("response".into(), m.as_str().into());
            }
            to.insert(name.clone(), Value::Object(ho));
        }
        out.push(("tool_overrides", Value::Object(to)));
    }
    if let Some(s) = c.source {
        out.push(("source", json!(s.as_str())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::json::{parse_entry, ParseMode};
    use crate::event::Payload;
    use crate::timestamp::Timestamp;

    fn entry(v: Value) -> Entry<Payload> {
        let now = Timestamp::from_unix(1_780_000_000, 0).expect("time");
        parse_entry(&v, ParseMode::Strict { now }).expect("parse")
    }

    fn text(p: &Payload) -> Result<Value, String> {
        match p {
            Payload::Inline(b) if b.as_slice() == b"fail" => Err("no such blob".into()),
            Payload::Inline(b) => Ok(Value::String(String::from_utf8_lossy(b).into_owned())),
            Payload::Ref(r) => Ok(json!({"$blob": r.id.to_string(), "size": r.size})),
        }
    }

    #[test]
    fn a_list_renders_as_its_entries_one_by_one_and_streams_the_same_bytes() {
        let entries = vec![
            entry(
                json!({"type": "chat_request", "timestamp": "2026-05-29 19:42:36.5",
                         "content": "hi \"there\"", "metadata": {"k": [1, null]}}),
            ),
            entry(
                json!({"type": "tool_call_response", "timestamp": "2026-05-29 19:42:37.0",
                         "id": "t", "content": [{"type": "text", "text": "out", "mimeType": "text/x"}],
                         "is_error": false, "later": 1}),
            ),
            entry(json!({"type": "something_new", "x": {"y": 2}})),
        ];
        let list = Rendered::entries(
            &entries,
            Box::new(|p: &Payload, _| text(p).map(PayloadJson::Value)),
        );
        let value = list.to_value().expect("render");
        let one_by_one: Vec<Value> = entries
            .iter()
            .map(|e| {
                Rendered::entry(
                    e,
                    Box::new(|p: &Payload, _| text(p).map(PayloadJson::Value)),
                )
                .to_value()
            })
            .collect::<Result<_, _>>()
            .expect("render");
        assert_eq!(value, Value::Array(one_by_one));
        assert_eq!(value[0]["timestamp"], "2026-05-29 19:42:36.5");
        assert_eq!(value[1]["content"][0]["text"], "out");
        assert_eq!(value[1]["later"], 1);
        let streamed = serde_json::to_vec(&list).expect("stream");
        assert!(list.take_error().is_none());
        assert_eq!(streamed, serde_json::to_vec(&value).expect("bytes"));
    }

    #[test]
    fn the_first_content_error_is_returned_as_it_was() {
        let entries = vec![
            entry(
                json!({"type": "tool_call_response", "timestamp": "2026-05-29 19:42:37.0",
                         "id": "a", "content": "fail", "is_error": false}),
            ),
            entry(
                json!({"type": "tool_call_response", "timestamp": "2026-05-29 19:42:37.0",
                         "id": "b", "content": "fail", "is_error": false}),
            ),
        ];
        let list = Rendered::entries(
            &entries,
            Box::new(|p: &Payload, _| text(p).map(PayloadJson::Value)),
        );
        assert_eq!(list.to_value().expect_err("failed"), "no such blob");
        let mut sink = Vec::new();
        assert!(serde_json::to_writer(&mut sink, &list).is_err());
        assert_eq!(list.take_error().as_deref(), Some("no such blob"));
    }

    #[test]
    fn unknown_fields_never_repeat_a_written_key() {
        let mut e = entry(json!({"type": "turn_start", "timestamp": "2026-05-29 19:42:36.0"}));
        if let Entry::Event(ev) = &mut e {
            ev.extra.insert("type".into(), json!("forged"));
            ev.extra.insert("other".into(), json!(true));
        }
        let list = Rendered::entry(
            &e,
            Box::new(|p: &Payload, _| text(p).map(PayloadJson::Value)),
        );
        let bytes = serde_json::to_vec(&list).expect("stream");
        assert_eq!(
            String::from_utf8(bytes).expect("utf-8"),
            r#"{"type":"turn_start","timestamp":"2026-05-29 19:42:36.0","other":true}"#
        );
    }

    #[test]
    fn a_reference_is_written_as_its_json_value_is() {
        let r = BlobRef {
            id: jpstore_blobstore::BlobId::of(b"some content"),
            size: 12,
        };
        let written = serde_json::to_string(&PayloadJson::Ref(r)).expect("serialize");
        assert_eq!(
            written,
            serde_json::to_string(&crate::event::json::blob_ref_json(&r)).expect("serialize")
        );
        assert_eq!(
            serde_json::to_value(PayloadJson::Ref(r)).expect("to value"),
            crate::event::json::blob_ref_json(&r)
        );
    }
}
