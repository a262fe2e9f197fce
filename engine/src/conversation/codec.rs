//! Encoding of log entries (format-spec.md section 4.2).
//!
//! Each entry of a log record is one byte of kind followed by a MessagePack
//! value (maps with field names, as `rmp_serde::to_vec_named` writes them):
//!
//! | kind | value |
//! |---|---|
//! | `0x01` | an [`Entry`] (an event or a verbatim unknown entry) |
//! | `0x02` | a [`MetaPatch`] (a change of the conversation's metadata) |
//!
//! Readers refuse other kinds: a log with entries this build cannot read is
//! reported, never skipped.

use serde::{Deserialize, Serialize};

use super::meta::MetaPatch;
use crate::event::Entry;

/// Kind byte of an event entry.
pub const KIND_EVENT: u8 = 0x01;
/// Kind byte of a metadata patch.
pub const KIND_META: u8 = 0x02;

/// Deepest nesting of MessagePack containers a reader accepts.
pub const MAX_DEPTH: usize = 256;

/// One entry of a log record.
#[derive(Debug, Clone, PartialEq)]
// Short-lived (decoded and folded one at a time); events are the common case.
#[allow(clippy::large_enum_variant)]
pub enum LogEntry {
    /// An event (or unknown entry) of the conversation.
    Event(Entry),
    /// A change of the conversation's metadata.
    Meta(MetaPatch),
}

fn encode_value<T: Serialize>(kind: u8, value: &T) -> Vec<u8> {
    let mut out = vec![kind];
    // Serializing these types into a Vec cannot fail: every map key is a
    // string and every value has a MessagePack form.
    if let Err(e) = rmp_serde::encode::write_named(&mut out, value) {
        unreachable!("MessagePack encoding of a log entry failed: {e}");
    }
    out
}

/// Encodes one entry.
pub fn encode(entry: &LogEntry) -> Vec<u8> {
    match entry {
        LogEntry::Event(e) => encode_value(KIND_EVENT, e),
        LogEntry::Meta(m) => encode_value(KIND_META, m),
    }
}

/// Encodes an event entry.
pub fn encode_event(entry: &Entry) -> Vec<u8> {
    encode_value(KIND_EVENT, entry)
}

/// Encodes a metadata patch.
pub fn encode_meta(patch: &MetaPatch) -> Vec<u8> {
    encode_value(KIND_META, patch)
}

fn decode_value<T: for<'a> Deserialize<'a>>(bytes: &[u8], what: &str) -> Result<T, String> {
    let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(bytes));
    // serde_json refuses input nested deeper than 128, so nothing appended
    // is deeper than this; the limit keeps hostile bytes off the stack.
    de.set_max_depth(MAX_DEPTH);
    let value = T::deserialize(&mut de).map_err(|e| format!("an undecodable {what}: {e}"))?;
    let used = de.position();
    if used != bytes.len() as u64 {
        return Err(format!(
            "{} bytes after the {what}",
            bytes.len() as u64 - used
        ));
    }
    Ok(value)
}

/// Checks that encoded entry bytes decode again (a value nested deeper than
/// readers accept, [`MAX_DEPTH`], does not), so that nothing is acknowledged
/// that cannot be read back.
pub fn check_readable(bytes: &[u8]) -> Result<(), String> {
    decode(bytes).map(|_| ())
}

/// Decodes one entry; the error says what was found (the caller adds the
/// file and offset).
pub fn decode(bytes: &[u8]) -> Result<LogEntry, String> {
    match bytes.split_first() {
        None => Err("an empty entry".into()),
        Some((&KIND_EVENT, rest)) => decode_value(rest, "event").map(LogEntry::Event),
        Some((&KIND_META, rest)) => decode_value(rest, "metadata patch").map(LogEntry::Meta),
        Some((k, _)) => Err(format!("an entry of unknown kind {k:#04x}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::json::{parse_entry, ParseMode};
    use crate::event::{BlobRef, Payload};
    use crate::timestamp::Timestamp;
    use jpstore_blobstore::BlobId;
    use serde_json::json;

    fn stored(v: serde_json::Value) -> Entry {
        let now = Timestamp::from_unix(1_780_000_000, 5).expect("time");
        parse_entry(&v, ParseMode::Strict { now })
            .expect("parse")
            .try_map_content(&mut |p| match p {
                Payload::Inline(b) => Ok::<_, ()>(BlobRef {
                    id: BlobId::of(&b),
                    size: b.len() as u64,
                }),
                Payload::Ref(r) => Ok(r),
            })
            .expect("map")
    }

    #[test]
    fn every_kind_of_entry_round_trips() {
        let entries = [
            json!({"type": "turn_start", "timestamp": "2026-05-29 19:42:36.46732"}),
            json!({"type": "chat_request", "timestamp": "2026-05-29 19:42:36.0", "content": "hi",
                   "schema": {"type": "object"}, "author": "me", "metadata": {"k": [1, 2.5, null]},
                   "resources": [{"uri": "file:///a", "mimeType": "text/plain", "text": "A",
                                  "annotations": {"priority": 1}, "name": "a", "formatted": "`A`"}]}),
            json!({"type": "chat_response", "timestamp": "2026-05-29 19:42:36.0", "reasoning": "hmm"}),
            json!({"type": "chat_response", "timestamp": "2026-05-29 19:42:36.0", "data": {"x": [true]}}),
            json!({"type": "tool_call_request", "timestamp": "2026-05-29 19:42:36.0", "id": "t1",
                   "name": "fs_read_file", "arguments": {"path": "a"}}),
            json!({"type": "tool_call_response", "timestamp": "2026-05-29 19:42:36.0", "id": "t1",
                   "content": [{"type": "text", "text": "x"}, {"type": "question", "q": 1},
                               {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAEC"}}],
                   "is_error": true}),
            json!({"type": "inquiry_request", "timestamp": "2026-05-29 19:42:36.0", "id": "i",
                   "source": {"source": "user"}, "question": {"text": "ok?", "answer_type": "bool"}}),
            json!({"type": "inquiry_response", "timestamp": "2026-05-29 19:42:36.0", "id": "i", "answer": true}),
            json!({"type": "config_delta", "timestamp": "2026-05-29 19:42:36.0", "delta": {"a": {"b": 1}}}),
            json!({"type": "compaction", "timestamp": "2026-05-29 19:42:36.0", "from_turn": 0, "to_turn": 3,
                   "reasoning": "strip", "tool_calls": {"policy": "strip", "request": true, "response": false},
                   "tool_overrides": {"fs_read_file": {"request": "keep"}}, "source": "auto",
                   "unknown_field": "kept"}),
            json!({"type": "future_thing", "whatever": {"nested": [1, "two"]}}),
        ];
        for v in entries {
            let e = stored(v.clone());
            let bytes = encode_event(&e);
            assert_eq!(bytes[0], KIND_EVENT);
            match decode(&bytes).expect("decode") {
                LogEntry::Event(back) => assert_eq!(back, e, "{v}"),
                other => panic!("decoded {other:?}"),
            }
        }
    }

    #[test]
    fn meta_patch_round_trips() {
        let mut p = MetaPatch::default();
        p.fields.insert("title".into(), json!("hello"));
        p.base_config = Some(BlobRef {
            id: BlobId::of(b"{}"),
            size: 2,
        });
        let bytes = encode_meta(&p);
        assert_eq!(decode(&bytes).expect("decode"), LogEntry::Meta(p));
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        let good = encode_event(&stored(
            json!({"type": "turn_start", "timestamp": "2026-05-29 19:42:36.0"}),
        ));
        assert!(decode(&[]).is_err());
        assert!(decode(&[0x7f, 0x80])
            .expect_err("kind")
            .contains("unknown kind 0x7f"));
        for cut in 1..good.len() {
            assert!(
                decode(&good[..cut]).is_err(),
                "accepted a prefix of {cut} bytes"
            );
        }
        let mut trailing = good.clone();
        trailing.push(0xc0);
        assert!(decode(&trailing)
            .expect_err("trailing")
            .contains("1 bytes after"));
        // A map claiming 2^32-1 items must fail without allocating them.
        assert!(decode(&[KIND_EVENT, 0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
