//! A store as one stream: NDJSON, one conversation a line (`jp-store
//! export --format ndjson`, and `jp-store import` of the same), so that a
//! store can be moved, backed up or piped to another store as one file.
//!
//! A line is the plain JSON form of a conversation
//! ([`crate::export::conversation_json`] with content inline), written
//! compact: `{"id", "metadata", "base_config", "events"}`. The events are
//! jp-store's JSON form of JP's entries (no base64 of JP's; a binary
//! resource's `blob` in base64), each with its timestamp, so that a line
//! read back gives the same conversation: the same entries, metadata
//! fields and base config. Lines are separated by `\n`; a line holds no
//! newline (JSON escapes those inside strings).
//!
//! Two keys say what the JSON form alone would not give back, each written
//! only when needed: `base_config_text`, the base config blob's own text
//! when it is not the compact JSON of `base_config` (a config imported
//! from a JP file written by hand: `7e-1`, `\u002E`), so that the blob
//! keeps its bytes; and `as_written`, the indices of the entries of
//! `events` that are stored as written (an entry an import kept verbatim
//! because it does not read as one of its known type, has no type, or is
//! a `compaction_undo` from a JP file) but would read otherwise. Every
//! other entry is read as `append` reads it.

use std::io::{BufRead, Write};

use serde_json::{Map, Value};

use crate::conversation::read::Conversation;
use crate::conversation::ConversationId;
use crate::error::Result;
use crate::event::json::{describe, parse_entry, ParseMode};
use crate::event::{Entry, Object};
use crate::export::{conversation_json, ContentMode};
use crate::import::Prepared;
use crate::store::Store;
use crate::timestamp::Timestamp;

/// Longest line read: a conversation with its content inline, as the
/// largest JP file an import reads.
pub const MAX_LINE: u64 = 2 << 30;

/// Why a line of a stream is not a conversation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct LineError {
    /// 1-based number of the line.
    pub line: usize,
    /// What is wrong, naming the field (`events[3].type`) when one is.
    pub message: String,
}

/// Writes `conversation` as one line of a stream (its content read from
/// the blob store), followed by `\n`. Returns the bytes written.
pub fn write_conversation_line(
    store: &Store,
    conversation: &Conversation,
    out: &mut dyn Write,
) -> Result<u64> {
    let doc = stream_json(store, conversation)?;
    let mut bytes = serde_json::to_vec(&doc).map_err(|e| crate::error::Error::Render {
        what: format!("conversation {}: {e}", conversation.id),
    })?;
    bytes.push(b'\n');
    out.write_all(&bytes)
        .map_err(|source| crate::error::Error::Io {
            op: "write",
            path: std::path::PathBuf::from("the stream"),
            source,
        })?;
    Ok(bytes.len() as u64)
}

/// The JSON of `conversation` in a stream: its plain JSON form, with
/// `base_config_text` and `as_written` when they are needed (the module's
/// documentation).
fn stream_json(store: &Store, conversation: &Conversation) -> Result<Value> {
    let Value::Object(mut doc) = conversation_json(store, conversation, ContentMode::Inline)?
    else {
        unreachable!("a conversation renders as an object");
    };
    let events = doc.shift_remove("events").unwrap_or(Value::Null);
    if let (Some(r), Some(base)) = (
        conversation.state.metadata.base_config,
        doc.get("base_config"),
    ) {
        let compact = base.to_string();
        let bytes = store.blobs().get(&r.id)?;
        if bytes != compact.as_bytes() {
            // Read as JSON by `conversation_json`, so UTF-8.
            if let Ok(text) = String::from_utf8(bytes) {
                doc.insert("base_config_text".into(), Value::String(text));
            }
        }
    }
    let now = Timestamp::now();
    let as_written: Vec<Value> = conversation
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| match e {
            Entry::Unknown(obj) => !reads_back_as_written(obj, now),
            Entry::Event(_) => false,
        })
        .map(|(i, _)| Value::from(i))
        .collect();
    if !as_written.is_empty() {
        doc.insert("as_written".into(), Value::Array(as_written));
    }
    doc.insert("events".into(), events);
    Ok(Value::Object(doc))
}

/// Whether an entry stored as written (`obj`) reads back as itself, as
/// the entries of a line are read: an entry of a type this build does not
/// know does; one that does not read as its known type, or has none, or
/// reads as an event, does not.
fn reads_back_as_written(obj: &Object, now: Timestamp) -> bool {
    match parse_entry(&Value::Object(obj.clone()), ParseMode::Strict { now }) {
        Ok(Entry::Unknown(back)) => back == *obj,
        _ => false,
    }
}

/// Reads the next line of a stream into `buf` (without its `\n`), refusing
/// one longer than `max` bytes without reading more than `max + 1` of it.
/// `Ok(false)` at the end of the stream.
pub fn read_line(reader: &mut dyn BufRead, buf: &mut Vec<u8>, max: u64) -> std::io::Result<bool> {
    buf.clear();
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(!buf.is_empty());
        }
        let (chunk, found) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], true),
            None => (available, false),
        };
        if buf.len() as u64 + chunk.len() as u64 > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line longer than {max} bytes"),
            ));
        }
        buf.extend_from_slice(chunk);
        let used = chunk.len() + usize::from(found);
        reader.consume(used);
        if found {
            return Ok(true);
        }
    }
}

/// Parses line number `line` of a stream (its bytes, without the `\n`)
/// into a conversation ready to import ([`crate::import::run`]).
pub fn parse_conversation_line(
    bytes: &[u8],
    line: usize,
) -> std::result::Result<Prepared, LineError> {
    let fail = |message: String| LineError { line, message };
    let value = crate::json_text::parse(bytes).map_err(|e| {
        fail(match &e.duplicate {
            Some(path) => format!(
                "invalid JSON at column {}: {} (at `{}`)",
                e.column,
                e.message,
                crate::json_text::path_string(path)
            ),
            None => format!("invalid JSON at column {}: {}", e.column, e.message),
        })
    })?;
    let Value::Object(mut doc) = value else {
        return Err(fail(format!(
            "expected a conversation object, found {}",
            describe(&value)
        )));
    };
    let id = match doc.remove("id") {
        Some(Value::String(id)) => {
            ConversationId::parse(&id).map_err(|e| fail(format!("field `id`: {e}")))?
        }
        other => {
            return Err(fail(format!(
                "field `id`: expected a conversation id, found {}",
                other.as_ref().map_or("nothing".to_string(), describe)
            )))
        }
    };
    let fields = match doc.remove("metadata") {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => Map::new(),
        Some(other) => {
            return Err(fail(format!(
                "field `metadata`: expected an object, found {}",
                describe(&other)
            )))
        }
    };
    let base_config = match doc.remove("base_config") {
        Some(Value::Object(c)) if c.contains_key(crate::event::json::BLOB_KEY) => {
            return Err(fail(
                "field `base_config`: a reference to a blob; a stream holds content inline \
                 (export it without --refs)"
                    .to_string(),
            ))
        }
        Some(Value::Object(c)) => Some(c),
        None | Some(Value::Null) => None,
        Some(other) => {
            return Err(fail(format!(
                "field `base_config`: expected an object or null (a stream holds content inline, \
                 not references), found {}",
                describe(&other)
            )))
        }
    };
    let base_config_text = match doc.remove("base_config_text") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            let field = "field `base_config_text`";
            let Some(config) = &base_config else {
                return Err(fail(format!("{field}: given without a `base_config`")));
            };
            match crate::json_text::parse(text.as_bytes()) {
                Ok(Value::Object(read)) if read == *config => Some(text.into_bytes()),
                Ok(_) => {
                    return Err(fail(format!(
                        "{field}: not the text of `base_config` (it reads as another value)"
                    )))
                }
                Err(e) => {
                    return Err(fail(format!(
                        "{field}: invalid JSON at column {}: {}",
                        e.column, e.message
                    )))
                }
            }
        }
        Some(other) => {
            return Err(fail(format!(
                "field `base_config_text`: expected the text of `base_config`, found {}",
                describe(&other)
            )))
        }
    };
    let events = match doc.remove("events") {
        Some(Value::Array(events)) => events,
        None => Vec::new(),
        Some(other) => {
            return Err(fail(format!(
                "field `events`: expected an array, found {}",
                describe(&other)
            )))
        }
    };
    let as_written: std::collections::BTreeSet<usize> = match doc.remove("as_written") {
        None => Default::default(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(k, v)| {
                v.as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .filter(|i| events.get(*i).is_some_and(Value::is_object))
                    .ok_or_else(|| {
                        fail(format!(
                            "field `as_written[{k}]`: expected the index of an object of \
                             `events` ({} of them), found {}",
                            events.len(),
                            describe(v)
                        ))
                    })
            })
            .collect::<std::result::Result<_, _>>()?,
        Some(other) => {
            return Err(fail(format!(
                "field `as_written`: expected an array of indices of `events`, found {}",
                describe(&other)
            )))
        }
    };
    if let Some(key) = doc.keys().next() {
        return Err(fail(format!(
            "field `{key}`: not a field of a conversation (id, metadata, base_config, \
             base_config_text, as_written, events)"
        )));
    }
    // Every exported event has its timestamp; one without gets the time of
    // the import, as an append would give it.
    let mode = ParseMode::Strict {
        now: Timestamp::now(),
    };
    let entries = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if let (true, Value::Object(obj)) = (as_written.contains(&i), e) {
                return Ok(Entry::Unknown(obj.clone()));
            }
            parse_entry(e, mode).map_err(|err| {
                let field = if err.field.is_empty() {
                    format!("events[{i}]")
                } else {
                    format!("events[{i}].{}", err.field)
                };
                fail(format!("field `{field}`: {}", err.message))
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    // The blobs of another store are not in this one: content must come
    // with the line.
    for (i, e) in entries.iter().enumerate() {
        let mut reference = false;
        e.for_each_content(&mut |p| reference |= matches!(p, crate::event::Payload::Ref(_)));
        if reference {
            return Err(fail(format!(
                "field `events[{i}]`: content given as a reference to a blob; a stream holds \
                 content inline (export it without --refs)"
            )));
        }
    }
    // The base config's blob is the text given, or else written as it
    // came, compact in its key order: the bytes of the source store's blob
    // for a config written by jp-store (canonical) or imported from JP (the
    // file's own order, when the JSON gives its text back), so that JP's
    // files export from the new store as from the old.
    let base_config_text = base_config_text.or_else(|| {
        base_config
            .as_ref()
            .map(|c| Value::Object(c.clone()).to_string().into_bytes())
    });
    Ok(Prepared {
        id,
        fields,
        base_config,
        base_config_text,
        entries,
        source_bytes: bytes.len() as u64 + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::input::parse_input;
    use crate::{NewConversation, StoreOptions};

    #[test]
    fn a_conversation_goes_through_a_line_and_comes_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(&dir.path().join("a"), StoreOptions::default()).expect("a");
        let mut base = Map::new();
        base.insert(
            "assistant".into(),
            serde_json::json!({"system_prompt": "be brief"}),
        );
        let mut writer = store
            .create(NewConversation {
                id: Some(ConversationId::parse("c1").expect("id")),
                title: Some("line\nbreak and \"quotes\"".into()),
                base_config: Some(base),
                ..Default::default()
            })
            .expect("create");
        let input = r#"{"type":"turn_start"}
{"type":"chat_request","content":"read it","resources":[{"uri":"file:///a.png","mimeType":"image/png","blob":"iVBORw0KGgo="}]}
{"type":"tool_call_request","id":"c","name":"fs_read_file","arguments":{"path":"a.rs"}}
{"type":"tool_call_response","id":"c","content":"fn main() {}\n"}
{"type":"some_future_type","x":1}"#;
        let entries = parse_input(
            input,
            ParseMode::Strict {
                now: Timestamp::now(),
            },
        )
        .expect("input")
        .entries;
        writer.append(entries).expect("append");
        drop(writer);
        let conv = store
            .read(&ConversationId::parse("c1").expect("id"))
            .expect("read");
        let mut out = Vec::new();
        let n = write_conversation_line(&store, &conv, &mut out).expect("write");
        assert_eq!(n, out.len() as u64);
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
        let mut reader = std::io::Cursor::new(out.clone());
        let mut line = Vec::new();
        assert!(read_line(&mut reader, &mut line, MAX_LINE).expect("line"));
        assert!(!read_line(&mut reader, &mut line, MAX_LINE).expect("end"));
        let mut reader = std::io::Cursor::new(out);
        read_line(&mut reader, &mut line, MAX_LINE).expect("line");
        let prepared = parse_conversation_line(&line, 1).expect("parse");
        let other = Store::init_dir(&dir.path().join("b"), StoreOptions::default()).expect("b");
        other
            .import(vec![prepared], false, &mut |_| {})
            .expect("import");
        let back = other
            .read(&ConversationId::parse("c1").expect("id"))
            .expect("read back");
        assert_eq!(
            conversation_json(&other, &back, ContentMode::Inline).expect("json"),
            conversation_json(&store, &conv, ContentMode::Inline).expect("json"),
            "the same conversation in the other store"
        );
    }

    #[test]
    fn bad_lines_are_named_by_line_and_field() {
        let reference = format!(
            r#"{{"id":"c","events":[{{"type":"tool_call_response","id":"x","content":{{"$blob":"{}","size":1}}}}]}}"#,
            "ab".repeat(32)
        );
        let cases: [(&str, &str); 7] = [
            (&reference, "content given as a reference"),
            ("[1]", "expected a conversation object"),
            (r#"{"id":"../x"}"#, "field `id`"),
            (r#"{"id":"c","events":{}}"#, "field `events`"),
            (
                r#"{"id":"c","base_config":{"$blob":"00","size":1}}"#,
                "a reference to a blob",
            ),
            (
                r#"{"id":"c","events":[{"type":"turn_start"},{"type":"chat_request"}]}"#,
                "field `events[1].content`",
            ),
            (r#"{"id":"c","color":"red"}"#, "field `color`"),
        ];
        for (text, expected) in cases {
            match parse_conversation_line(text.as_bytes(), 7) {
                Ok(p) => panic!("{text} parsed: {p:?}"),
                Err(e) => {
                    let message = e.to_string();
                    assert!(message.starts_with("line 7: "), "{message}");
                    assert!(message.contains(expected), "{text}: {message}");
                }
            }
        }
    }

    /// What the JSON form alone would not give back comes with the line:
    /// a base config blob whose text is not its compact JSON, and entries
    /// stored as written that would read otherwise (a known type that does
    /// not fit, one without a type, a `compaction_undo` kept verbatim).
    #[test]
    fn a_blobs_own_text_and_entries_kept_as_written_come_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(&dir.path().join("a"), StoreOptions::default()).expect("a");
        let text = br#"{"assistant":{"system_prompt":"be brief\u002E"},"temperature":7e-1}"#;
        let config = crate::config::parse_config_json(text, "config").expect("config");
        let kept: Vec<Object> = [
            serde_json::json!({"type": "config_delta", "timestamp": "2026-05-29 19:40:00.0", "assistant": {}}),
            serde_json::json!({"timestamp": "2026-05-29 19:40:00.1", "content": "no type"}),
            serde_json::json!({"type": "compaction_undo", "timestamp": "2026-05-29 19:40:00.2", "undoes": 0}),
            serde_json::json!({"type": "future_kind", "timestamp": "2026-05-29 19:40:00.3"}),
        ]
        .into_iter()
        .map(|v| match v {
            Value::Object(o) => o,
            _ => unreachable!(),
        })
        .collect();
        let id = ConversationId::parse("c1").expect("id");
        let prepared = Prepared {
            id: id.clone(),
            fields: Map::new(),
            base_config: Some(config),
            base_config_text: Some(text.to_vec()),
            entries: kept.iter().cloned().map(Entry::Unknown).collect(),
            source_bytes: 1,
        };
        store
            .import(vec![prepared], false, &mut |_| {})
            .expect("import");
        let mut out = Vec::new();
        write_conversation_line(&store, &store.read(&id).expect("read"), &mut out).expect("line");
        let line: Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(
            line["base_config_text"],
            String::from_utf8_lossy(text).as_ref()
        );
        assert_eq!(
            line["as_written"],
            serde_json::json!([0, 1, 2]),
            "not the future kind"
        );
        let back = parse_conversation_line(&out[..out.len() - 1], 1).expect("parse");
        assert_eq!(back.base_config_text.as_deref(), Some(&text[..]));
        assert_eq!(
            back.entries,
            kept.into_iter().map(Entry::Unknown).collect::<Vec<_>>()
        );
        let other = Store::init_dir(&dir.path().join("b"), StoreOptions::default()).expect("b");
        other
            .import(vec![back], false, &mut |_| {})
            .expect("import");
        let mut again = Vec::new();
        write_conversation_line(&other, &other.read(&id).expect("read"), &mut again).expect("line");
        assert!(again == out, "the same line from the other store");
        // A conversation that needs neither has neither.
        let plain = br#"{"id":"c2","metadata":{},"base_config":{"a":1},"events":[]}"#;
        let p = parse_conversation_line(plain, 1).expect("parse");
        store.import(vec![p], false, &mut |_| {}).expect("import");
        let mut out = Vec::new();
        let c2 = ConversationId::parse("c2").expect("id");
        write_conversation_line(&store, &store.read(&c2).expect("read"), &mut out).expect("line");
        assert_eq!(&out[..out.len() - 1], &plain[..]);
    }

    #[test]
    fn a_text_or_an_index_that_does_not_fit_the_line_is_refused() {
        for (text, expected) in [
            (
                r#"{"id":"c","base_config":{"a":1},"base_config_text":"{\"a\":2}"}"#,
                "field `base_config_text`: not the text",
            ),
            (
                r#"{"id":"c","base_config":{"a":1},"base_config_text":"{\"a\":1"}"#,
                "field `base_config_text`: invalid JSON",
            ),
            (
                r#"{"id":"c","base_config_text":"{}"}"#,
                "without a `base_config`",
            ),
            (
                r#"{"id":"c","base_config":{},"base_config_text":{}}"#,
                "field `base_config_text`: expected",
            ),
            (
                r#"{"id":"c","as_written":[1],"events":[{"type":"x"}]}"#,
                "field `as_written[0]`",
            ),
            (
                r#"{"id":"c","as_written":[0,-1],"events":[{"type":"x"}]}"#,
                "field `as_written[1]`",
            ),
            (
                r#"{"id":"c","as_written":[0],"events":[3]}"#,
                "field `as_written[0]`",
            ),
            (r#"{"id":"c","as_written":0}"#, "field `as_written`"),
        ] {
            match parse_conversation_line(text.as_bytes(), 2) {
                Ok(p) => panic!("{text} parsed: {p:?}"),
                Err(e) => assert!(e.to_string().contains(expected), "{text}: {e}"),
            }
        }
    }

    #[test]
    fn a_line_longer_than_the_limit_is_refused_without_reading_it_all() {
        let data = vec![b'x'; 10_000];
        let mut reader = std::io::BufReader::with_capacity(64, std::io::Cursor::new(data));
        let mut line = Vec::new();
        let err = read_line(&mut reader, &mut line, 100).expect_err("too long");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(line.len() <= 100);
    }
}
