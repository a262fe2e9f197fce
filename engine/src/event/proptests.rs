//! Property tests of the event codecs: any entry in canonical JSON form goes
//! through parse, content extraction, the log encodings (MessagePack of
//! version 1, the binary form of version 2), decode and render, and comes
//! back equal; its head read from version 2 bytes is the head of the entry.

use std::collections::HashMap;

use jpstore_blobstore::BlobId;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::binary::encode::RecordBuilder;
use super::head::EntryHead;
use super::json::{parse_entry, payload_json, render_entry, ParseMode};
use super::{BlobRef, Entry, Payload};
use crate::conversation::codec::{decode, encode_event, LogEntry};
use crate::conversation::sections::{
    decode_body, decode_record, entry_body, finish, OpenHeads, OpenRecord,
};
use crate::timestamp::Timestamp;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,12}",
        any::<String>(),
        Just(String::new()),
        Just("[compacted] x: success".to_string()),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        text().prop_map(Value::String),
        // A thinking signature: canonical base64, stored as its bytes.
        prop::collection::vec(any::<u8>(), 40..120).prop_map(|b| {
            use base64::Engine as _;
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z$_]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("[a-z_]{1,6}", json_value(), 0..4)
        .prop_map(|m| m.into_iter().collect())
}

fn timestamp() -> impl Strategy<Value = String> {
    (0i64..4_000_000_000, 0u32..1_000_000_000)
        .prop_map(|(s, n)| Timestamp::from_unix(s, n).expect("in range").to_string())
}

fn resource() -> impl Strategy<Value = Value> {
    (
        "file:///[a-z/]{1,12}",
        any::<bool>(),
        text(),
        prop::option::of("[a-z]{1,5}/[a-z]{1,5}"),
        prop::option::of(text()),
        prop::option::of(text()),
    )
        .prop_map(|(uri, binary, body, mime, name, formatted)| {
            let mut o = Map::new();
            o.insert("uri".into(), uri.into());
            if binary {
                use base64::Engine as _;
                let b64 = base64::engine::general_purpose::STANDARD.encode(body.as_bytes());
                o.insert("blob".into(), b64.into());
            } else {
                o.insert("text".into(), body.into());
            }
            if let Some(m) = mime {
                o.insert("mimeType".into(), m.into());
            }
            if let Some(n) = name {
                o.insert("name".into(), n.into());
            }
            if let Some(f) = formatted {
                o.insert("formatted".into(), f.into());
            }
            Value::Object(o)
        })
}

fn block() -> impl Strategy<Value = Value> {
    prop_oneof![
        (text(), prop::option::of("text/[a-z]{1,8}")).prop_map(|(t, m)| match m {
            Some(m) => json!({"type": "text", "text": t, "mimeType": m}),
            None => json!({"type": "text", "text": t}),
        }),
        resource().prop_map(|r| json!({"type": "resource", "resource": r})),
        object().prop_map(|mut o| {
            o.insert("type".into(), "question".into());
            Value::Object(o)
        }),
    ]
}

fn kind_fields() -> impl Strategy<Value = Map<String, Value>> {
    let o = |v: Value| match v {
        Value::Object(o) => o,
        _ => unreachable!(),
    };
    prop_oneof![
        Just(o(json!({"type": "turn_start"}))),
        (text(), prop::collection::vec(resource(), 0..3)).prop_map(move |(c, rs)| {
            let mut m = o(json!({"type": "chat_request", "content": c}));
            if !rs.is_empty() {
                m.insert("resources".into(), Value::Array(rs));
            }
            m
        }),
        text().prop_map(move |t| o(json!({"type": "chat_response", "message": t}))),
        text().prop_map(move |t| o(json!({"type": "chat_response", "reasoning": t}))),
        json_value().prop_map(move |v| o(json!({"type": "chat_response", "data": v}))),
        (text(), text(), object()).prop_map(move |(id, name, args)| o(
            json!({"type": "tool_call_request", "id": id, "name": name, "arguments": args})
        )),
        (text(), text(), any::<bool>()).prop_map(move |(id, c, e)| o(
            json!({"type": "tool_call_response", "id": id, "content": c, "is_error": e})
        )),
        (text(), prop::collection::vec(block(), 0..4), any::<bool>()).prop_map(
            move |(id, bs, e)| o(
                json!({"type": "tool_call_response", "id": id, "content": bs, "is_error": e})
            )
        ),
        (text(), object(), object()).prop_map(move |(id, s, q)| o(
            json!({"type": "inquiry_request", "id": id, "source": s, "question": q})
        )),
        (text(), json_value())
            .prop_map(move |(id, a)| o(json!({"type": "inquiry_response", "id": id, "answer": a}))),
        object().prop_map(move |d| o(json!({"type": "config_delta", "delta": d}))),
        (0u64..50, 0u64..50, any::<bool>(), any::<bool>(), 0u8..3).prop_map(
            move |(a, b, summary, reasoning, tools)| {
                let mut m =
                    o(json!({"type": "compaction", "from_turn": a.min(b), "to_turn": a.max(b)}));
                if summary {
                    m.insert("summary".into(), json!({"summary": "s"}));
                }
                if reasoning {
                    m.insert("reasoning".into(), "strip".into());
                }
                match tools {
                    1 => {
                        m.insert("tool_calls".into(), json!({"policy": "omit"}));
                    }
                    2 => {
                        m.insert(
                            "tool_calls".into(),
                            json!({"policy": "strip", "request": true, "response": false}),
                        );
                    }
                    _ => {}
                }
                m.insert(
                    "tool_overrides".into(),
                    json!({"fs_read_file": {"request": "keep"}}),
                );
                m.insert("source".into(), "auto".into());
                m
            }
        ),
    ]
}

fn entry() -> impl Strategy<Value = Value> {
    (
        kind_fields(),
        timestamp(),
        object(),
        object(),
        any::<bool>(),
    )
        .prop_map(|(mut m, ts, metadata, extra, unknown)| {
            if unknown {
                m.insert("type".into(), "some_future_type".into());
            }
            m.insert("timestamp".into(), ts.into());
            if !metadata.is_empty() {
                m.insert("metadata".into(), Value::Object(metadata));
            }
            for (k, v) in extra {
                // Unknown top-level fields, named so they cannot collide.
                m.entry(format!("x_{k}")).or_insert(v);
            }
            Value::Object(m)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn entries_survive_the_log_encoding(v in entry()) {
        let now = Timestamp::from_unix(0, 0).expect("epoch");
        let parsed = parse_entry(&v, ParseMode::Strict { now }).expect("generated entries are valid");
        let mut blobs: HashMap<BlobId, Vec<u8>> = HashMap::new();
        let stored: Entry = parsed
            .try_map_content(&mut |p| match p {
                Payload::Inline(b) => {
                    let r = BlobRef { id: BlobId::of(&b), size: b.len() as u64 };
                    blobs.insert(r.id, b);
                    Ok::<_, ()>(r)
                }
                Payload::Ref(r) => Ok(r),
            })
            .expect("map");
        let bytes = encode_event(&stored);
        let back = match decode(&bytes).expect("decode") {
            LogEntry::Event(e) => e,
            other => panic!("decoded {other:?}"),
        };
        prop_assert_eq!(&back, &stored);
        let rendered = render_entry(&back, &mut |r: &BlobRef, kind| {
            let b = blobs.get(&r.id).cloned().expect("known blob");
            payload_json(&Payload::Inline(b), kind)
        })
        .expect("render");
        prop_assert_eq!(rendered, v);
    }

    #[test]
    fn entries_survive_the_binary_encoding(vs in prop::collection::vec(entry(), 1..6), compress in any::<bool>()) {
        let now = Timestamp::from_unix(0, 0).expect("epoch");
        let stored: Vec<Entry> = vs
            .iter()
            .map(|v| {
                parse_entry(v, ParseMode::Strict { now })
                    .expect("generated entries are valid")
                    .hashed()
            })
            .collect();
        let mut record = RecordBuilder::new();
        for e in &stored {
            record.push_entry(e).expect("encode");
        }
        // Large enough to be compressed when asked: the same entries again.
        if compress {
            while record.plain_len() < 40_000 {
                for e in &stored {
                    record.push_entry(e).expect("encode");
                }
            }
        }
        let sections = finish(&record, compress.then_some(crate::conversation::sections::LOG_LEVEL));
        let back = decode_record(&sections.heads, &sections.body, u32::MAX).expect("decode");
        let expected: Vec<LogEntry> = stored.iter().cycle().take(back.len()).cloned().map(LogEntry::Event).collect();
        prop_assert_eq!(&back, &expected);
        // The heads read from the bytes are the heads of the entries.
        let open = OpenHeads::open(&sections.heads, sections.body.len() as u32, u32::MAX).expect("open");
        let body = decode_body(&open.section, &sections.body, u32::MAX).expect("body");
        for (i, e) in stored.iter().enumerate() {
            let raw = open.raw(i).expect("head");
            let head = EntryHead::from_raw(&raw, &mut |raw| {
                let bytes = entry_body(raw, &body)?;
                super::binary::decode::BodyParts::new(raw, bytes)?.object(super::binary::Part::Delta)
            })
            .expect("head");
            prop_assert_eq!(head, EntryHead::of(e));
        }
    }

    #[test]
    fn checking_an_entry_refuses_what_decoding_it_refuses(
        vs in prop::collection::vec(entry(), 1..4),
        damage in prop::collection::vec((any::<prop::sample::Index>(), 1..=255u8), 0..3),
    ) {
        let now = Timestamp::from_unix(0, 0).expect("epoch");
        let mut record = RecordBuilder::new();
        for v in &vs {
            let e = parse_entry(v, ParseMode::Strict { now }).expect("generated entries are valid").hashed();
            record.push_entry(&e).expect("encode");
        }
        let sections = finish(&record, None);
        // Damage in the entry heads, their aux or the body (the section
        // header is left alone, so the record still opens).
        let mut bytes = [&sections.heads[..], &sections.body[..]].concat();
        let header = crate::log::HEADS_SECTION_HEADER_LEN as usize;
        for (at, xor) in &damage {
            let i = header + at.index(bytes.len() - header);
            bytes[i] ^= xor;
        }
        let (heads, body) = bytes.split_at(sections.heads.len());
        let record = OpenRecord::open(heads, body, u32::MAX).expect("open");
        for i in 0..record.count() {
            let Ok((raw, entry_bytes)) = record.entry(i) else { continue };
            let mut seen = Vec::new();
            let checked = super::binary::decode::check_entry(&raw, entry_bytes, &mut |r| seen.push(r));
            let decoded = super::binary::decode::decode_entry(&raw, entry_bytes);
            if let (Ok(_), Ok(entry)) = (&checked, &decoded) {
                // What fsck resolves is what the entry references.
                let mut refs = Vec::new();
                entry.for_each_content(&mut |r| refs.push(*r));
                prop_assert_eq!(&seen, &refs, "references of entry {}", i);
            }
            prop_assert_eq!(checked.map(|_| ()), decoded.map(|_| ()), "entry {}", i);
        }
    }

    #[test]
    fn binary_records_never_panic(heads in prop::collection::vec(any::<u8>(), 0..300), body in prop::collection::vec(any::<u8>(), 0..100)) {
        let _ = decode_record(&heads, &body, 1 << 20);
        let mut with_header = crate::log::HeadsSection {
            count: 2,
            aux_len: heads.len().saturating_sub(64) as u32,
            body_raw_len: body.len() as u32,
            heads_codec: 0,
            body_codec: 0,
        }
        .encode()
        .to_vec();
        with_header.extend_from_slice(&heads);
        let _ = decode_record(&with_header, &body, 1 << 20);
    }

    #[test]
    fn lenient_parsing_never_fails_on_objects(v in object()) {
        let v = Value::Object(v);
        prop_assert!(parse_entry(&v, ParseMode::Lenient).is_ok());
    }

    #[test]
    fn log_entry_decoding_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode(&bytes);
        let mut with_kind = vec![0x01];
        with_kind.extend_from_slice(&bytes);
        let _ = decode(&with_kind);
    }
}

/// Values whose objects' keys are few, `signature` among them, so that a
/// search for it meets strings, base64 strings stored as bytes and other
/// values under that key, at every depth.
fn keyed_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (prop::sample::select(vec!["signature", "a", "b"]), inner),
                0..4
            )
            .prop_map(|members| Value::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect()
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The search of the binary form finds what the search of the object
    /// finds.
    #[test]
    fn a_signature_is_found_in_the_binary_form_as_in_the_object(
        members in prop::collection::vec(
            (prop::sample::select(vec!["signature", "a", "b"]), keyed_value()),
            0..5,
        )
    ) {
        let object: Map<String, Value> =
            members.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let mut bytes = Vec::new();
        super::binary::value::put_object(&mut bytes, &object, 0).expect("encode");
        let mut r = super::binary::wire::Reader::new(&bytes);
        let found = super::binary::value::find_string_leaf(&mut r, crate::export::events::SIGNATURE_KEY)
            .expect("checked bytes are searched");
        prop_assert_eq!(
            found.as_deref(),
            crate::export::events::find_signature(&object)
        );
    }
}
