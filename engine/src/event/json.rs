//! The JSON form of entries: JP's form without JP's base64, extended by the
//! RFDs (brief, "Data model"). Content is inline (`"text": "..."`, base64 for
//! binary `blob`) or a reference `{"$blob": "<64 hex>", "size": <bytes>}`.
//!
//! Parsing is by hand so that every error names the field that is wrong
//! ([`FieldError`]); rendering is the exact inverse for what parsing accepts
//! in canonical form.

use std::fmt;

use base64::Engine as _;
use jpstore_blobstore::BlobId;
use serde_json::{Map, Value};

use super::model::*;
use super::render::{PayloadJson, Rendered};
use crate::timestamp::Timestamp;

/// What went wrong in one entry's JSON: the field (a path such as
/// `content[1].resource.uri`, empty for the entry itself) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field inside the entry.
    pub field: String,
    /// What was expected and what was found.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "field `{}`: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for FieldError {}

/// How strictly entries of known types are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseMode {
    /// For `append`: a known entry that does not fit the model is an error; a
    /// missing `timestamp` is filled with `now`.
    Strict {
        /// The time given to entries without a timestamp.
        now: Timestamp,
    },
    /// For importing files written by others: a known entry that does not fit
    /// the model is kept verbatim as [`Entry::Unknown`], as JP would have to.
    Lenient,
}

pub use super::render::{PayloadKind, BLOB_KEY};

fn err(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// A short description of a JSON value for messages ("a number", ...).
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => {
            format!("a string ({} characters)", s.chars().count())
        }
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Reads fields of one JSON object, remembering which were used so that the
/// rest can be kept as unknown fields.
struct Fields<'a> {
    obj: &'a Object,
    path: String,
    used: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    fn new(obj: &'a Object, path: impl Into<String>) -> Self {
        Fields {
            obj,
            path: path.into(),
            used: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> String {
        join(&self.path, name)
    }

    fn get(&mut self, name: &'static str) -> Option<&'a Value> {
        self.used.push(name);
        self.obj.get(name)
    }

    fn required(&mut self, name: &'static str) -> Result<&'a Value, FieldError> {
        let path = self.path(name);
        self.get(name)
            .ok_or_else(|| err(path, "required but missing"))
    }

    fn string(&mut self, name: &'static str) -> Result<String, FieldError> {
        let v = self.required(name)?;
        as_string(v, &self.path(name))
    }

    fn opt_string(&mut self, name: &'static str) -> Result<Option<String>, FieldError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => as_string(v, &self.path(name)).map(Some),
        }
    }

    fn opt_object(&mut self, name: &'static str) -> Result<Option<Object>, FieldError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => as_object(v, &self.path(name)).map(|o| Some(o.clone())),
        }
    }

    fn bool_or(&mut self, name: &'static str, default: bool) -> Result<bool, FieldError> {
        match self.get(name) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(err(
                self.path(name),
                format!("expected true or false, found {}", describe(v)),
            )),
        }
    }

    fn turn(&mut self, name: &'static str) -> Result<u64, FieldError> {
        let v = self.required(name)?;
        v.as_u64().ok_or_else(|| {
            err(
                self.path(name),
                format!(
                    "expected a turn index (an integer >= 0), found {}",
                    describe(v)
                ),
            )
        })
    }

    /// The fields not read so far, in their original order.
    fn rest(&self) -> Object {
        self.obj
            .iter()
            .filter(|(k, _)| !self.used.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

fn as_string(v: &Value, path: &str) -> Result<String, FieldError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        _ => Err(err(
            path,
            format!("expected a string, found {}", describe(v)),
        )),
    }
}

fn as_object<'a>(v: &'a Value, path: &str) -> Result<&'a Object, FieldError> {
    match v {
        Value::Object(o) => Ok(o),
        _ => Err(err(
            path,
            format!("expected an object, found {}", describe(v)),
        )),
    }
}

/// Parses a blob reference object `{"$blob": "<64 hex>", "size": n}`.
pub fn parse_blob_ref(obj: &Object, path: &str) -> Result<BlobRef, FieldError> {
    if let Some(k) = obj.keys().find(|k| *k != BLOB_KEY && *k != "size") {
        return Err(err(
            path,
            format!("a blob reference has only `$blob` and `size`, found `{k}`"),
        ));
    }
    let id = match obj.get(BLOB_KEY) {
        Some(Value::String(s)) => {
            BlobId::parse(s).map_err(|e| err(join(path, BLOB_KEY), e.to_string()))?
        }
        Some(v) => {
            return Err(err(
                join(path, BLOB_KEY),
                format!("expected 64 hex digits, found {}", describe(v)),
            ))
        }
        None => return Err(err(path, "a blob reference needs `$blob`")),
    };
    let size = match obj.get("size") {
        Some(v) => v.as_u64().ok_or_else(|| {
            err(
                join(path, "size"),
                format!("expected a byte count, found {}", describe(v)),
            )
        })?,
        None => return Err(err(join(path, "size"), "required but missing")),
    };
    Ok(BlobRef { id, size })
}

/// Renders a blob reference.
pub fn blob_ref_json(r: &BlobRef) -> Value {
    let mut o = Map::new();
    o.insert(BLOB_KEY.into(), Value::String(r.id.to_hex()));
    o.insert("size".into(), Value::from(r.size));
    Value::Object(o)
}

fn text_payload(v: &Value, path: &str) -> Result<Payload, FieldError> {
    match v {
        Value::String(s) => Ok(Payload::Inline(s.clone().into_bytes())),
        Value::Object(o) if o.contains_key(BLOB_KEY) => parse_blob_ref(o, path).map(Payload::Ref),
        _ => Err(err(
            path,
            format!(
                "expected a string or a blob reference {{\"$blob\", \"size\"}}, found {}",
                describe(v)
            ),
        )),
    }
}

fn binary_payload(v: &Value, path: &str) -> Result<Payload, FieldError> {
    match v {
        Value::String(s) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map(Payload::Inline)
            .map_err(|e| {
                err(
                    path,
                    format!("expected base64 (standard alphabet, padded): {e}"),
                )
            }),
        Value::Object(o) if o.contains_key(BLOB_KEY) => parse_blob_ref(o, path).map(Payload::Ref),
        _ => Err(err(
            path,
            format!(
                "expected a base64 string or a blob reference {{\"$blob\", \"size\"}}, found {}",
                describe(v)
            ),
        )),
    }
}

// ----- parsing -----------------------------------------------------------------

/// The entry types this build knows (the `type` of an [`Event`]); an entry
/// of any other type is kept verbatim as [`Entry::Unknown`].
pub const EVENT_TYPES: [&str; 10] = [
    "turn_start",
    "chat_request",
    "chat_response",
    "tool_call_request",
    "tool_call_response",
    "inquiry_request",
    "inquiry_response",
    "config_delta",
    "compaction",
    "compaction_undo",
];

/// Parses one entry. Entries of unknown `type` are kept verbatim in both
/// modes.
pub fn parse_entry(value: &Value, mode: ParseMode) -> Result<Entry<Payload>, FieldError> {
    let Value::Object(obj) = value else {
        return Err(err(
            "",
            format!("expected an event object, found {}", describe(value)),
        ));
    };
    match parse_known(obj, mode) {
        Ok(Some(event)) => Ok(Entry::Event(event)),
        Ok(None) => Ok(Entry::Unknown(obj.clone())),
        Err(_) if mode == ParseMode::Lenient => Ok(Entry::Unknown(obj.clone())),
        Err(e) => Err(e),
    }
}

/// Why a lenient parse keeps `obj` verbatim although its type is one this
/// build knows: it does not fit that type's model (a timestamp that does
/// not read, a field of the wrong type), or it has no string `type`. Such
/// an entry is stored and exported as written, but it is no event: the
/// view, a provider request and the projection leave it out. `None` for an event, and for an entry of an
/// unknown type (kept verbatim by design).
pub fn misfit(obj: &Object) -> Option<FieldError> {
    parse_known(obj, ParseMode::Lenient).err()
}

/// `Ok(None)`: the type is not known.
fn parse_known(obj: &Object, mode: ParseMode) -> Result<Option<Event<Payload>>, FieldError> {
    let mut f = Fields::new(obj, "");
    let type_name = match f.get("type") {
        Some(Value::String(s)) => s.as_str(),
        Some(v) => {
            return Err(err(
                "type",
                format!("expected the entry type as a string, found {}", describe(v)),
            ))
        }
        None => return Err(err("type", "required but missing")),
    };
    let kind = match type_name {
        "turn_start" => EventKind::TurnStart,
        "chat_request" => EventKind::ChatRequest(parse_chat_request(&mut f)?),
        "chat_response" => EventKind::ChatResponse(parse_chat_response(&mut f)?),
        "tool_call_request" => EventKind::ToolCallRequest(ToolCallRequest {
            id: f.string("id")?,
            name: f.string("name")?,
            arguments: f.opt_object("arguments")?.unwrap_or_default(),
        }),
        "tool_call_response" => EventKind::ToolCallResponse(parse_tool_response(&mut f)?),
        "inquiry_request" => EventKind::InquiryRequest(InquiryRequest {
            id: f.string("id")?,
            source: f
                .opt_object("source")?
                .ok_or_else(|| err("source", "required but missing"))?,
            question: f
                .opt_object("question")?
                .ok_or_else(|| err("question", "required but missing"))?,
        }),
        "inquiry_response" => EventKind::InquiryResponse(InquiryResponse {
            id: f.string("id")?,
            answer: f.required("answer")?.clone(),
        }),
        "config_delta" => {
            let delta = f
                .opt_object("delta")?
                .ok_or_else(|| err("delta", "required but missing"))?;
            // The settings of a delta a user writes are checked by
            // `input::parse_input`; one read from stored or imported data is
            // taken as it is (format-spec.md 4.5).
            EventKind::ConfigDelta(ConfigDelta { delta })
        }
        "compaction" => EventKind::Compaction(parse_compaction(&mut f)?),
        "compaction_undo" => EventKind::CompactionUndo(CompactionUndo {
            undoes: {
                let v = f.required("undoes")?;
                v.as_u64().ok_or_else(|| {
                    err(
                        "undoes",
                        format!(
                            "expected the 0-based ordinal of a compaction, found {}",
                            describe(v)
                        ),
                    )
                })?
            },
        }),
        _ => return Ok(None),
    };
    let timestamp = match (f.get("timestamp"), mode) {
        (Some(Value::String(s)), _) => {
            Timestamp::parse(s).map_err(|e| err("timestamp", e.to_string()))?
        }
        (Some(v), _) => {
            return Err(err(
                "timestamp",
                format!(
                    "expected a UTC time such as \"2026-05-29 19:42:36.46732\", found {}",
                    describe(v)
                ),
            ))
        }
        (None, ParseMode::Strict { now }) => now,
        (None, ParseMode::Lenient) => return Err(err("timestamp", "required but missing")),
    };
    let metadata = f.opt_object("metadata")?.unwrap_or_default();
    Ok(Some(Event {
        timestamp,
        kind,
        metadata,
        extra: f.rest(),
    }))
}

fn parse_chat_request(f: &mut Fields<'_>) -> Result<ChatRequest<Payload>, FieldError> {
    let content = f.string("content")?;
    let schema = f.opt_object("schema")?;
    let author = f.opt_string("author")?;
    let resources = match f.get("resources") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let path = format!("resources[{i}]");
                parse_resource(as_object(v, &path)?, &path, None)
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(err(
                "resources",
                format!("expected an array of resources, found {}", describe(v)),
            ))
        }
    };
    // Unknown fields of the request are the event's unknown fields (one
    // JSON object), kept in `Event::extra`.
    Ok(ChatRequest {
        content,
        schema,
        author,
        resources,
    })
}

fn parse_chat_response(f: &mut Fields<'_>) -> Result<ChatResponse, FieldError> {
    let message = f.get("message");
    let reasoning = f.get("reasoning");
    let data = f.get("data");
    match (message, reasoning, data) {
        (Some(v), None, None) => Ok(ChatResponse::Message(as_string(v, "message")?)),
        (None, Some(v), None) => Ok(ChatResponse::Reasoning(as_string(v, "reasoning")?)),
        (None, None, Some(v)) => Ok(ChatResponse::Data(v.clone())),
        _ => Err(err(
            "",
            "a chat_response has exactly one of `message`, `reasoning` and `data`",
        )),
    }
}

fn parse_tool_response(f: &mut Fields<'_>) -> Result<ToolCallResponse<Payload>, FieldError> {
    let id = f.string("id")?;
    let is_error = f.bool_or("is_error", false)?;
    let content = f.required("content")?;
    let (content, plain) = match content {
        Value::Array(items) => (
            items
                .iter()
                .enumerate()
                .map(|(i, v)| parse_block(v, &format!("content[{i}]")))
                .collect::<Result<_, _>>()?,
            false,
        ),
        v => (
            vec![Block::Text(TextBlock {
                text: text_payload(v, "content")?,
                mime_type: None,
                annotations: None,
                extra: Map::new(),
            })],
            true,
        ),
    };
    Ok(ToolCallResponse {
        id,
        content,
        plain,
        is_error,
    })
}

fn parse_block(v: &Value, path: &str) -> Result<Block<Payload>, FieldError> {
    let obj = as_object(v, path)?;
    let mut f = Fields::new(obj, path);
    let type_name = match f.get("type") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => {
            return Err(err(
                f.path("type"),
                format!("expected the block type as a string, found {}", describe(v)),
            ))
        }
        None => return Err(err(f.path("type"), "required but missing")),
    };
    match type_name.as_str() {
        "text" => {
            let text = text_payload(f.required("text")?, &f.path("text"))?;
            let mime_type = f.opt_string("mimeType")?;
            let annotations = f.get("annotations").cloned();
            Ok(Block::Text(TextBlock {
                text,
                mime_type,
                annotations,
                extra: f.rest(),
            }))
        }
        "resource" => {
            let rpath = f.path("resource");
            let robj = as_object(f.required("resource")?, &rpath)?;
            // RFD 058 shows `formatted` beside `resource`; RFD 065 puts it in
            // the resource. Both are accepted; it is kept in the resource.
            let outer_formatted = match f.get("formatted") {
                None => None,
                Some(v) => Some(text_payload(v, &f.path("formatted"))?),
            };
            let resource = parse_resource(robj, &rpath, outer_formatted)?;
            Ok(Block::Resource(ResourceBlock {
                resource,
                extra: f.rest(),
            }))
        }
        _ => Ok(Block::Other(obj.clone())),
    }
}

fn parse_resource(
    obj: &Object,
    path: &str,
    outer_formatted: Option<Payload>,
) -> Result<Resource<Payload>, FieldError> {
    let mut f = Fields::new(obj, path);
    let uri = f.string("uri")?;
    let content = match (f.get("text"), f.get("blob")) {
        (Some(t), None) => ResourceContent::Text(text_payload(t, &f.path("text"))?),
        (None, Some(b)) => ResourceContent::Binary(binary_payload(b, &f.path("blob"))?),
        _ => {
            return Err(err(
                path,
                "a resource has exactly one of `text` and `blob` (base64)",
            ))
        }
    };
    let mime_type = f.opt_string("mimeType")?;
    let annotations = f.get("annotations").cloned();
    let name = f.opt_string("name")?;
    let title = f.opt_string("title")?;
    let description = f.opt_string("description")?;
    let formatted = match (f.get("formatted"), outer_formatted) {
        (Some(_), Some(_)) => {
            return Err(err(
                f.path("formatted"),
                "`formatted` is given both beside the resource and inside it; give it once",
            ))
        }
        (Some(v), None) => Some(text_payload(v, &f.path("formatted"))?),
        (None, outer) => outer,
    };
    Ok(Resource {
        uri,
        content,
        mime_type,
        annotations,
        name,
        title,
        description,
        formatted,
        extra: f.rest(),
    })
}

fn parse_field_mode(v: &Value, path: &str) -> Result<FieldMode, FieldError> {
    match v.as_str() {
        Some("keep") => Ok(FieldMode::Keep),
        Some("strip") => Ok(FieldMode::Strip),
        _ => Err(err(
            path,
            format!("expected \"keep\" or \"strip\", found {}", describe(v)),
        )),
    }
}

fn parse_compaction(f: &mut Fields<'_>) -> Result<Compaction, FieldError> {
    let from_turn = f.turn("from_turn")?;
    let to_turn = f.turn("to_turn")?;
    let summary = match f.get("summary") {
        None => None,
        Some(Value::Object(o)) => match o.get("summary") {
            Some(Value::String(s)) if o.len() == 1 => Some(s.clone()),
            _ => {
                return Err(err(
                    "summary",
                    "expected {\"summary\": \"<text>\"} and nothing else",
                ))
            }
        },
        Some(v) => {
            return Err(err(
                "summary",
                format!(
                    "expected {{\"summary\": \"<text>\"}}, found {}",
                    describe(v)
                ),
            ))
        }
    };
    let strip_reasoning = match f.get("reasoning") {
        None => false,
        Some(Value::String(s)) if s == "strip" => true,
        Some(v) => {
            return Err(err(
                "reasoning",
                format!("expected \"strip\", found {}", describe(v)),
            ))
        }
    };
    let tool_calls = match f.get("tool_calls") {
        None => None,
        Some(v) => {
            let o = as_object(v, "tool_calls")?;
            let mut tf = Fields::new(o, "tool_calls");
            let policy = match tf.get("policy") {
                Some(Value::String(s)) => s.as_str(),
                Some(v) => {
                    return Err(err(
                        "tool_calls.policy",
                        format!("expected \"strip\" or \"omit\", found {}", describe(v)),
                    ))
                }
                None => return Err(err("tool_calls.policy", "required but missing")),
            };
            let p = match policy {
                "strip" => ToolCallPolicy::Strip {
                    request: tf.bool_or("request", false)?,
                    response: tf.bool_or("response", false)?,
                },
                "omit" => ToolCallPolicy::Omit,
                other => {
                    return Err(err(
                        "tool_calls.policy",
                        format!("expected \"strip\" or \"omit\", found {other:?}"),
                    ))
                }
            };
            if let Some(k) = tf.rest().keys().next() {
                return Err(err(
                    format!("tool_calls.{k}"),
                    "not a field of a tool call policy",
                ));
            }
            Some(p)
        }
    };
    let mut tool_overrides = std::collections::BTreeMap::new();
    if let Some(o) = f.opt_object("tool_overrides")? {
        for (name, v) in &o {
            let path = format!("tool_overrides.{name}");
            let ho = as_object(v, &path)?;
            let mut hf = Fields::new(ho, path.clone());
            let mut hint = ToolOverride::default();
            if let Some(v) = hf.get("request") {
                hint.request = Some(parse_field_mode(v, &hf.path("request"))?);
            }
            if let Some(v) = hf.get("response") {
                hint.response = Some(parse_field_mode(v, &hf.path("response"))?);
            }
            if let Some(k) = hf.rest().keys().next() {
                return Err(err(
                    hf.path(k),
                    "a tool override has only `request` and `response`",
                ));
            }
            tool_overrides.insert(name.clone(), hint);
        }
    }
    let source = match f.get("source") {
        None => None,
        Some(v) => Some(match v.as_str() {
            Some("manual") => CompactionSource::Manual,
            Some("auto") => CompactionSource::Auto,
            _ => {
                return Err(err(
                    "source",
                    format!("expected \"manual\" or \"auto\", found {}", describe(v)),
                ))
            }
        }),
    };
    if to_turn < from_turn {
        return Err(err(
            "to_turn",
            format!("the range is empty: to_turn {to_turn} is before from_turn {from_turn}"),
        ));
    }
    Ok(Compaction {
        from_turn,
        to_turn,
        summary,
        strip_reasoning,
        tool_calls,
        tool_overrides,
        source,
    })
}

// ----- rendering -----------------------------------------------------------------

/// Renders a [`Payload`] as JSON: inline text as a string, inline binary as
/// base64, a reference as `{"$blob", "size"}`. Inline text that is not UTF-8
/// is an error naming the content's length.
pub fn payload_json(p: &Payload, kind: PayloadKind) -> Result<Value, String> {
    match (p, kind) {
        (Payload::Ref(r), _) => Ok(blob_ref_json(r)),
        (Payload::Inline(b), PayloadKind::Binary) => Ok(Value::String(
            base64::engine::general_purpose::STANDARD.encode(b),
        )),
        (Payload::Inline(b), PayloadKind::Text) => match std::str::from_utf8(b) {
            Ok(s) => Ok(Value::String(s.to_owned())),
            Err(e) => Err(format!(
                "text content of {} bytes is not UTF-8 (at byte {})",
                b.len(),
                e.valid_up_to()
            )),
        },
    }
}

/// Renders an entry as a JSON value, with `content` rendering each payload
/// (the value of [`super::render::Rendered`]).
pub fn render_entry<C, E>(
    entry: &Entry<C>,
    content: &mut impl FnMut(&C, PayloadKind) -> Result<Value, E>,
) -> Result<Value, E> {
    Rendered::entry(
        entry,
        Box::new(|c, k| content(c, k).map(PayloadJson::Value)),
    )
    .to_value()
}

/// Renders a resource (RFD 065 JSON form) as a JSON value.
pub fn render_resource<C, E>(
    r: &Resource<C>,
    content: &mut impl FnMut(&C, PayloadKind) -> Result<Value, E>,
) -> Result<Value, E> {
    Rendered::resource(r, Box::new(|c, k| content(c, k).map(PayloadJson::Value))).to_value()
}

#[cfg(test)]
mod event_types_tests {
    use super::*;

    #[test]
    fn every_listed_type_is_one_the_parser_knows() {
        let object = |t: &str| match serde_json::json!({ "type": t }) {
            Value::Object(o) => o,
            _ => unreachable!("an object"),
        };
        for t in EVENT_TYPES {
            // A known type without its fields does not fit; an unknown one
            // is kept as it is.
            assert!(misfit(&object(t)).is_some(), "{t} is not known");
        }
        assert!(misfit(&object("chat_respons")).is_none());
    }
}
