//! Conversations round trip through the library: every entry type appended,
//! the store dropped and reopened, and the export gives back exactly what was
//! appended; content lives in the blob store under its SHA-256, once.

use jpstore_engine::internal::EntryInterior as _;
use jpstore_engine::internal::StoreInterior as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use base64::Engine as _;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{BlobRef, Entry, Object, Payload};
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use jpstore_tests::{events_of, ts};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Bytes that are not UTF-8, for a binary resource.
fn binary_bytes() -> Vec<u8> {
    (0..=255u8)
        .rev()
        .chain([0x89, b'P', b'N', b'G', 0, 0xff])
        .collect()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Batches covering every entry type, in canonical form (what export gives
/// back: canonical timestamps, `is_error` and `arguments` always present).
fn batches() -> Vec<Vec<Value>> {
    let shared = "fn shared() -> u32 { 42 }\n";
    vec![
        // Turn 0: a request with text and binary resources, every kind of
        // response.
        vec![
            json!({"type": "turn_start", "timestamp": ts(1)}),
            json!({
                "type": "chat_request",
                "timestamp": ts(2),
                "content": "Fix the flaky test in src/lib.rs",
                "author": "alice",
                "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                "resources": [
                    {
                        "uri": "file:///work/src/lib.rs",
                        "mimeType": "text/x-rust",
                        "text": shared,
                        "name": "src/lib.rs",
                        "title": "The library",
                        "description": "the file under test",
                        "annotations": {"audience": ["assistant"], "priority": 0.5},
                        "formatted": "```rust\nfn shared() -> u32 { 42 }\n```"
                    },
                    {
                        "uri": "file:///work/logo.png",
                        "mimeType": "image/png",
                        "blob": b64(&binary_bytes())
                    }
                ]
            }),
            json!({"type": "chat_response", "timestamp": ts(3), "reasoning": "The test races on a port."}),
            json!({"type": "chat_response", "timestamp": ts(4), "message": "Let me read the file."}),
            json!({"type": "chat_response", "timestamp": ts(5), "data": {"plan": ["read", "fix"], "n": 2, "ok": null}}),
        ],
        // Tool calls: a plain string response and typed blocks (text,
        // resource, an unknown `question` block).
        vec![
            json!({"type": "tool_call_request", "timestamp": ts(6), "id": "call_1", "name": "read_file",
                   "arguments": {"path": "src/lib.rs", "lines": [1, 20]}}),
            json!({"type": "tool_call_response", "timestamp": ts(7), "id": "call_1",
                   "content": shared, "is_error": false}),
            json!({"type": "tool_call_request", "timestamp": ts(8), "id": "call_2", "name": "run_tests",
                   "arguments": {}}),
            json!({
                "type": "tool_call_response",
                "timestamp": ts(9),
                "id": "call_2",
                "content": [
                    {"type": "text", "text": "2 passed, 1 failed", "mimeType": "text/markdown",
                     "annotations": {"priority": 1}},
                    {"type": "resource", "resource": {
                        "uri": "file:///work/target/test.log",
                        "mimeType": "text/plain",
                        "text": "test flaky ... FAILED\n"
                    }},
                    {"type": "resource", "resource": {
                        "uri": "file:///work/core",
                        "blob": b64(&[0, 1, 2, 0xfe, 0xff])
                    }},
                    {"type": "question", "question": {"text": "Retry?", "answer_type": "boolean"},
                     "id": "q1", "future": [1, 2, 3]}
                ],
                "is_error": true
            }),
        ],
        // Inquiries and a config change.
        vec![
            json!({"type": "inquiry_request", "timestamp": ts(10), "id": "inq_1",
                   "source": {"source": "tool", "name": "run_tests"},
                   "question": {"text": "Run all tests?", "answer_type": "boolean", "default": true}}),
            json!({"type": "inquiry_response", "timestamp": ts(11), "id": "inq_1", "answer": true}),
            json!({"type": "config_delta", "timestamp": ts(12),
                   "delta": {"assistant": {"model": {"id": "model-b"}}, "tools": ["c"]}}),
        ],
        // Turn 1: compaction, an unknown entry, a known entry with an
        // unknown field, event metadata.
        vec![
            json!({"type": "turn_start", "timestamp": ts(13)}),
            json!({"type": "chat_request", "timestamp": ts(14), "content": "Now summarize.",
                   "x_client": {"name": "jp", "version": [0, 9]}}),
            json!({"type": "compaction", "timestamp": ts(15), "from_turn": 0, "to_turn": 0,
                   "summary": {"summary": "Fixed the flaky test."},
                   "reasoning": "strip",
                   "tool_calls": {"policy": "strip", "request": true, "response": false},
                   "tool_overrides": {"read_file": {"request": "keep"}, "run_tests": {"response": "strip"}},
                   "source": "manual"}),
            json!({"type": "future_entry_kind", "timestamp": "not even a timestamp",
                   "payload": {"nested": [1, {"a": null}], "f": 1.5}, "n": -3}),
            json!({"type": "chat_response", "timestamp": ts(16), "message": "Done.",
                   "metadata": {"provider": {"signature": "c2lnbmF0dXJl"}, "tokens": 12}}),
            json!({"type": "config_delta", "timestamp": ts(17), "delta": {"style": null, "new": {"k": 1}}}),
        ],
        // The same content again: no new blob.
        vec![
            json!({"type": "tool_call_request", "timestamp": ts(18), "id": "call_3", "name": "read_file",
                   "arguments": {"path": "src/lib.rs"}}),
            json!({"type": "tool_call_response", "timestamp": ts(19), "id": "call_3",
                   "content": shared, "is_error": false}),
            json!({"type": "compaction", "timestamp": ts(20), "from_turn": 0, "to_turn": 1,
                   "tool_calls": {"policy": "omit"}, "source": "auto"}),
        ],
    ]
}

fn parse(batch: &[Value]) -> Vec<Entry<Payload>> {
    let text = serde_json::to_string(batch).expect("serialize batch");
    parse_input(
        &text,
        ParseMode::Strict {
            now: jpstore_engine::timestamp::Timestamp::now(),
        },
    )
    .unwrap_or_else(|e| panic!("batch does not parse: {e}\n{text}"))
    .entries
}

fn base_config() -> Object {
    let v = json!({
        "assistant": {"model": {"id": "model-a", "parameters": {"temperature": 0.5}}, "name": "jp"},
        "tools": ["a", "b"],
        "style": {"code": {"color": true}}
    });
    v.as_object().expect("object").clone()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn blob_ref(bytes: &[u8]) -> Value {
    json!({"$blob": sha256_hex(bytes), "size": bytes.len()})
}

/// Replaces inline text content at `key` of `obj` by its reference.
fn text_to_ref(obj: &mut Value, key: &str, refs: &mut Vec<Vec<u8>>) {
    let text = obj[key]
        .as_str()
        .unwrap_or_else(|| panic!("`{key}` is not a string in {obj}"))
        .as_bytes()
        .to_vec();
    obj[key] = blob_ref(&text);
    refs.push(text);
}

fn resource_to_refs(res: &mut Value, refs: &mut Vec<Vec<u8>>) {
    if res.get("text").is_some() {
        text_to_ref(res, "text", refs);
    } else {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(res["blob"].as_str().expect("base64 blob"))
            .expect("valid base64");
        res["blob"] = blob_ref(&bytes);
        refs.push(bytes);
    }
    if res.get("formatted").is_some() {
        text_to_ref(res, "formatted", refs);
    }
}

/// What `ContentMode::Refs` must give for `events`, computed independently
/// of the engine: every content payload replaced by its SHA-256 and size.
/// Also returns every payload's bytes.
fn expected_refs(events: &[Value]) -> (Vec<Value>, Vec<Vec<u8>>) {
    let mut refs = Vec::new();
    let mut out = events.to_vec();
    for e in &mut out {
        match e["type"].as_str() {
            Some("chat_request") => {
                if let Some(resources) = e.get_mut("resources").and_then(Value::as_array_mut) {
                    for r in resources {
                        resource_to_refs(r, &mut refs);
                    }
                }
            }
            Some("tool_call_response") => {
                if e["content"].is_string() {
                    text_to_ref(e, "content", &mut refs);
                } else {
                    for block in e["content"].as_array_mut().expect("blocks") {
                        match block["type"].as_str() {
                            Some("text") => text_to_ref(block, "text", &mut refs),
                            Some("resource") => resource_to_refs(&mut block["resource"], &mut refs),
                            _ => {}
                        }
                    }
                }
            }
            _ => {}
        }
    }
    (out, refs)
}

fn open(root: &Path) -> Store {
    Store::open_dir(root, StoreOptions::default()).expect("reopen the store")
}

#[test]
fn every_entry_type_round_trips_through_the_log_and_the_blob_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let id = ConversationId::parse("roundtrip").expect("id");
    let batches = batches();
    let mut outcomes = Vec::new();
    {
        let store = Store::init_dir(&root, StoreOptions::default()).expect("init");
        let mut writer = store
            .create(NewConversation {
                id: Some(id.clone()),
                title: Some("Round trip".into()),
                labels: vec![("team".into(), "storage".into())],
                base_config: Some(base_config()),
                ..Default::default()
            })
            .expect("create");
        for (i, batch) in batches.iter().enumerate() {
            let out = writer
                .append(parse(batch))
                .unwrap_or_else(|e| panic!("append of batch {i}: {e}"));
            assert_eq!(out.entries, batch.len(), "batch {i}: entries appended");
            outcomes.push(out);
        }
    }

    let store = open(&root);
    let conv = store.read(&id).expect("read");
    let all: Vec<Value> = batches.iter().flatten().cloned().collect();

    // Inline: exactly what was appended.
    let inline = conversation_json(&store, &conv, ContentMode::Inline).expect("inline export");
    let got = events_of(&inline);
    assert_eq!(got.len(), all.len(), "number of events");
    for (i, (g, w)) in got.iter().zip(&all).enumerate() {
        assert_eq!(g, w, "event {i} differs after the round trip");
    }
    assert_eq!(inline["id"], json!("roundtrip"));
    assert_eq!(inline["metadata"]["title"], json!("Round trip"));
    assert_eq!(inline["metadata"]["labels"], json!({"team": "storage"}));
    assert_eq!(inline["base_config"], Value::Object(base_config()));

    // Refs: every content payload is its SHA-256 and size, nothing else
    // changes.
    let refs = conversation_json(&store, &conv, ContentMode::Refs).expect("refs export");
    let (want_refs, payloads) = expected_refs(&all);
    let got_refs = events_of(&refs);
    for (i, (g, w)) in got_refs.iter().zip(&want_refs).enumerate() {
        assert_eq!(g, w, "event {i} as references");
    }
    assert_eq!(got_refs.len(), want_refs.len());
    let config_bytes = serde_json::to_vec(&json!({
        "assistant": {"model": {"id": "model-a", "parameters": {"temperature": 0.5}}, "name": "jp"},
        "style": {"code": {"color": true}},
        "tools": ["a", "b"]
    }))
    .expect("canonical config");
    assert_eq!(refs["base_config"], blob_ref(&config_bytes));

    // Each payload is in the blob store under its SHA-256; identical content
    // is one blob; nothing else was stored.
    let distinct: BTreeSet<String> = payloads.iter().map(|p| sha256_hex(p)).collect();
    assert!(
        distinct.len() < payloads.len(),
        "the workload repeats content"
    );
    for p in &payloads {
        let id = jpstore_blobstore::BlobId::parse(&sha256_hex(p)).expect("blob id");
        assert_eq!(&store.blobs().get(&id).expect("blob of a payload"), p);
    }
    let mut want_ids = distinct.clone();
    want_ids.insert(sha256_hex(&config_bytes));
    let have_ids: BTreeSet<String> = store
        .blobs()
        .ids()
        .expect("blob ids")
        .iter()
        .map(|i| i.to_hex())
        .collect();
    assert_eq!(have_ids, want_ids, "blobs in the store");
    // The last batch only repeats content.
    let last = outcomes.last().expect("outcomes");
    assert_eq!((last.payloads, last.new_blobs), (1, 0), "{last:?}");
    let new_total: usize = outcomes.iter().map(|o| o.new_blobs).sum();
    assert_eq!(new_total, distinct.len(), "blobs stored by the appends");

    // Counts folded from the log.
    assert_eq!(conv.state.entries, all.len() as u64);
    assert_eq!(conv.state.unknown_entries, 1);
    assert_eq!(conv.state.records, batches.len() as u64 + 1);
    assert_eq!(conv.state.turns(), 2);
    assert_eq!(conv.state.blob_refs, payloads.len() as u64);
    let bytes: u64 = payloads.iter().map(|p| p.len() as u64).sum();
    assert_eq!(conv.state.content_bytes, bytes);
}

#[test]
fn appending_the_same_content_twice_stores_one_blob() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let mut w = store
        .create(NewConversation {
            id: Some(ConversationId::parse("dup").expect("id")),
            base_config: Some(Object::new()),
            ..Default::default()
        })
        .expect("create");
    let content = "the same tool output\n".repeat(20);
    let batch = |n: u64| {
        vec![
            json!({"type": "tool_call_request", "timestamp": ts(n), "id": format!("c{n}"), "name": "t", "arguments": {}}),
            json!({"type": "tool_call_response", "timestamp": ts(n + 1), "id": format!("c{n}"), "content": content, "is_error": false}),
        ]
    };
    let before = store.blobs().ids().expect("ids").len();
    let first = w.append(parse(&batch(1))).expect("first append");
    let second = w.append(parse(&batch(3))).expect("second append");
    assert_eq!((first.payloads, first.new_blobs), (1, 1), "{first:?}");
    assert_eq!((second.payloads, second.new_blobs), (1, 0), "{second:?}");
    assert_eq!(store.blobs().ids().expect("ids").len(), before + 1);
    // Twice in one batch: one blob too.
    let mut changed = batch(5);
    changed.extend(batch(7));
    changed[1]["content"] = json!("new content, twice");
    changed[3]["content"] = json!("new content, twice");
    let third = w.append(parse(&changed)).expect("third append");
    assert_eq!((third.payloads, third.new_blobs), (2, 1), "{third:?}");
    assert_eq!(store.blobs().ids().expect("ids").len(), before + 2);
}

/// A config delta, as an entry.
fn delta(n: u64, d: Value) -> Value {
    json!({"type": "config_delta", "timestamp": ts(n), "delta": d})
}

#[test]
fn config_at_merges_earlier_deltas_over_the_base_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let id = ConversationId::parse("config").expect("id");
    let entries = [
        json!({"type": "turn_start", "timestamp": ts(1)}),
        json!({"type": "chat_request", "timestamp": ts(2), "content": "hi"}),
        delta(
            3,
            json!({"assistant": {"model": {"id": "model-b"}}, "tools": ["c"]}),
        ),
        json!({"type": "chat_response", "timestamp": ts(4), "message": "hello"}),
        delta(
            5,
            json!({"style": null, "assistant": {"model": {"parameters": {"top_p": 0.9}}}, "new": {"k": [1]}}),
        ),
        json!({"type": "chat_response", "timestamp": ts(6), "message": "bye"}),
    ];
    {
        let store = Store::init_dir(root, StoreOptions::default()).expect("init");
        let mut w = store
            .create(NewConversation {
                id: Some(id.clone()),
                base_config: Some(base_config()),
                ..Default::default()
            })
            .expect("create");
        // Two batches, so deltas from different records count.
        w.append(parse(&entries[..3])).expect("append 1");
        w.append(parse(&entries[3..])).expect("append 2");
    }
    let store = open(root);
    let conv = store.read(&id).expect("read");
    let base = Value::Object(base_config());
    let after_first = json!({
        "assistant": {"model": {"id": "model-b", "parameters": {"temperature": 0.5}}, "name": "jp"},
        "tools": ["c"],
        "style": {"code": {"color": true}}
    });
    let after_second = json!({
        "assistant": {"model": {"id": "model-b", "parameters": {"temperature": 0.5, "top_p": 0.9}}, "name": "jp"},
        "tools": ["c"],
        "style": null,
        "new": {"k": [1]}
    });
    // A delta applies to the entries after it, not to itself.
    let want = [
        &base,
        &base,
        &base,
        &after_first,
        &after_first,
        &after_second,
        &after_second,
    ];
    for (index, want) in want.iter().enumerate() {
        let got = store.config_at(&conv, index).expect("config_at");
        assert_eq!(&Value::Object(got), *want, "config at entry {index}");
    }
    // Past the end: everything applied.
    let got = store.config_at(&conv, 100).expect("config_at past the end");
    assert_eq!(Value::Object(got), after_second);
    // The base itself is unchanged by the deltas.
    assert_eq!(
        Value::Object(store.base_config(&conv).expect("base config")),
        base
    );
}

#[test]
fn equal_base_configs_share_one_blob() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    // Equal objects with keys in different orders: one canonical form.
    let a = json!({"b": {"y": 1, "x": [2, 1]}, "a": "s"});
    let b = json!({"a": "s", "b": {"x": [2, 1], "y": 1}});
    let different = json!({"a": "s", "b": {"x": [1, 2], "y": 1}});
    let mut refs = BTreeMap::new();
    for (name, cfg) in [("one", &a), ("two", &b), ("three", &different)] {
        let id = ConversationId::parse(name).expect("id");
        store
            .create(NewConversation {
                id: Some(id.clone()),
                base_config: Some(cfg.as_object().expect("object").clone()),
                ..Default::default()
            })
            .expect("create");
        let conv = store.read(&id).expect("read");
        let r = conv.state.metadata.base_config.expect("a base config");
        assert_eq!(
            Value::Object(store.base_config(&conv).expect("base")),
            *cfg,
            "{name}: base config reads back"
        );
        refs.insert(name, r);
    }
    assert_eq!(refs["one"], refs["two"], "equal configs, one blob");
    assert_ne!(refs["one"], refs["three"], "array order matters");
    let canonical = br#"{"a":"s","b":{"x":[2,1],"y":1}}"#;
    assert_eq!(refs["one"].id.to_hex(), sha256_hex(canonical));
    assert_eq!(refs["one"].size, canonical.len() as u64);
    // Two config blobs in all (plus the workspace template is not stored).
    assert_eq!(store.blobs().ids().expect("ids").len(), 2);
}

#[test]
fn formatted_beside_and_inside_a_resource_is_not_silently_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let id = ConversationId::parse("formatted").expect("id");
    let mut w = store
        .create(NewConversation {
            id: Some(id.clone()),
            ..Default::default()
        })
        .expect("create");
    // RFD 058 puts `formatted` beside `resource`, RFD 065 inside it; the
    // parser accepts both places. Given both, with different texts:
    let batch = vec![
        json!({"type": "tool_call_request", "timestamp": ts(1), "id": "a", "name": "read", "arguments": {}}),
        json!({"type": "tool_call_response", "timestamp": ts(2), "id": "a", "is_error": false, "content": [
            {"type": "resource", "formatted": "OUTER formatted text",
             "resource": {"uri": "file:///x", "text": "raw", "formatted": "INNER formatted text"}}
        ]}),
    ];
    let text = serde_json::to_string(&batch).expect("serialize");
    let entries = parse_input(
        &text,
        ParseMode::Strict {
            now: jpstore_engine::timestamp::Timestamp::now(),
        },
    );
    let Ok(input) = entries else {
        // Refusing the ambiguous input is fine.
        return;
    };
    w.append(input.entries).expect("append");
    drop(w);
    let conv = store.read(&id).expect("read");
    let doc = conversation_json(&store, &conv, ContentMode::Inline).expect("export");
    let exported = doc["events"][1].to_string();
    for want in ["OUTER formatted text", "INNER formatted text"] {
        assert!(
            exported.contains(want),
            "accepted, but {want:?} was lost: {exported}"
        );
    }
}

/// A JSON value nested `depth` arrays deep.
fn nested(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = Value::Array(vec![v]);
    }
    v
}

#[test]
fn what_the_library_acknowledges_reads_back() {
    // JSON text cannot carry such values (serde_json stops at 128 levels),
    // but the library API takes values built in memory.
    let mut failures = Vec::new();

    // 1. An event whose data is nested 300 deep.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let id = ConversationId::parse("deep-event").expect("id");
    let mut w = store
        .create(NewConversation {
            id: Some(id.clone()),
            ..Default::default()
        })
        .expect("create");
    let event = Entry::Event(jpstore_engine::event::Event {
        timestamp: jpstore_engine::timestamp::Timestamp::now(),
        kind: jpstore_engine::event::EventKind::ChatResponse(
            jpstore_engine::event::ChatResponse::Data(nested(300)),
        ),
        metadata: Object::new(),
        extra: Object::new(),
    });
    if w.append(vec![event]).is_ok() {
        drop(w);
        if let Err(e) = store.read(&id) {
            failures.push(format!(
                "event nested 300 deep: acknowledged, then read fails: {e}"
            ));
        }
        if let Err(e) = store.writer(&id) {
            failures.push(format!(
                "event nested 300 deep: acknowledged, then the writer fails: {e}"
            ));
        }
    }

    // 2. A metadata field nested 300 deep, in the first record.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let mut extra = Object::new();
    extra.insert("pinned_at".into(), nested(300));
    let id = ConversationId::parse("deep-meta").expect("id");
    if store
        .create(NewConversation {
            id: Some(id.clone()),
            extra,
            ..Default::default()
        })
        .is_ok()
    {
        if let Err(e) = store.read(&id) {
            failures.push(format!(
                "metadata nested 300 deep: created, then read fails: {e}"
            ));
        }
        if let Err(e) = store.list() {
            failures.push(format!(
                "metadata nested 300 deep: created, then listing the store fails: {e}"
            ));
        }
    }

    // 3. A base config nested 200 deep (stored as a JSON blob).
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let mut config = Object::new();
    config.insert("deep".into(), nested(200));
    let id = ConversationId::parse("deep-config").expect("id");
    if store
        .create(NewConversation {
            id: Some(id.clone()),
            base_config: Some(config),
            ..Default::default()
        })
        .is_ok()
    {
        let conv = store.read(&id).expect("read");
        if let Err(e) = store.config_at(&conv, 0) {
            failures.push(format!(
                "base config nested 200 deep: created, then config_at fails: {e}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

fn request_of(len: usize) -> Vec<Entry<Payload>> {
    parse(&[json!({"type": "chat_request", "timestamp": ts(1), "content": "x".repeat(len)})])
}

#[test]
fn the_record_size_limit_is_exact_and_a_refusal_leaves_the_writer_usable() {
    const LIMIT: u32 = 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let id = ConversationId::parse("limit").expect("id");
    let log = jpstore_tests::log_path(dir.path(), "limit");
    let log_len = || std::fs::metadata(&log).expect("stat log").len();

    let mut options = StoreOptions::default();
    options.log.max_record_size = LIMIT;
    let store = Store::init_dir(dir.path(), options.clone()).expect("init");
    store
        .create(NewConversation {
            id: Some(id.clone()),
            base_config: Some(Object::new()),
            ..Default::default()
        })
        .expect("create")
        .close();
    let mut w = store.writer(&id).expect("writer");
    // The size the limit is checked against of a request of 900 bytes of
    // content (the sections decoded, before any compression: the limit
    // applies to them); content lengths from 128 to 16,383 have the same
    // encoding overhead, so the content that makes the size exactly LIMIT
    // follows.
    let at_limit = {
        let batch: Vec<Entry> = request_of(900)
            .into_iter()
            .map(|e| {
                e.try_map_content(&mut |_| Err::<BlobRef, _>("a request holds no payload"))
                    .expect("no payload")
            })
            .collect();
        let size = w.batch_size(&batch).expect("a small batch");
        900 + (u64::from(LIMIT) - size) as usize
    };
    let before = std::fs::read(&log).expect("read log");
    let err = w
        .append(request_of(at_limit + 1))
        .expect_err("a batch one byte over the limit was appended");
    match &err {
        jpstore_engine::error::Error::RecordTooLarge {
            offset: None,
            size,
            max,
            ..
        } => assert_eq!(
            (*size, *max),
            (u64::from(LIMIT) + 1, u64::from(LIMIT)),
            "{err}"
        ),
        other => panic!("expected RecordTooLarge, got {other}"),
    }
    assert_eq!(
        std::fs::read(&log).expect("read log"),
        before,
        "the log changed"
    );
    // The writer is not poisoned: a batch exactly at the limit goes in.
    let out = w
        .append(request_of(at_limit))
        .expect("a batch exactly at the limit");
    // Stored as it is (below the size that is compressed): a record header
    // and the limit.
    assert_eq!(log_len() - out.offset, 20 + u64::from(LIMIT), "record size");
    drop(w);
    assert_eq!(store.read(&id).expect("read").entries.len(), 1);

    // A reader configured below the writer's limit refuses the record as
    // too large, naming it; the writer does not cut it.
    let mut small = options;
    small.log.max_record_size = LIMIT / 2;
    let store = Store::open_dir(dir.path(), small).expect("open with a small limit");
    let err = store.read(&id).expect_err("read a record over the limit");
    assert!(err.is_corruption(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("offset {}", out.offset))
            && msg.contains("1024")
            && msg.contains("512"),
        "{msg}"
    );
    // The record itself is small (packed); what is over the limit is its
    // content, which a writer decodes only past its head cache.
    std::fs::remove_file(dir.path().join("conversations/limit/head")).expect("remove the head");
    let len = log_len();
    let err = store
        .writer(&id)
        .expect_err("writer over a too large record");
    assert!(err.is_corruption(), "{err}");
    assert_eq!(log_len(), len, "the record was cut");
}
