//! JP interop: import then export gives back JP's files byte for byte:
//! the committed fixture workspace (`tests/fixtures/jp-workspace`, every
//! quirk of jp-format.md section 2, the three config layouts, archived
//! conversations and hand-edited files), the shipped sample, conversations
//! written here, and generated ones (property tests). Bytes are compared,
//! never `serde_json::Value`s (whose equality ignores key order).

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::base64::{encode, Base64};
use super::export::{jp_files, jp_values, slug, JpExportError, JpFiles, JpValues};
use super::export_dir::write_jp_dir;
use super::import::JpImportError;
use super::import::{
    find_sources, prepare, prepare_checked, read_source, ByteCheck, Imported, MAX_KEPT_TEXT,
};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{Block, Entry, EventKind};
use jpstore_engine::{Store, StoreOptions};

fn b64(s: &str) -> Value {
    Value::String(encode(s))
}

/// A signature that is base64 itself, so JP encodes it twice.
fn signature() -> String {
    encode("\u{1}\u{2}opaque provider signature bytes, long enough to matter")
}

fn write(dir: &Path, name: &str, v: &Value) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut text = serde_json::to_string_pretty(v).expect("json");
    text.push('\n');
    std::fs::write(dir.join(name), text).expect("write");
}

/// Events with every quirk: several requests in a turn, an empty turn,
/// reused tool ids, an orphaned request, an inquiry without response, a
/// non-base64 tool response and argument, a value that decodes to non-UTF-8,
/// a twice-encoded signature, unknown entries and unknown fields.
fn quirky_events() -> Vec<Value> {
    vec![
        json!({"type": "chat_request", "timestamp": "2026-05-29 19:40:00.0", "content": "before any turn_start"}),
        json!({"type": "turn_start", "timestamp": "2026-05-29 19:40:02.123"}),
        json!({"type": "turn_start", "timestamp": "2026-05-29 19:40:02.2"}),
        json!({"type": "chat_request", "timestamp": "2026-05-29 19:40:02.46732", "content": "first", "author": "me"}),
        json!({"type": "chat_request", "timestamp": "2026-05-29 19:40:03.0", "content": "second in the same turn",
               "schema": {"type": "object"}}),
        json!({"type": "chat_response", "timestamp": "2026-05-29 19:40:05.5", "reasoning": "thinking",
               "metadata": {"anthropic": {"signature": b64(&signature()), "n": 3, "list": [b64("x"), true]}}}),
        json!({"type": "tool_call_request", "timestamp": "2026-05-29 19:40:05.61", "id": "toolu_01",
               "name": "fs_read_file", "arguments": {"path": b64("src/lib.rs"), "lines": [1, 2],
               "opts": {"raw": "not base64 at all!", "bin": "//79"}}}),
        json!({"type": "tool_call_response", "timestamp": "2026-05-29 19:40:05.7", "id": "toolu_01",
               "content": b64("fn main() {}\n"), "is_error": false}),
        json!({"type": "tool_call_request", "timestamp": "2026-05-29 19:40:06.0", "id": "toolu_01",
               "name": "cargo_check", "arguments": {}}),
        json!({"type": "tool_call_response", "timestamp": "2026-05-29 19:40:07.0", "id": "toolu_01",
               "content": "plain text JP never encoded", "is_error": true}),
        json!({"type": "chat_response", "timestamp": "2026-05-29 19:40:09.0", "data": {"answer": [1, "two", null]}}),
        json!({"type": "turn_start", "timestamp": "2026-05-29 19:41:00.0"}),
        json!({"type": "chat_request", "timestamp": "2026-05-29 19:41:00.1", "content": "go on",
               "some_future_field": {"kept": true}}),
        json!({"type": "inquiry_request", "timestamp": "2026-05-29 19:41:01.0", "id": "q1",
               "source": {"source": "tool", "name": "fs_modify_file"},
               "question": {"text": "Apply?", "answer_type": "boolean", "default": true}}),
        json!({"type": "tool_call_request", "timestamp": "2026-05-29 19:41:02.0", "id": "orphan",
               "name": "cargo_test", "arguments": {"filter": b64("x")}}),
        json!({"type": "config_delta", "timestamp": "2026-05-29 19:41:03.0", "delta": {"assistant": {"model": {"id": "m2"}}}}),
        json!({"type": "compaction", "timestamp": "2026-05-29 19:41:04.0", "from_turn": 0, "to_turn": 1,
               "reasoning": "strip", "tool_calls": {"policy": "strip", "request": true, "response": true}}),
        json!({"type": "some_new_entry", "timestamp": "whatever", "payload": [b64("x")]}),
        json!({"type": "tool_call_response", "timestamp": "not a timestamp", "id": "x", "content": 5}),
        json!({"type": "chat_response", "timestamp": "2026-05-29 19:42:36.46732", "message": "done",
               "metadata": {"openai": {"id": b64("resp_1")}}}),
    ]
}

fn base_config() -> Value {
    json!({"assistant": {"name": "jp", "model": {"id": "anthropic/claude-sonnet-4"}},
           "conversation": {"tools": {"fs_read_file": {"enable": true}}}, "big": vec!["x"; 50]})
}

struct Fixture {
    dir: PathBuf,
    events: Value,
    metadata: Value,
    base_config: Option<Value>,
}

/// Writes the three layouts (and an archived one) under `root`.
fn fixtures(root: &Path) -> Vec<Fixture> {
    let conv = root.join(".jp").join("conversations");
    let metadata = json!({"title": "Quirks", "last_activated_at": "2026-05-29 19:42:36.46732",
                          "pinned_at": "2026-05-29 19:40:00.0", "labels": {"k": "v"}, "unknown_key": 1});
    let mut out = Vec::new();
    // 1. base_config.json.
    let dir = conv.join("17738399468-separate-base-config");
    write(&dir, "events.json", &Value::Array(quirky_events()));
    write(&dir, "metadata.json", &metadata);
    write(&dir, "base_config.json", &base_config());
    out.push(Fixture {
        dir,
        events: Value::Array(quirky_events()),
        metadata: metadata.clone(),
        base_config: Some(base_config()),
    });
    // 2. The config as the first config_delta (legacy).
    let dir = conv.join("17738399469-first-delta");
    let mut events = vec![
        json!({"type": "config_delta", "timestamp": "2026-05-29 19:39:00.5",
                                 "delta": base_config()}),
    ];
    events.extend(quirky_events());
    write(&dir, "events.json", &Value::Array(events.clone()));
    write(
        &dir,
        "metadata.json",
        &json!({"last_activated_at": "2026-05-29 19:42:36.0"}),
    );
    out.push(Fixture {
        dir,
        events: Value::Array(events),
        metadata: json!({"last_activated_at": "2026-05-29 19:42:36.0"}),
        base_config: None,
    });
    // 3. The oldest: config keys flattened into the first entry; and no
    // turn_start at all.
    let dir = conv.join(".archive").join("17738399470");
    let events = vec![
        json!({"type": "config_delta", "timestamp": "2026-05-29 19:39:00.0", "assistant": {"name": "jp"}}),
        json!({"type": "chat_request", "timestamp": "2026-05-29 19:39:01.0", "content": "no turns"}),
        json!({"type": "chat_response", "timestamp": "2026-05-29 19:39:02.0", "message": "ok"}),
    ];
    write(&dir, "events.json", &Value::Array(events.clone()));
    write(
        &dir,
        "metadata.json",
        &json!({"last_activated_at": "2026-05-29 19:39:02.0", "archived_at": "2026-06-01 00:00:00.0"}),
    );
    out.push(Fixture {
        dir,
        events: Value::Array(events),
        metadata: json!({"last_activated_at": "2026-05-29 19:39:02.0", "archived_at": "2026-06-01 00:00:00.0"}),
        base_config: None,
    });
    out
}

fn store(root: &Path) -> Store {
    Store::init_dir(&root.join("store"), StoreOptions::default()).expect("init")
}

/// The files of `dir` (a JP conversation directory) by name, as bytes.
fn dir_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("read"))
        })
        .collect();
    out.sort();
    out
}

/// The files export gives, by name.
fn exported_files(files: &JpFiles) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![
        ("events.json".to_string(), files.events.clone()),
        ("metadata.json".to_string(), files.metadata.clone()),
    ];
    if let Some(b) = &files.base_config {
        out.push(("base_config.json".to_string(), b.clone()));
    }
    out.sort();
    out
}

/// Where two byte strings first differ, with some context, for messages.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let show = |s: &[u8]| {
        String::from_utf8_lossy(&s[at.saturating_sub(40)..(at + 40).min(s.len())]).into_owned()
    };
    format!(
        "differ at byte {at} ({} vs {} bytes):\n  expected: {:?}\n  exported: {:?}",
        a.len(),
        b.len(),
        show(a),
        show(b)
    )
}

/// Asserts that export gives back the files of `dir` byte for byte.
fn assert_same_files(dir: &Path, files: &JpFiles) {
    let original = dir_files(dir);
    let exported = exported_files(files);
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&original), names(&exported), "{}", dir.display());
    for ((name, a), (_, b)) in original.iter().zip(&exported) {
        assert!(
            a == b,
            "{}/{name}: {}",
            dir.display(),
            first_difference(a, b)
        );
    }
}

/// Imports every conversation under `root` into `store`, checking that
/// import found each byte-identical; the directories with what import kept.
fn import_all(store: &Store, root: &Path) -> Vec<(PathBuf, usize)> {
    let mut out = Vec::new();
    let mut prepared = Vec::new();
    for dir in find_sources(root).expect("find") {
        let (p, check) = prepare_checked(read_source(&dir).expect("read"));
        match check {
            ByteCheck::Identical { kept } => out.push((dir, kept)),
            ByteCheck::NotIdentical { reason } => panic!("{}: {reason}", dir.display()),
        }
        prepared.push(p);
    }
    let (results, _) =
        jpstore_engine::import::run(store, prepared, false, &mut |_| {}).expect("import");
    assert!(results.iter().all(|r| matches!(r, Imported::Stored { .. })));
    out
}

fn id_of(dir: &Path) -> ConversationId {
    let name = dir.file_name().and_then(|n| n.to_str()).expect("name");
    ConversationId::parse(name.split('-').next().expect("id")).expect("id")
}

fn export(store: &Store, id: &ConversationId) -> JpFiles {
    let conv = store.read(id).expect("read");
    jp_files(store, &conv).expect("export")
}

/// What JP's loader (serde_json) reads from `base_config.json` (if given)
/// and `events.json`.
fn loaded_values(events: &[u8], base_config: Option<&[u8]>) -> JpValues {
    let events: Value = serde_json::from_slice(events).expect("events.json");
    JpValues {
        base_config: base_config.map(|b| serde_json::from_slice(b).expect("base_config.json")),
        events: match events {
            Value::Array(items) => items,
            other => panic!("events.json is not an array: {other}"),
        },
    }
}

/// The values of conversation `id` taken from its entries (`jp_values`),
/// with JP's base64 everywhere, as its files hold it; checked to be what
/// JP's lenient loader reads the same from the values with base64 only
/// where it decodes.
fn values(store: &Store, id: &ConversationId) -> JpValues {
    let conv = store.read(id).expect("read");
    let values = jp_values(store, &conv, Base64::Always).expect("values");
    let fewer = jp_values(store, &conv, Base64::WhereDecoded).expect("values");
    assert_eq!(
        loaded(&fewer),
        loaded(&values),
        "{id}: the same text for JP's loader"
    );
    values
}

/// `values` as JP's loader reads them (jp-format.md section 2): base64
/// decoded where it decodes.
fn loaded(values: &JpValues) -> JpValues {
    let mut values = values.clone();
    for event in &mut values.events {
        let Some(o) = event.as_object_mut() else {
            continue;
        };
        let decode = |v: &mut Value| {
            if let Value::String(s) = v {
                if let Some(d) = super::base64::decode(s) {
                    *s = d;
                }
            }
        };
        fn leaves(v: &mut Value, f: &impl Fn(&mut Value)) {
            match v {
                Value::Array(items) => items.iter_mut().for_each(|i| leaves(i, f)),
                Value::Object(o) => o.values_mut().for_each(|i| leaves(i, f)),
                leaf => f(leaf),
            }
        }
        if let Some(m) = o.get_mut("metadata") {
            leaves(m, &decode);
        }
        match o.get("type").and_then(Value::as_str) {
            Some("tool_call_request") => {
                if let Some(a) = o.get_mut("arguments") {
                    leaves(a, &decode);
                }
            }
            Some("tool_call_response") => {
                if let Some(c) = o.get_mut("content") {
                    decode(c);
                }
            }
            _ => {}
        }
    }
    values
}

/// The values of conversation `id` taken from its entries are what JP's
/// loader reads from the JP conversation directory `dir`.
fn assert_values_are_the_files_of(store: &Store, id: &ConversationId, dir: &Path) {
    let events = std::fs::read(dir.join("events.json")).expect("events.json");
    let base = std::fs::read(dir.join("base_config.json")).ok();
    let loaded = loaded_values(&events, base.as_deref());
    assert_eq!(values(store, id), loaded, "{}", dir.display());
}

/// The values of conversation `id` taken from its entries are what JP's
/// loader reads from the files export writes for it.
fn assert_values_are_the_export(store: &Store, id: &ConversationId) {
    let files = export(store, id);
    let loaded = loaded_values(&files.events, files.base_config.as_deref());
    assert_eq!(values(store, id), loaded, "{id}");
}

/// Conversation `id` of `store` through an NDJSON stream into a new store
/// below `root`, as `export --format ndjson | import -` moves it: its line
/// (which must come back byte for byte from the new store) and its JP
/// files exported from the new store.
fn through_a_stream(store: &Store, id: &ConversationId, root: &Path) -> JpFiles {
    use jpstore_engine::internal::stream::{parse_conversation_line, write_conversation_line};
    let line = |s: &Store| {
        let mut out = Vec::new();
        write_conversation_line(s, &s.read(id).expect("read"), &mut out).expect("line");
        out
    };
    let first = line(store);
    let prepared = parse_conversation_line(&first[..first.len() - 1], 1).expect("parse");
    assert_eq!(super::export::prepared_problem(&prepared), None);
    let other = Store::init_dir(
        &root.join(format!("streamed-{id}")),
        StoreOptions::default(),
    )
    .expect("init");
    jpstore_engine::import::run(&other, vec![prepared], false, &mut |_| {}).expect("import");
    assert!(line(&other) == first, "the line comes back byte for byte");
    export(&other, id)
}

#[test]
fn import_then_export_gives_the_same_bytes_for_every_layout_and_quirk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fx = fixtures(tmp.path());
    let store = store(tmp.path());
    let sources = find_sources(tmp.path()).expect("find");
    assert_eq!(
        sources.len(),
        3,
        "workspace root, .jp/conversations and .archive: {sources:?}"
    );
    let kept = import_all(&store, tmp.path());
    assert!(kept.iter().all(|(_, k)| *k == 0), "{kept:?}");
    for f in &fx {
        let name = f.dir.file_name().and_then(|n| n.to_str()).expect("name");
        let files = export(&store, &id_of(&f.dir));
        assert!(files.lossy.is_empty(), "{:?}", files.lossy);
        assert_eq!(files.dir_name, name);
        assert_same_files(&f.dir, &files);
        // Equal as values too, which the fixtures state.
        let events: Value = serde_json::from_slice(&files.events).expect("json");
        assert_eq!(events, f.events, "{name}");
        let metadata: Value = serde_json::from_slice(&files.metadata).expect("json");
        assert_eq!(metadata, f.metadata, "{name}");
        let base: Option<Value> = files
            .base_config
            .as_ref()
            .map(|b| serde_json::from_slice(b).expect("json"));
        assert_eq!(base, f.base_config, "{name}");
        // And through the files on disk, at JP's place.
        let out = tmp.path().join("out");
        let dir = files.dir_in(&out);
        write_jp_dir(&dir, &files, false).expect("write");
        assert_same_files(&dir, &files);
        assert_eq!(
            dir.parent()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n == ".archive"),
            f.dir
                .parent()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n == ".archive"),
            "{name}: archived ones under .archive/"
        );
    }
}

#[test]
fn import_undoes_base64_where_jp_applies_it_and_stores_content_as_blobs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    fixtures(tmp.path());
    let store = store(tmp.path());
    let src = read_source(
        &tmp.path()
            .join(".jp/conversations/17738399468-separate-base-config"),
    )
    .expect("read");
    jpstore_engine::import::run(&store, vec![prepare(src)], false, &mut |_| {}).expect("import");
    let conv = store
        .read(&ConversationId::parse("17738399468").expect("id"))
        .expect("read");
    // The base config is a blob, and the config in effect after the delta
    // merges over it.
    let cfg = store.config_at(&conv, conv.entries.len()).expect("config");
    assert_eq!(cfg["assistant"]["model"]["id"], "m2");
    assert_eq!(cfg["assistant"]["name"], "jp");
    let plain = jpstore_engine::internal::export::conversation_json(
        &store,
        &conv,
        jpstore_engine::export::ContentMode::Inline,
    )
    .expect("json");
    let events = plain["events"].as_array().expect("events");
    let by_type = |t: &str| -> Vec<&Value> { events.iter().filter(|e| e["type"] == t).collect() };
    let responses = by_type("tool_call_response");
    assert_eq!(responses[0]["content"], "fn main() {}\n");
    assert_eq!(
        responses[1]["content"], "plain text JP never encoded",
        "not base64: kept"
    );
    let requests = by_type("tool_call_request");
    assert_eq!(requests[0]["arguments"]["path"], "src/lib.rs");
    assert_eq!(
        requests[0]["arguments"]["opts"]["raw"],
        "not base64 at all!"
    );
    assert_eq!(
        requests[0]["arguments"]["opts"]["bin"], "//79",
        "not UTF-8 once decoded: kept"
    );
    let reasoning = &by_type("chat_response")[0];
    assert_eq!(
        reasoning["metadata"]["anthropic"]["signature"],
        Value::String(signature()),
        "decoded once: the signature's own base64 is intact"
    );
    // Content is in the blob store, referenced from the log.
    let first_response = conv
        .entries
        .iter()
        .find_map(|e| match e.event().map(|e| &e.kind) {
            Some(EventKind::ToolCallResponse(r)) => Some(r),
            _ => None,
        })
        .expect("a response");
    let Block::Text(t) = &first_response.content[0] else {
        panic!("a text block")
    };
    assert_eq!(
        store.blobs().get(&t.text.id).expect("blob"),
        b"fn main() {}\n"
    );
    // The entries that do not fit the model are kept verbatim.
    let unknown = conv
        .entries
        .iter()
        .filter(|e| matches!(e, Entry::Unknown(_)))
        .count();
    assert_eq!(unknown, 2);
    // Turns: the request before the first turn_start is turn 0; the empty
    // turn (two turn_starts in a row) does not open another.
    assert_eq!(conv.state.turns(), 3);
}

#[test]
fn bad_files_are_named_and_the_others_still_import() {
    let tmp = tempfile::tempdir().expect("tempdir");
    fixtures(tmp.path());
    let conv = tmp.path().join(".jp/conversations");
    let broken = conv.join("17738399471-broken");
    std::fs::create_dir_all(&broken).expect("mkdir");
    std::fs::write(broken.join("events.json"), "[{\"type\": \"turn_start\",").expect("write");
    let not_array = conv.join("17738399472-object");
    write(&not_array, "events.json", &json!({"type": "turn_start"}));
    let bad_id = conv.join("not-an-id!-x");
    write(&bad_id, "events.json", &json!([]));
    let store = store(tmp.path());
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    for s in find_sources(tmp.path()).expect("find") {
        match read_source(&s) {
            Ok(src) => ok.push(prepare(src)),
            Err(e) => errors.push(e),
        }
    }
    let ids: Vec<String> = ok.iter().map(|p| p.id.to_string()).collect();
    assert_eq!(ok.len(), 3, "{ids:?} {errors:?}");
    assert_eq!(errors.len(), 3, "{errors:?}");
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("17738399471-broken/events.json") && m.contains("line 1")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("expected a JSON array")),
        "{messages:?}"
    );
    assert!(
        messages.iter().all(|m| m.contains("not valid JP data")),
        "{messages:?}"
    );
    assert!(errors
        .iter()
        .all(|e| matches!(e, JpImportError::NotJp { .. })));
    let (results, _) = jpstore_engine::import::run(&store, ok, false, &mut |_| {}).expect("import");
    assert_eq!(results.len(), 3);
}

#[test]
fn existing_conversations_are_skipped_unless_forced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    fixtures(tmp.path());
    let store = store(tmp.path());
    let dir = tmp.path().join(".jp/conversations/17738399469-first-delta");
    let prep = || vec![prepare(read_source(&dir).expect("read"))];
    jpstore_engine::import::run(&store, prep(), false, &mut |_| {}).expect("import");
    let id = ConversationId::parse("17738399469").expect("id");
    // Append to it, then import again.
    {
        let mut w = store.writer(&id).expect("writer");
        let entries = jpstore_engine::internal::event::input::parse_input(
            "{\"type\":\"turn_start\"}",
            jpstore_engine::internal::event::json::ParseMode::Strict {
                now: jpstore_engine::timestamp::Timestamp::now(),
            },
        )
        .expect("input")
        .entries;
        w.append(entries).expect("append");
    }
    let before = store.read(&id).expect("read").entries.len();
    let (r, _) = jpstore_engine::import::run(&store, prep(), false, &mut |_| {}).expect("import");
    assert!(matches!(r[0], Imported::Skipped { .. }));
    assert_eq!(store.read(&id).expect("read").entries.len(), before);
    let (r, _) = jpstore_engine::import::run(&store, prep(), true, &mut |_| {}).expect("import");
    assert!(matches!(r[0], Imported::Stored { replaced: true, .. }));
    assert_eq!(store.read(&id).expect("read").entries.len(), before - 1);
    assert_eq!(store.ids().expect("ids").len(), 1, "nothing left aside");
}

#[test]
fn native_conversations_export_to_jp_with_lossy_content_reported() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path());
    let mut w = store
        .create(jpstore_engine::NewConversation {
            id: Some(ConversationId::parse("42").expect("id")),
            title: Some("Native: résumé & co".into()),
            ..Default::default()
        })
        .expect("create");
    let entries = jpstore_engine::internal::event::input::parse_input(
        r#"{"type":"turn_start"}
{"type":"chat_request","content":"see","resources":[{"uri":"file:///a.rs","text":"fn a() {}"}]}
{"type":"tool_call_request","id":"c","name":"fs_read_file","arguments":{"path":"a.rs"}}
{"type":"tool_call_response","id":"c","content":[{"type":"text","text":"one"},{"type":"resource","resource":{"uri":"file:///b.rs","text":"two"}}]}"#,
        jpstore_engine::internal::event::json::ParseMode::Strict {
            now: jpstore_engine::timestamp::Timestamp::now(),
        },
    )
    .expect("input")
    .entries;
    w.append(entries).expect("append");
    drop(w);
    let conv = store
        .read(&ConversationId::parse("42").expect("id"))
        .expect("read");
    let files = jp_files(&store, &conv).expect("export");
    assert_values_are_the_export(&store, &conv.id);
    assert_eq!(files.dir_name, "42-native-r-sum-co");
    assert!(!files.archived);
    assert_eq!(files.lossy.len(), 2, "{:?}", files.lossy);
    let events: Value = serde_json::from_slice(&files.events).expect("json");
    let metadata: Value = serde_json::from_slice(&files.metadata).expect("json");
    let base: Option<Value> = files
        .base_config
        .as_ref()
        .map(|b| serde_json::from_slice(b).expect("json"));
    // JP's layout: two spaces, a final line break, jp-store's key order.
    assert_eq!(
        files.events,
        format!("{}\n", serde_json::to_string_pretty(&events).expect("json")).into_bytes()
    );
    assert!(files
        .events
        .starts_with(b"[\n  {\n    \"type\": \"turn_start\",\n    \"timestamp\""));
    let events = events.as_array().expect("array");
    assert_eq!(events[1]["content"], "see\n\nfile:///a.rs:\nfn a() {}");
    assert_eq!(events[2]["arguments"]["path"], encode("a.rs"));
    assert_eq!(events[3]["content"], encode("one\n\nfile:///b.rs:\ntwo"));
    assert_eq!(metadata["title"], "Native: résumé & co");
    assert!(metadata.get("last_activated_at").is_some());
    assert!(metadata.get("created").is_none());
    assert_eq!(base, Some(json!({})));
    assert_eq!(slug("  Hello, World!  "), "hello-world");
}

#[test]
fn an_undo_before_its_compaction_is_imported_verbatim_and_revokes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(".jp/conversations/17738399471");
    let events = json!([
        {"type": "turn_start", "timestamp": "2026-05-29 19:40:00.0"},
        {"type": "chat_request", "timestamp": "2026-05-29 19:40:00.1", "content": "hi"},
        {"type": "compaction_undo", "timestamp": "2026-05-29 19:40:00.2", "undoes": 0},
        {"type": "compaction", "timestamp": "2026-05-29 19:40:00.3", "from_turn": 0, "to_turn": 0,
         "reasoning": "strip"},
    ]);
    write(&dir, "events.json", &events);
    write(&dir, "metadata.json", &json!({}));
    let store = store(tmp.path());
    let prepared = find_sources(tmp.path())
        .expect("find")
        .iter()
        .map(|s| read_source(s).map(prepare))
        .collect::<Result<Vec<_>, _>>()
        .expect("read");
    jpstore_engine::import::run(&store, prepared, false, &mut |_| {}).expect("import");
    let id = ConversationId::parse("17738399471").expect("id");
    let conv = store.read(&id).expect("read");
    let kinds: Vec<&str> = conv
        .entries
        .iter()
        .map(|e| match e {
            Entry::Unknown(_) => "unknown",
            Entry::Event(ev) => match ev.kind {
                EventKind::CompactionUndo(_) => "undo",
                EventKind::Compaction(_) => "compaction",
                _ => "other",
            },
        })
        .collect();
    assert_eq!(kinds, ["other", "other", "unknown", "compaction"]);
    // The compaction is in effect, and fsck finds nothing wrong.
    assert_eq!(
        jpstore_engine::internal::compaction::active_compactions(&conv.entries).len(),
        1
    );
    let report = jpstore_engine::fsck::run(
        &store,
        jpstore_engine::fsck::FsckOptions::default(),
        &mut |_| {},
    )
    .expect("fsck");
    assert!(report.is_clean(), "{:?}", report.findings);
    // And the file comes back as it was.
    let files = jp_files(&store, &conv).expect("export");
    assert_same_files(&dir, &files);
    let back: Value = serde_json::from_slice(&files.events).expect("json");
    assert_eq!(back, events);
}

#[test]
fn a_jp_file_with_a_key_twice_is_refused_naming_the_file_and_the_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(".jp/conversations/17738399472");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("events.json"),
        "[\n  {\"type\": \"turn_start\", \"timestamp\": \"2026-05-29 19:40:00.0\"},\n  \
         {\"type\": \"chat_request\", \"timestamp\": \"2026-05-29 19:40:00.1\",\n   \
         \"content\": \"a\", \"content\": \"b\"}\n]\n",
    )
    .expect("write");
    write(&dir, "metadata.json", &json!({}));
    let sources = find_sources(tmp.path()).expect("find");
    let e = read_source(&sources[0])
        .expect_err("a duplicate key")
        .to_string();
    assert!(
        e.contains(&dir.join("events.json").display().to_string())
            && e.contains("[1].content")
            && e.contains("duplicate key")
            && e.contains("line 4"),
        "{e}"
    );
}

// ----- the committed fixtures and the sample, byte for byte ------------------

/// The conversation directories of a workspace, relative to its
/// `.jp/conversations`.
fn conversation_dirs(root: &Path) -> Vec<PathBuf> {
    let base = root.join(".jp").join("conversations");
    find_sources(root)
        .expect("find")
        .into_iter()
        .map(|d| d.strip_prefix(&base).expect("below").to_path_buf())
        .collect()
}

#[test]
fn every_fixture_comes_back_byte_for_byte() {
    let root = super::fixtures::workspace();
    let dirs = conversation_dirs(&root);
    assert!(dirs.len() >= 30, "the fixture workspace is there: {dirs:?}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path());
    let kept = import_all(&store, &root);
    for (dir, kept) in &kept {
        let name = dir.file_name().and_then(|n| n.to_str()).expect("name");
        // Files as JP writes them cost nothing beside their values; the
        // hand-edited ones only what differs (a few bytes each here). A
        // `null` in metadata.json is kept as text: metadata fields are a
        // merge patch, in which `null` removes a key.
        if name.contains("-hand-") {
            assert!(*kept < 2048, "{name}: {kept} bytes kept");
        } else if name.ends_with("-metadata-json-order") {
            assert!(*kept > 0 && *kept < 64, "{name}: {kept} bytes kept");
        } else {
            assert_eq!(*kept, 0, "{name}");
        }
        let files = export(&store, &id_of(dir));
        assert!(files.lossy.is_empty(), "{name}: {:?}", files.lossy);
        assert_same_files(dir, &files);
        // The values JP loads, taken from the entries, are the files'.
        assert_values_are_the_files_of(&store, &id_of(dir), dir);
        // And through an NDJSON stream into another store.
        assert_same_files(dir, &through_a_stream(&store, &id_of(dir), tmp.path()));
    }
    // Through the files on disk: the exported tree is the fixture tree.
    let out = tmp.path().join("conversations");
    for (dir, _) in &kept {
        let files = export(&store, &id_of(dir));
        write_jp_dir(&files.dir_in(&out), &files, false).expect("write");
    }
    let exported: Vec<PathBuf> = find_sources(&out)
        .expect("find")
        .into_iter()
        .map(|d| d.strip_prefix(&out).expect("below").to_path_buf())
        .collect();
    assert_eq!(exported, dirs);
    for rel in &dirs {
        let a = dir_files(&root.join(".jp/conversations").join(rel));
        let b = dir_files(&out.join(rel));
        assert!(a == b, "{}", rel.display());
    }
}

#[test]
fn the_hand_edited_fixtures_keep_only_what_differs() {
    let root = super::fixtures::workspace();
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path());
    let kept: std::collections::BTreeMap<String, usize> = import_all(&store, &root)
        .into_iter()
        .map(|(d, k)| {
            (
                d.file_name().expect("name").to_string_lossy().into_owned(),
                k,
            )
        })
        .collect();
    let of = |suffix: &str| -> usize {
        *kept
            .iter()
            .find(|(name, _)| name.ends_with(suffix))
            .unwrap_or_else(|| panic!("{suffix}"))
            .1
    };
    // A layout of its own costs nothing beside the layout.
    for layout_only in [
        "four-space-indent",
        "tabs-crlf",
        "compact-one-line",
        "no-final-newline",
    ] {
        assert!(of(layout_only) < 16, "{layout_only}: {}", of(layout_only));
    }
    // The number forms of base_config.json live in its blob, not in edits.
    let conv = store
        .read(&ConversationId::parse("17738399420").expect("id"))
        .expect("read");
    let info = super::JpInfo::from_metadata(&conv.state.metadata.fields)
        .expect("info")
        .expect("imported");
    assert!(info.base_config_text.is_plain(), "{info:?}");
    assert_eq!(info.key_order, super::KeyOrder::TimestampFirst);
    assert!(info.type_keys.is_empty() && info.entry_keys.is_empty());
    // An absent `arguments` is one edit, not a key order of its own.
    let info_of = |id: &str| {
        let conv = store
            .read(&ConversationId::parse(id).expect("id"))
            .expect("read");
        super::JpInfo::from_metadata(&conv.state.metadata.fields)
            .expect("info")
            .expect("imported")
    };
    let absent = info_of("17738399424");
    assert!(absent.entry_keys.is_empty(), "{absent:?}");
    assert_eq!(absent.events_text.fixes.len(), 1, "{absent:?}");
    // Entries in an order of their own: one list each.
    assert_eq!(info_of("17738399427").entry_keys.len(), 2);
    let base = store.base_config(&conv).expect("base");
    assert_eq!(base["assistant"]["model"]["parameters"]["temperature"], 0.7);
    let blob = store
        .blobs()
        .get(&conv.state.metadata.base_config.expect("a base config").id)
        .expect("blob");
    assert!(String::from_utf8_lossy(&blob).contains("\"temperature\":7e-1,"));
}

#[test]
fn the_shipped_sample_comes_back_byte_for_byte() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/samples/jp-workspace");
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path());
    let kept = import_all(&store, &root);
    assert_eq!(kept.len(), 1);
    for (dir, kept) in &kept {
        assert_eq!(*kept, 0);
        let files = export(&store, &id_of(dir));
        assert!(files.lossy.is_empty(), "{:?}", files.lossy);
        assert_same_files(dir, &files);
    }
}

#[test]
fn import_export_import_export_is_stable() {
    let root = super::fixtures::workspace();
    let tmp = tempfile::tempdir().expect("tempdir");
    let first = Store::init_dir(&tmp.path().join("s1"), StoreOptions::default()).expect("init");
    let dirs = import_all(&first, &root);
    let out1 = tmp.path().join("out1/.jp/conversations");
    for (dir, _) in &dirs {
        let files = export(&first, &id_of(dir));
        write_jp_dir(&files.dir_in(&out1), &files, false).expect("write");
    }
    let second = Store::init_dir(&tmp.path().join("s2"), StoreOptions::default()).expect("init");
    let again = import_all(&second, &tmp.path().join("out1"));
    assert_eq!(again.len(), dirs.len());
    for ((dir, kept), (_, kept_again)) in dirs.iter().zip(&again) {
        assert_eq!(kept, kept_again, "{}", dir.display());
        let a = export(&first, &id_of(dir));
        let b = export(&second, &id_of(dir));
        assert_eq!(exported_files(&a), exported_files(&b), "{}", dir.display());
        assert_eq!(
            second
                .read(&id_of(dir))
                .expect("read")
                .state
                .metadata
                .fields,
            first.read(&id_of(dir)).expect("read").state.metadata.fields,
            "the same record of the same files"
        );
    }
}

/// Appends a JSON Lines batch to a conversation.
fn append(store: &Store, id: &ConversationId, lines: &str) {
    let entries = jpstore_engine::internal::event::input::parse_input(
        lines,
        jpstore_engine::internal::event::json::ParseMode::Strict {
            now: jpstore_engine::timestamp::Timestamp::from_unix(1_780_100_000, 500_000_000)
                .expect("time"),
        },
    )
    .expect("input")
    .entries;
    store
        .writer(id)
        .expect("writer")
        .append(entries)
        .expect("append");
}

#[test]
fn entries_appended_after_import_take_the_files_layout_and_old_ones_keep_their_bytes() {
    let root = super::fixtures::workspace();
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path());
    import_all(&store, &root);
    for (name, order_of_request) in [
        // JP's order: `timestamp` first.
        (
            "17738399401-base-config-file",
            "[\"timestamp\",\"type\",\"content\"]",
        ),
        // A type whose events were written in their own order keeps it.
        (
            "17738399409-field-order-per-type",
            "[\"timestamp\",\"type\",\"content\"]",
        ),
        // Hand-edited: 4 spaces and no final line break.
        (
            "17738399418-hand-four-space-indent",
            "[\"timestamp\",\"type\",\"content\"]",
        ),
        (
            "17738399419-hand-no-final-newline",
            "[\"timestamp\",\"type\",\"content\"]",
        ),
    ] {
        let dir = root.join(".jp/conversations").join(name);
        let id = id_of(&dir);
        let original = std::fs::read_to_string(dir.join("events.json")).expect("read");
        append(
            &store,
            &id,
            "{\"type\":\"turn_start\"}\n{\"type\":\"chat_request\",\"content\":\"more\"}\n\
             {\"type\":\"chat_response\",\"message\":\"yes\",\"metadata\":{\"k\":\"v\"}}",
        );
        let files = export(&store, &id);
        assert!(files.lossy.is_empty(), "{:?}", files.lossy);
        assert_values_are_the_export(&store, &id);
        let events = String::from_utf8(files.events.clone()).expect("utf-8");
        // Everything before the last entry's end is as it was.
        let last_end = original.rfind('}').expect("an entry") + 1;
        assert!(
            events.starts_with(&original[..last_end]),
            "{name}: {}",
            first_difference(original.as_bytes(), events.as_bytes())
        );
        // The new entries are in the file's layout and key order.
        let shape = super::text::Shape::detect(&original);
        let value: Value = serde_json::from_str(&events).expect("json");
        let items = value.as_array().expect("array");
        let request = &items[items.len() - 2];
        let keys: Vec<&String> = request.as_object().expect("object").keys().collect();
        assert_eq!(
            serde_json::to_string(&keys).expect("json"),
            order_of_request,
            "{name}"
        );
        let unit = shape.indent.clone().expect("pretty");
        assert!(
            events.contains(&format!(
                "{nl}{unit}{unit}\"timestamp\": \"2026-05-30 ",
                nl = shape.newline()
            )),
            "{name}: {events}"
        );
        // JP's base64 on the new metadata.
        assert_eq!(items[items.len() - 1]["metadata"]["k"], encode("v"));
        assert_eq!(
            events.ends_with('\n'),
            original.ends_with('\n'),
            "{name}: the final line break as the file had it"
        );
    }
}

#[test]
fn a_compaction_undone_after_import_is_left_out_and_said() {
    let root = super::fixtures::workspace();
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path());
    import_all(&store, &root);
    let dir = root.join(".jp/conversations/17738399406-every-entry-type");
    let id = id_of(&dir);
    let original = dir_files(&dir);
    append(&store, &id, "{\"type\":\"compaction_undo\",\"undoes\":1}");
    assert_values_are_the_export(&store, &id);
    let files = export(&store, &id);
    assert_eq!(files.lossy.len(), 1, "{:?}", files.lossy);
    let events: Value = serde_json::from_slice(&files.events).expect("json");
    let before: Value = serde_json::from_slice(&original[1].1).expect("json");
    let mut expected = before.as_array().expect("array").clone();
    expected.remove(20);
    assert_eq!(events, Value::Array(expected));
    // The other entries keep their bytes.
    let text = String::from_utf8(files.events).expect("utf-8");
    let original_text = String::from_utf8(original[1].1.clone()).expect("utf-8");
    let cut = original_text
        .find("    \"from_turn\": 0,\n    \"to_turn\": 1")
        .expect("compaction");
    assert!(text.starts_with(&original_text[..cut - 120]));
}

#[test]
fn a_file_beyond_what_import_keeps_is_reported_and_exports_equal_as_json() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(".jp/conversations/17738399490-big-python");
    std::fs::create_dir_all(&dir).expect("mkdir");
    // One line with `", "` and `": "` (Python's `json.dumps`): every entry
    // differs from serde_json's text, and there are many.
    let entries: Vec<String> = (0..4000)
        .map(|i| {
            format!(
                "{{\"timestamp\": \"2026-05-29 19:40:{:02}.{i}1\", \"type\": \"chat_request\", \"content\": \"message {i} {}\"}}",
                i % 60,
                "x".repeat(60)
            )
        })
        .collect();
    let text = format!("[{}]", entries.join(", "));
    std::fs::write(dir.join("events.json"), &text).expect("write");
    std::fs::write(dir.join("metadata.json"), "{\"title\": \"big\"}").expect("write");
    let (prepared, check) = prepare_checked(read_source(&dir).expect("read"));
    let ByteCheck::NotIdentical { reason } = check else {
        panic!("{check:?}")
    };
    assert!(reason.contains(&MAX_KEPT_TEXT.to_string()), "{reason}");
    let store = store(tmp.path());
    jpstore_engine::import::run(&store, vec![prepared], false, &mut |_| {}).expect("import");
    let files = export(&store, &id_of(&dir));
    let back: Value = serde_json::from_slice(&files.events).expect("json");
    let original: Value = serde_json::from_str(&text).expect("json");
    assert!(back == original, "equal as JSON");
    assert!(
        files.events.starts_with(b"[{\"timestamp\":"),
        "compact, as the file was"
    );
    // The report of the whole import names it.
    let report = super::import::import_paths(
        &Store::init_dir(&tmp.path().join("s2"), StoreOptions::default()).expect("init"),
        std::slice::from_ref(&dir),
        false,
        &mut |_| {},
    )
    .expect("import");
    assert_eq!(report.imported, 1);
    assert_eq!(report.not_byte_identical.len(), 1);
    assert_eq!(report.not_byte_identical[0].path, dir);
}

/// A file indented deeper than export writes a unit
/// ([`super::text::MAX_INDENT`]): import takes JP's layout for it and
/// keeps the rest as edits, so it still comes back byte for byte, and its
/// export is not refused.
#[test]
fn a_file_indented_beyond_what_export_writes_still_comes_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(".jp/conversations/17738399492-deep");
    let unit = " ".repeat(super::text::MAX_INDENT + 1);
    let events = json!([{"timestamp": "2026-05-29 19:40:00.1", "type": "turn_start"},
                        {"timestamp": "2026-05-29 19:40:00.2", "type": "chat_request", "content": "deep"}]);
    let mut text = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut text, fmt);
    serde::Serialize::serialize(&events, &mut ser).expect("serialize");
    text.push(b'\n');
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("events.json"), &text).expect("write");
    std::fs::write(dir.join("metadata.json"), "{}\n").expect("write");
    let (prepared, check) = prepare_checked(read_source(&dir).expect("read"));
    assert!(matches!(check, ByteCheck::Identical { .. }), "{check:?}");
    let info = super::JpInfo::from_metadata(&prepared.fields)
        .expect("reads")
        .expect("jp");
    assert_eq!(info.events_text.indent, None, "JP's layout, not the unit");
    let store = store(tmp.path());
    jpstore_engine::import::run(&store, vec![prepared], false, &mut |_| {}).expect("import");
    assert_same_files(&dir, &export(&store, &id_of(&dir)));
}

#[test]
fn a_jp_key_in_metadata_json_is_kept_beside_the_imports_own() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(".jp/conversations/17738399491");
    write(&dir, "events.json", &json!([]));
    let text = "{\n  \"title\": \"t\",\n  \"jp\": {\"mine\": 1},\n  \"last_activated_at\": \"2026-05-29 19:40:00.0\"\n}\n";
    std::fs::write(dir.join("metadata.json"), text).expect("write");
    let store = store(tmp.path());
    import_all(&store, tmp.path());
    let files = export(&store, &id_of(&dir));
    assert_same_files(&dir, &files);
}

#[test]
fn an_info_stored_by_an_earlier_build_still_exports() {
    // Earlier builds stored the legacy first entry without its `delta`
    // (export writes it last) and nothing of the text.
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path());
    let id = ConversationId::parse("17738399492").expect("id");
    let mut fields = Map::new();
    fields.insert(
        "jp".into(),
        json!({"dir": "17738399492-old", "layout": "first_config_delta",
               "first_entry": {"type": "config_delta", "timestamp": "2026-05-29 19:39:00.5"},
               "created_added": true}),
    );
    fields.insert("created".into(), json!("2026-05-29 19:39:00.0"));
    let prepared = jpstore_engine::import::Prepared {
        id: id.clone(),
        fields,
        base_config: Some(json!({"b": 1, "a": 2}).as_object().expect("object").clone()),
        base_config_text: None,
        entries: Vec::new(),
        source_bytes: 0,
    };
    jpstore_engine::import::run(&store, vec![prepared], false, &mut |_| {}).expect("import");
    assert_values_are_the_export(&store, &id);
    let files = export(&store, &id);
    assert_eq!(
        String::from_utf8(files.events).expect("utf-8"),
        "[\n  {\n    \"type\": \"config_delta\",\n    \"timestamp\": \"2026-05-29 19:39:00.5\",\n    \"delta\": {\n      \"a\": 2,\n      \"b\": 1\n    }\n  }\n]\n",
        "canonical bytes: sorted, as such a store kept them"
    );
    assert_eq!(files.metadata, b"{}\n");
}

#[test]
fn a_jp_field_this_build_cannot_read_is_an_error_naming_the_conversation() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path());
    let id = ConversationId::parse("17738399493").expect("id");
    let mut fields = Map::new();
    fields.insert(
        "jp".into(),
        json!({"dir": "x", "layout": "none", "from_the_future": 1}),
    );
    let prepared = jpstore_engine::import::Prepared {
        id: id.clone(),
        fields,
        base_config: None,
        base_config_text: None,
        entries: Vec::new(),
        source_bytes: 0,
    };
    jpstore_engine::import::run(&store, vec![prepared], false, &mut |_| {}).expect("import");
    let conv = store.read(&id).expect("read");
    let e = jp_files(&store, &conv).expect_err("unreadable");
    assert!(matches!(e, JpExportError::Info { .. }), "{e:?}");
    let message = e.to_string();
    assert!(
        message.contains("17738399493")
            && message.contains("from_the_future")
            && message.contains("log"),
        "{message}"
    );
}

#[test]
fn a_rendering_that_changed_since_import_is_reported_not_edited_blindly() {
    use super::render::{assemble, Element, FileKind};
    use super::{Edit, FileText, Fix};
    let mut file = FileText::default();
    file.fixes.insert(
        "3".into(),
        Fix(
            crc32fast::hash(b"{\"a\": 1}"),
            vec![Edit(6, 1, "1e0".into())],
        ),
    );
    let mut lossy = Vec::new();
    let element = |text: &str| Element {
        key: "3".into(),
        text: text.into(),
    };
    let fixed = assemble(
        &[element("{\"a\": 1}")],
        &file,
        FileKind::Array,
        "events.json",
        &mut lossy,
    );
    assert_eq!(fixed, "[\n  {\"a\": 1e0}\n]\n");
    assert!(lossy.is_empty());
    let other = assemble(
        &[element("{\"a\": 2}")],
        &file,
        FileKind::Array,
        "events.json",
        &mut lossy,
    );
    assert_eq!(other, "[\n  {\"a\": 2}\n]\n");
    assert_eq!(lossy.len(), 1, "{lossy:?}");
    assert!(lossy[0].contains("events.json") && lossy[0].contains("`3`"));
}

/// The values JP loads, taken from the entries, follow the text import kept
/// of an entry (read as that text, as JP reads the file), use the
/// rendering where that text no longer applies (as export writes it), and
/// are refused where JP's loader would refuse the file export writes (a key
/// twice, two values where one was): always what JP reads from the export.
#[test]
fn values_follow_the_kept_text_of_an_entry_as_the_export_does() {
    use super::render::{entry_element, jp_value};
    use super::text::diff;
    use super::{Fix, JpInfo};
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(".jp/conversations/17738399494-kept-text");
    write_conversation(
        &dir,
        "[\n  {\n    \"timestamp\": \"2026-05-29 19:40:00.0\",\n    \"type\": \"turn_start\"\n  },\n  \
         {\n    \"timestamp\": \"2026-05-29 19:40:00.1\",\n    \"type\": \"chat_request\",\n    \
         \"content\": \"hi\",\n    \"n\": 2\n  }\n]\n",
        "{\n  \"title\": \"Kept text\"\n}\n",
        Some("{\n  \"a\": 1\n}\n"),
    );
    let store = store(tmp.path());
    import_all(&store, tmp.path());
    let id = id_of(&dir);
    assert_values_are_the_files_of(&store, &id, &dir);
    let conv = store.read(&id).expect("read");
    let info = JpInfo::from_metadata(&conv.state.metadata.fields)
        .expect("info")
        .expect("a JP import");
    let value = jp_value(
        &conv.entries[1],
        1,
        &info,
        &mut |_, _| -> Result<Value, ()> { panic!("no content") },
        &mut Vec::new(),
    )
    .expect("value");
    let rendered = entry_element(&conv.entries[1], 1, value, &info, &info.events_text.shape()).text;
    // Entry 1's text as `fix` makes it (with `crc` its rendering's, or not).
    let with_text = |edited: &str, crc_holds: bool| {
        let mut info = info.clone();
        let crc = crc32fast::hash(rendered.as_bytes()) ^ u32::from(!crc_holds);
        info.events_text
            .fixes
            .insert("1".into(), Fix(crc, diff(&rendered, edited)));
        let mut fields = Map::new();
        fields.insert(super::JP_FIELD.into(), info.to_value());
        store
            .writer(&id)
            .expect("writer")
            .set_metadata(jpstore_engine::conversation::MetaPatch {
                base_config: None,
                fields,
            })
            .expect("metadata");
        let conv = store.read(&id).expect("read");
        (
            jp_files(&store, &conv),
            jp_values(&store, &conv, Base64::Always),
        )
    };
    // Other number forms and escapes: read as the file holds them.
    let edited = rendered
        .replace("\"hi\"", "\"h\\u0069\"")
        .replace("\"n\": 2", "\"n\": 2.0e0");
    let (files, values) = with_text(&edited, true);
    let (files, values) = (files.expect("files"), values.expect("values"));
    assert_eq!(
        values,
        loaded_values(&files.events, files.base_config.as_deref())
    );
    assert_eq!(values.events[1]["content"], "hi");
    assert_eq!(
        values.events[1]["n"],
        json!(2.0),
        "a float, as JP reads 2.0e0"
    );
    // A rendering that changed since: the entry as rendered.
    let (files, values) = with_text(&edited, false);
    let (files, values) = (files.expect("files"), values.expect("values"));
    assert_eq!(
        values,
        loaded_values(&files.events, files.base_config.as_deref())
    );
    assert_eq!(values.events[1]["n"], json!(2));
    // Text JP's loader refuses: a key twice, two values in one.
    for bad in [
        rendered.replace("\"n\": 2", "\"n\": 2, \"n\": 3"),
        format!("{rendered}, {{\"type\": \"turn_start\"}}"),
    ] {
        let (files, values) = with_text(&bad, true);
        assert!(
            matches!(files, Err(JpExportError::NotJson { .. })),
            "{files:?}"
        );
        match values {
            Err(e @ JpExportError::NotJson { .. }) => {
                assert!(e.to_string().contains("17738399494"), "{e}")
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
}

/// A long conversation's values are taken on several threads, in runs of
/// entries: still in order, an entry's kept text where it is.
#[test]
fn the_values_of_a_long_conversation_are_the_files_in_order() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(".jp/conversations/17738399495-long");
    let mut events = Vec::new();
    for t in 0..150 {
        let ts = |n: u32| format!("2026-05-29 19:{:02}:{:02}.{n}", t / 60, t % 60);
        events.push(json!({"timestamp": ts(0), "type": "turn_start"}));
        events.push(
            json!({"timestamp": ts(1), "type": "chat_request", "content": format!("question {t}")}),
        );
        events.push(
            json!({"timestamp": ts(2), "type": "tool_call_request", "id": format!("toolu_{t}"),
            "name": "fs_read_file", "arguments": {"path": b64(&format!("src/{t}.rs")), "line": t}}),
        );
        events.push(
            json!({"timestamp": ts(3), "type": "tool_call_response", "id": format!("toolu_{t}"),
            "content": b64(&format!("fn f{t}() {{}}\n")), "is_error": false}),
        );
        events.push(
            json!({"timestamp": ts(4), "type": "chat_response", "message": format!("answer {t}")}),
        );
    }
    let text = serde_json::to_string_pretty(&Value::Array(events)).expect("json") + "\n";
    // Hand edits in the first run and in the last.
    let text = text
        .replacen("\"line\": 3\n", "\"line\": 3.0\n", 1)
        .replacen("\"line\": 140\n", "\"line\": 1.4e2\n", 1)
        .replacen("answer 149", "answer \\u0031\\u0034\\u0039", 1);
    write_conversation(&dir, &text, "{\n  \"title\": \"Long\"\n}\n", Some("{}\n"));
    let store = store(tmp.path());
    let kept = import_all(&store, tmp.path());
    assert!(
        kept.iter().all(|(_, k)| *k > 0),
        "the hand edits are kept: {kept:?}"
    );
    assert_values_are_the_files_of(&store, &id_of(&dir), &dir);
    let values = values(&store, &id_of(&dir));
    assert_eq!(values.events.len(), 750);
    assert_eq!(values.events[702]["arguments"]["line"], json!(140.0));
    assert_eq!(values.events[749]["message"], "answer 149");
}

// ----- generated conversations ---------------------------------------------------

/// Any JSON value (objects with their keys in any order).
pub(crate) fn json_value(depth: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,10}",
        "[a-zé日😀\u{2028}\"\\\\/\n\t\u{1}\u{7f} ]{0,12}",
        any::<String>(),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z_]{1,8}", "[a-z/~é\"]{1,4}"]
}

/// A string leaf as JP writes it: base64 of the text, or (raw) a text that
/// is not base64 of UTF-8.
fn leaf_text() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => text().prop_map(|t| Value::String(encode(&t))),
        1 => text().prop_map(|t| Value::String(format!("raw! {t}"))),
    ]
}

/// A value whose string leaves are JP's base64 (or raw).
fn encoded_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        Just(Value::Null),
        leaf_text(),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn encoded_object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((key(), encoded_value()), 0..3).prop_map(|kv| kv.into_iter().collect())
}

/// One entry's fields (without `timestamp` and `type`) and its type.
fn entry_fields() -> impl Strategy<Value = (String, Vec<(String, Value)>)> {
    let s = |k: &str, v: Value| (k.to_owned(), v);
    prop_oneof![
        Just(("turn_start".to_owned(), vec![])),
        (
            text(),
            prop::option::of(json_value(1)),
            prop::option::of(text())
        )
            .prop_map(move |(c, schema, author)| {
                let mut f = vec![s("content", c.into())];
                if let Some(Value::Object(o)) = schema {
                    f.push(s("schema", Value::Object(o)));
                }
                if let Some(a) = author {
                    f.push(s("author", a.into()));
                }
                ("chat_request".to_owned(), f)
            }),
        (0..3u8, text(), json_value(2)).prop_map(move |(k, t, d)| {
            let f = match k {
                0 => s("message", t.into()),
                1 => s("reasoning", t.into()),
                _ => s("data", d),
            };
            ("chat_response".to_owned(), vec![f])
        }),
        ("[a-z0-9_]{1,8}", "[a-z_]{1,8}", encoded_object()).prop_map(move |(id, name, args)| {
            (
                "tool_call_request".to_owned(),
                vec![
                    s("id", id.into()),
                    s("name", name.into()),
                    s("arguments", Value::Object(args)),
                ],
            )
        }),
        ("[a-z0-9_]{1,8}", leaf_text(), any::<bool>()).prop_map(move |(id, c, e)| {
            (
                "tool_call_response".to_owned(),
                vec![s("id", id.into()), s("content", c), s("is_error", e.into())],
            )
        }),
        ("[a-z0-9]{1,6}", text()).prop_map(move |(id, q)| {
            (
                "inquiry_request".to_owned(),
                vec![
                    s("id", id.into()),
                    s("source", json!({"source": "assistant"})),
                    s("question", json!({"text": q, "answer_type": "text"})),
                ],
            )
        }),
        ("[a-z0-9]{1,6}", json_value(1)).prop_map(move |(id, a)| {
            (
                "inquiry_response".to_owned(),
                vec![s("id", id.into()), s("answer", a)],
            )
        }),
        prop::collection::vec((key(), json_value(2)), 0..3).prop_map(move |kv| {
            (
                "config_delta".to_owned(),
                vec![s("delta", Value::Object(kv.into_iter().collect()))],
            )
        }),
        (0..3u64, 0..3u64, any::<bool>()).prop_map(move |(a, n, strip)| {
            let mut f = vec![s("from_turn", a.into()), s("to_turn", (a + n).into())];
            if strip {
                f.push(s("reasoning", "strip".into()));
            } else {
                f.push(s("summary", json!({"summary": "s"})));
            }
            ("compaction".to_owned(), f)
        }),
        ("[a-z]{3,8}", json_value(1))
            .prop_map(move |(t, v)| { (format!("x_{t}"), vec![s("payload", v)]) }),
    ]
}

/// A JP-shaped conversation: entries in a key order of its own per type
/// (as a deterministic serializer writes them), `timestamp` in JP's form,
/// metadata with JP's base64 on some; as serde_json's pretty text.
fn jp_conversation() -> impl Strategy<Value = String> {
    let entry = (
        entry_fields(),
        (0i64..4_000_000_000, 0u32..1_000_000_000),
        prop::option::of(encoded_object()),
    );
    (
        prop::collection::vec(entry, 0..12),
        prop::collection::vec(any::<prop::sample::Index>(), 12),
    )
        .prop_map(|(entries, shuffles)| {
            // One order of keys per type, as a deterministic serializer
            // has: each type ranks every key by a hash seeded per type and
            // conversation, so every event of a type follows the same order.
            let mut orders: std::collections::HashMap<String, usize> =
                std::collections::HashMap::new();
            let mut next = shuffles.into_iter().cycle();
            let values: Vec<Value> = entries
                .into_iter()
                .map(|((type_name, fields), (secs, nanos), metadata)| {
                    let ts = jpstore_engine::timestamp::Timestamp::from_unix(secs, nanos)
                        .expect("time")
                        .to_string();
                    let mut keys: Vec<(String, Value)> = vec![
                        ("timestamp".into(), ts.into()),
                        ("type".into(), type_name.clone().into()),
                    ];
                    keys.extend(fields);
                    if let Some(m) = metadata.filter(|m| !m.is_empty()) {
                        keys.push(("metadata".into(), Value::Object(m)));
                    }
                    let seed = *orders
                        .entry(type_name)
                        .or_insert_with(|| next.next().expect("cycle").index(1 << 20));
                    keys.sort_by_key(|(k, _)| crc32fast::hash(format!("{seed}{k}").as_bytes()));
                    Value::Object(keys.into_iter().collect())
                })
                .collect();
            let mut text = serde_json::to_string_pretty(&Value::Array(values)).expect("json");
            text.push('\n');
            text
        })
}

/// Whether a `null` is anywhere in `v`.
fn holds_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(items) => items.iter().any(holds_null),
        Value::Object(o) => o.values().any(holds_null),
        _ => false,
    }
}

/// Writes one conversation directory.
fn write_conversation(dir: &Path, events: &str, metadata: &str, base: Option<&str>) {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(dir.join("events.json"), events).expect("write");
    std::fs::write(dir.join("metadata.json"), metadata).expect("write");
    if let Some(b) = base {
        std::fs::write(dir.join("base_config.json"), b).expect("write");
    }
}

/// Edits a person might make to a JP file, each keeping it valid JSON.
#[derive(Debug, Clone)]
enum HandEdit {
    /// Re-indented with this unit.
    Indent(&'static str),
    /// The final line break removed.
    NoFinalNewline,
    /// The n-th ASCII letter inside a string written as `\u00XX`.
    Escape(prop::sample::Index),
    /// The n-th integer written with an exponent (`5` as `5e0`).
    Exponent(prop::sample::Index),
    /// Spaces added before the n-th comma.
    SpaceBeforeComma(prop::sample::Index),
}

fn hand_edit() -> impl Strategy<Value = HandEdit> {
    prop_oneof![
        prop_oneof![Just("    "), Just("\t"), Just(" ")].prop_map(HandEdit::Indent),
        Just(HandEdit::NoFinalNewline),
        any::<prop::sample::Index>().prop_map(HandEdit::Escape),
        any::<prop::sample::Index>().prop_map(HandEdit::Exponent),
        any::<prop::sample::Index>().prop_map(HandEdit::SpaceBeforeComma),
    ]
}

/// Positions of `f`'s matches outside or inside strings of a JSON text.
fn positions(text: &str, inside_strings: bool, f: impl Fn(&[u8], usize) -> bool) -> Vec<usize> {
    let b = text.as_bytes();
    let (mut out, mut in_string, mut i) = (Vec::new(), false, 0);
    while i < b.len() {
        if in_string && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == b'"' {
            in_string = !in_string;
        } else if in_string == inside_strings && f(b, i) {
            out.push(i);
        }
        i += 1;
    }
    out
}

fn apply_hand_edit(text: &str, edit: &HandEdit) -> String {
    match edit {
        HandEdit::Indent(unit) => {
            let v: Value = serde_json::from_str(text).expect("json");
            let mut buf = Vec::new();
            let fmt = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            serde::Serialize::serialize(&v, &mut ser).expect("serialize");
            String::from_utf8(buf).expect("utf-8") + "\n"
        }
        HandEdit::NoFinalNewline => text.trim_end_matches('\n').to_owned(),
        HandEdit::Escape(n) => {
            let at = positions(text, true, |b, i| b[i].is_ascii_alphabetic());
            if at.is_empty() {
                return text.to_owned();
            }
            let i = at[n.index(at.len())];
            format!(
                "{}\\u{:04x}{}",
                &text[..i],
                text.as_bytes()[i],
                &text[i + 1..]
            )
        }
        HandEdit::Exponent(n) => {
            // The last digit of an integer: a digit followed by a delimiter
            // and not part of a fraction or exponent.
            let at = positions(text, false, |b, i| {
                b[i].is_ascii_digit()
                    && matches!(b.get(i + 1), Some(b',' | b'\n' | b']' | b'}'))
                    && {
                        let start = b[..=i]
                            .iter()
                            .rposition(|c| !(c.is_ascii_digit() || *c == b'-'))
                            .map_or(0, |p| p + 1);
                        !matches!(
                            b.get(start.wrapping_sub(1)),
                            Some(b'.' | b'e' | b'E' | b'+')
                        )
                    }
            });
            if at.is_empty() {
                return text.to_owned();
            }
            let i = at[n.index(at.len())] + 1;
            format!("{}e0{}", &text[..i], &text[i..])
        }
        HandEdit::SpaceBeforeComma(n) => {
            let at = positions(text, false, |b, i| b[i] == b',');
            if at.is_empty() {
                return text.to_owned();
            }
            let i = at[n.index(at.len())];
            format!("{}  {}", &text[..i], &text[i..])
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Generated conversations in a key order of their own come back byte
    /// for byte through the store, and cost nothing beside their values.
    #[test]
    fn generated_jp_conversations_come_back_byte_for_byte(
        events in jp_conversation(),
        base in prop::option::of(prop::collection::vec((key(), json_value(2)), 0..4)),
        first_delta in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join(".jp/conversations/17738399480-generated");
        let base = base.map(|kv| Value::Object(kv.into_iter().collect()));
        // A base config as base_config.json, or as the first config_delta.
        let (events, base_text) = match (base, first_delta) {
            (Some(b), true) => {
                let mut v: Value = serde_json::from_str(&events).expect("json");
                if let Value::Array(items) = &mut v {
                    items.insert(0, json!({"timestamp": "2026-05-29 19:39:00.5",
                                           "type": "config_delta", "delta": b}));
                }
                (serde_json::to_string_pretty(&v).expect("json") + "\n", None)
            }
            (Some(b), false) => (events, Some(serde_json::to_string_pretty(&b).expect("json") + "\n")),
            (None, _) => (events, None),
        };
        let metadata = "{\n  \"title\": \"Generated\",\n  \"last_activated_at\": \"2026-05-29 19:40:00.0\"\n}\n";
        write_conversation(&dir, &events, metadata, base_text.as_deref());
        let (prepared, check) = prepare_checked(read_source(&dir).expect("read"));
        // Nothing is kept beside the values, except for a `null` in the
        // first entry of the legacy layout outside its delta: that entry
        // lives in the metadata fields, a merge patch, where `null` removes
        // a key, so the file's text of it is kept.
        let parsed: Value = serde_json::from_str(&events).expect("json");
        let null_in_first = parsed[0]["type"] == "config_delta"
            && parsed[0]["delta"].is_object()
            && parsed[0]
                .as_object()
                .is_some_and(|o| o.iter().any(|(k, v)| k != "delta" && holds_null(v)));
        match check {
            ByteCheck::Identical { kept } => prop_assert!(
                kept == 0 || null_in_first,
                "{} bytes kept", kept
            ),
            other => return Err(TestCaseError::fail(format!("{other:?}"))),
        }
        let store = store(tmp.path());
        jpstore_engine::import::run(&store, vec![prepared], false, &mut |_| {}).expect("import");
        let files = export(&store, &id_of(&dir));
        prop_assert!(files.lossy.is_empty(), "{:?}", files.lossy);
        let original = dir_files(&dir);
        let exported = exported_files(&files);
        prop_assert_eq!(original.len(), exported.len());
        assert_values_are_the_files_of(&store, &id_of(&dir), &dir);
        for ((name, a), (_, b)) in original.iter().zip(&exported) {
            prop_assert!(a == b, "{}: {}", name, first_difference(a, b));
        }
        // The same through an NDJSON stream into another store.
        let streamed = exported_files(&through_a_stream(&store, &id_of(&dir), tmp.path()));
        for ((name, a), (_, b)) in original.iter().zip(&streamed) {
            prop_assert!(a == b, "{} through a stream: {}", name, first_difference(a, b));
        }
    }

    /// The same, edited by hand: still byte for byte, keeping only what the
    /// edits changed.
    #[test]
    fn hand_edited_jp_conversations_come_back_byte_for_byte(
        events in jp_conversation(),
        edits in prop::collection::vec(hand_edit(), 1..4),
    ) {
        let mut text = events;
        for e in &edits {
            text = apply_hand_edit(&text, e);
        }
        prop_assume!(jpstore_engine::internal::json_text::parse(text.as_bytes()).is_ok());
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join(".jp/conversations/17738399481-edited");
        let metadata = apply_hand_edit("{\n  \"title\": \"T\",\n  \"n\": 1\n}\n", &edits[0]);
        write_conversation(&dir, &text, &metadata, None);
        let (prepared, check) = prepare_checked(read_source(&dir).expect("read"));
        let ByteCheck::Identical { kept } = check else {
            return Err(TestCaseError::fail(format!("{check:?}")));
        };
        prop_assert!(kept < 4096, "{} bytes kept", kept);
        let store = store(tmp.path());
        jpstore_engine::import::run(&store, vec![prepared], false, &mut |_| {}).expect("import");
        let files = export(&store, &id_of(&dir));
        let original = dir_files(&dir);
        let exported = exported_files(&files);
        for ((name, a), (_, b)) in original.iter().zip(&exported) {
            prop_assert!(a == b, "{}: {}", name, first_difference(a, b));
        }
        assert_values_are_the_files_of(&store, &id_of(&dir), &dir);
        let streamed = exported_files(&through_a_stream(&store, &id_of(&dir), tmp.path()));
        for ((name, a), (_, b)) in original.iter().zip(&streamed) {
            prop_assert!(a == b, "{} through a stream: {}", name, first_difference(a, b));
        }
    }
}

/// The files of the fixture workspace's conversations, as (events,
/// metadata, base config) bytes.
fn fixture_bytes() -> Vec<super::import::JpFileBytes> {
    let root = super::fixtures::workspace();
    find_sources(&root)
        .expect("find")
        .into_iter()
        .map(|d| super::import::JpFileBytes {
            events: std::fs::read(d.join("events.json")).expect("read"),
            metadata: std::fs::read(d.join("metadata.json")).ok(),
            base_config: std::fs::read(d.join("base_config.json")).ok(),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Fixture files with bytes replaced by JSON's own characters: import
    /// never panics, and whatever it calls byte-identical renders back (with
    /// no store) to exactly the bytes read.
    #[test]
    fn mutated_jp_files_come_back_whenever_import_says_so(
        which in any::<prop::sample::Index>(),
        file in 0..3usize,
        mutations in prop::collection::vec(
            (any::<prop::sample::Index>(), prop::sample::select(&b" \n\t\r,:\"\\0e-.{}[]u1E+"[..])),
            1..4,
        ),
    ) {
        let all = fixture_bytes();
        let mut files = all[which.index(all.len())].clone();
        let target = match file {
            0 => Some(&mut files.events),
            1 => files.metadata.as_mut(),
            _ => files.base_config.as_mut(),
        };
        if let Some(bytes) = target {
            for (at, byte) in &mutations {
                if !bytes.is_empty() {
                    let i = at.index(bytes.len());
                    bytes[i] = *byte;
                }
            }
        }
        let Ok(source) = super::import::source_from_bytes(Path::new("17738399400-m"), files.clone()) else {
            return Ok(());
        };
        let (prepared, check) = prepare_checked(source);
        if let ByteCheck::Identical { .. } = check {
            let out = super::export::prepared_files(&prepared).expect("renders");
            prop_assert!(out.events == files.events, "{}", first_difference(&files.events, &out.events));
            if let Some(m) = &files.metadata {
                prop_assert!(&out.metadata == m, "{}", first_difference(m, &out.metadata));
            }
            if let (Some(b), Some(o)) = (&files.base_config, &out.base_config) {
                prop_assert!(b == o, "{}", first_difference(b, o));
            }
        }
    }
}

/// The size of the files of `dir`.
fn bytes_below(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("list") {
        let e = e.expect("entry");
        let meta = e.metadata().expect("stat");
        total += if meta.is_dir() {
            bytes_below(&e.path())
        } else {
            meta.len()
        };
    }
    total
}

#[test]
fn the_import_compression_applies_to_the_logs_records_too() {
    use jpstore_blobstore::Compression;
    // A conversation whose record is large enough to be compressed: 400
    // turns of reasoning and messages in words drawn from a small
    // vocabulary (compressible, but not trivially).
    let words = [
        "the",
        "log",
        "record",
        "reads",
        "every",
        "entry",
        "head",
        "before",
        "its",
        "body",
        "writer",
        "syncs",
        "once",
        "and",
        "acknowledges",
        "what",
        "is",
        "durable",
    ];
    let mut seed = 7u64;
    let mut text = |n: usize| {
        (0..n)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                words[(seed >> 33) as usize % words.len()]
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut events = Vec::new();
    for t in 0..400 {
        let ts = format!("2026-05-29 19:{:02}:{:02}.0", t / 60 % 60, t % 60);
        events.push(json!({"type": "turn_start", "timestamp": ts}));
        events.push(json!({"type": "chat_request", "timestamp": ts, "content": text(20)}));
        events.push(json!({"type": "chat_response", "timestamp": ts, "reasoning": text(120)}));
        events.push(json!({"type": "chat_response", "timestamp": ts, "message": text(60)}));
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(".jp/conversations/17738399468-large");
    write(&dir, "events.json", &Value::Array(events));
    write(&dir, "metadata.json", &json!({"title": "large"}));
    let mut logs = Vec::new();
    for compression in [Compression::Fast, Compression::Max] {
        let mut options = StoreOptions::default();
        options.blobs.import_compression = compression;
        let root = tmp.path().join(compression.name());
        let store = Store::init_dir(&root, options).expect("init");
        let kept = import_all(&store, tmp.path());
        assert_eq!(kept.len(), 1);
        let files = export(&store, &id_of(&dir));
        assert_same_files(&dir, &files);
        logs.push(bytes_below(&root.join("conversations")));
    }
    // Level 19 against level 3, on the same record.
    assert!(
        logs[1] < logs[0] - logs[0] / 50,
        "max's logs ({} bytes) at least 2% smaller than fast's ({} bytes)",
        logs[1],
        logs[0]
    );
}

/// An entry of a known type that does not read as one (a hand-edited
/// timestamp, a field of the wrong type) is kept as written, so export
/// gives it back, but it is no event: the view leaves it out, and the
/// import says so, naming the entry and why; an entry of an unknown type,
/// and the flattened config of the oldest layout, are not named.
#[test]
fn entries_of_known_types_that_do_not_read_are_named_by_the_import() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join(".jp/conversations");
    let events = json!([
        {"type": "config_delta", "timestamp": "2026-05-29 19:39:00.0", "assistant": {"name": "jp"}},
        {"type": "turn_start", "timestamp": "2026-05-29 19:40:02.1"},
        {"type": "chat_request", "timestamp": "yesterday", "content": "why?"},
        {"type": "tool_call_request", "timestamp": "2026-05-29 19:40:03.0", "id": "t1", "name": "x", "arguments": {}},
        {"type": "tool_call_response", "timestamp": "2026-05-29 19:40:04.0", "id": "t1", "content": b64("ok"), "is_error": "no"},
        {"type": "some_future_event", "timestamp": "2026-05-29 19:40:05.0"},
        {"type": "chat_response", "timestamp": "2026-05-29 19:40:06.0", "message": "done"},
    ]);
    let bad = root.join("17738399481-bad");
    write(&bad, "events.json", &events);
    write(&bad, "metadata.json", &json!({"title": "bad"}));
    let good = root.join("17738399482-good");
    write(&good, "events.json", &json!([events[1], events[6]]));
    write(&good, "metadata.json", &json!({}));
    let store = Store::init_dir(&tmp.path().join("s"), StoreOptions::default()).expect("init");
    let report = super::import::import_paths(&store, &[root], false, &mut |_| {}).expect("import");
    assert_eq!(report.imported, 2);
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.not_in_view.len(), 1, "{:?}", report.not_in_view);
    let warning = &report.not_in_view[0];
    assert_eq!(warning.path, bad);
    for part in [
        "2 entries of known types",
        "entry 2 (`chat_request`): field `timestamp`: invalid timestamp \"yesterday\"",
        "entry 4 (`tool_call_response`): field `is_error`",
        "left out of the view",
    ] {
        assert!(
            warning.reason.contains(part),
            "{part:?} in {}",
            warning.reason
        );
    }
    assert!(
        !warning.reason.contains("entry 0") && !warning.reason.contains("some_future_event"),
        "{}",
        warning.reason
    );
    // As the warning says: both are in the log, neither in the view.
    let id = ConversationId::parse("17738399481").expect("id");
    let conv = store.read(&id).expect("read");
    assert_eq!(conv.entries.len(), 7, "every entry is kept");
    let view = store.open_view(&id).expect("view");
    let text = String::from_utf8(
        view.render(jpstore_engine::export::ContentMode::Refs)
            .expect("render"),
    )
    .expect("utf-8");
    assert!(
        !text.contains("yesterday") && !text.contains("\"no\""),
        "{text}"
    );
    // Export gives the file back as it was.
    let files = export(&store, &id);
    assert_eq!(
        files.events,
        std::fs::read(bad.join("events.json")).expect("read")
    );
}

/// `entries_written_by_jp` refuses an event JP could not read back from an
/// `events.json`, and only such an event: the limit is where `serde_json`
/// (JP's reader) stops reading the file.
#[test]
fn an_event_nested_deeper_than_jp_reads_back_is_not_appended() {
    let event = |depth: usize| {
        // The event object, its `metadata` object, then arrays.
        let inner = (0..depth - 2).fold(json!(1), |v, _| json!([v]));
        json!({"type": "chat_response", "timestamp": "2026-01-01T00:00:00Z",
            "reasoning": "r", "metadata": {"deep": inner}})
    };
    let max = super::import::JP_EVENT_DEPTH_MAX;
    for depth in [max - 1, max, max + 1, max + 2] {
        let e = event(depth);
        let file = serde_json::to_string(&vec![e.clone()]).expect("text");
        let jp_reads = serde_json::from_str::<Value>(&file).is_ok();
        assert_eq!(jp_reads, depth <= max, "depth {depth}");
        assert_eq!(
            super::import::entries_written_by_jp(&[e]).is_some(),
            jp_reads,
            "depth {depth}"
        );
    }
    // Far deeper (measured without walking it recursively; deeper still,
    // serde_json's own recursive drop of the test's value would overflow
    // a test thread's stack).
    let deep = (0..600).fold(json!(1), |v, _| json!([v]));
    assert!(super::import::entries_written_by_jp(&[json!({"type": "x", "v": deep})]).is_none());
}
