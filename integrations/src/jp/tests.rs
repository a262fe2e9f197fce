//! JP interop: fixtures written for these tests cover every quirk of
//! jp-format.md section 2 and the three config layouts; import then export
//! must give the same JSON values.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::base64::encode;
use super::export::{jp_files, slug, write_jp_dir};
use super::import::{find_sources, prepare, read_source, Imported};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Error;
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

#[test]
fn import_then_export_gives_the_same_json_for_every_layout_and_quirk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fx = fixtures(tmp.path());
    let store = store(tmp.path());
    let sources = find_sources(tmp.path()).expect("find");
    assert_eq!(
        sources.len(),
        3,
        "workspace root, .jp/conversations and .archive: {sources:?}"
    );
    let prepared = sources
        .iter()
        .map(|s| read_source(s).map(prepare))
        .collect::<Result<Vec<_>, _>>()
        .expect("read");
    let (results, totals) = store.import(prepared, false, &mut |_| {}).expect("import");
    assert!(results.iter().all(|r| matches!(r, Imported::Stored { .. })));
    assert!(totals.new_blobs > 0);
    for f in &fx {
        let name = f.dir.file_name().and_then(|n| n.to_str()).expect("name");
        let id = ConversationId::parse(name.split('-').next().expect("id")).expect("id");
        let conv = store.read(&id).expect("read");
        let files = jp_files(&store, &conv).expect("export");
        assert!(files.lossy.is_empty(), "{:?}", files.lossy);
        assert_eq!(files.dir_name, name);
        if files.events != f.events {
            let (Value::Array(a), Value::Array(b)) = (&files.events, &f.events) else {
                panic!("not arrays")
            };
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_eq!(x, y, "{name}: entry {i}");
            }
            panic!(
                "{name}: {} entries exported, {} in the file",
                a.len(),
                b.len()
            );
        }
        assert_eq!(files.metadata, f.metadata, "{name}");
        assert_eq!(files.base_config, f.base_config, "{name}");
        // And through the files on disk.
        let out = tmp.path().join("out").join(name);
        write_jp_dir(&out, &files).expect("write");
        let back: Value =
            serde_json::from_slice(&std::fs::read(out.join("events.json")).expect("read"))
                .expect("json");
        assert_eq!(back, f.events);
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
    store
        .import(vec![prepare(src)], false, &mut |_| {})
        .expect("import");
    let conv = store
        .read(&ConversationId::parse("17738399468").expect("id"))
        .expect("read");
    // The base config is a blob, and the config in effect after the delta
    // merges over it.
    let cfg = store.config_at(&conv, conv.entries.len()).expect("config");
    assert_eq!(cfg["assistant"]["model"]["id"], "m2");
    assert_eq!(cfg["assistant"]["name"], "jp");
    let plain = jpstore_engine::export::conversation_json(
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
    assert_eq!(conv.state.turns.turns(), 3);
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
    assert!(errors.iter().all(|e| matches!(e, Error::NotJp { .. })));
    let (results, _) = store.import(ok, false, &mut |_| {}).expect("import");
    assert_eq!(results.len(), 3);
}

#[test]
fn existing_conversations_are_skipped_unless_forced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    fixtures(tmp.path());
    let store = store(tmp.path());
    let dir = tmp.path().join(".jp/conversations/17738399469-first-delta");
    let prep = || vec![prepare(read_source(&dir).expect("read"))];
    store.import(prep(), false, &mut |_| {}).expect("import");
    let id = ConversationId::parse("17738399469").expect("id");
    // Append to it, then import again.
    {
        let mut w = store.writer(&id).expect("writer");
        let entries = jpstore_engine::event::input::parse_input(
            "{\"type\":\"turn_start\"}",
            jpstore_engine::event::json::ParseMode::Strict {
                now: jpstore_engine::timestamp::Timestamp::now(),
            },
        )
        .expect("input")
        .entries;
        w.append(entries).expect("append");
    }
    let before = store.read(&id).expect("read").entries.len();
    let (r, _) = store.import(prep(), false, &mut |_| {}).expect("import");
    assert!(matches!(r[0], Imported::Skipped { .. }));
    assert_eq!(store.read(&id).expect("read").entries.len(), before);
    let (r, _) = store.import(prep(), true, &mut |_| {}).expect("import");
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
    let entries = jpstore_engine::event::input::parse_input(
        r#"{"type":"turn_start"}
{"type":"chat_request","content":"see","resources":[{"uri":"file:///a.rs","text":"fn a() {}"}]}
{"type":"tool_call_request","id":"c","name":"fs_read_file","arguments":{"path":"a.rs"}}
{"type":"tool_call_response","id":"c","content":[{"type":"text","text":"one"},{"type":"resource","resource":{"uri":"file:///b.rs","text":"two"}}]}"#,
        jpstore_engine::event::json::ParseMode::Strict {
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
    assert_eq!(files.dir_name, "42-native-r-sum-co");
    assert_eq!(files.lossy.len(), 2, "{:?}", files.lossy);
    let events = files.events.as_array().expect("array");
    assert_eq!(events[1]["content"], "see\n\nfile:///a.rs:\nfn a() {}");
    assert_eq!(events[2]["arguments"]["path"], encode("a.rs"));
    assert_eq!(events[3]["content"], encode("one\n\nfile:///b.rs:\ntwo"));
    assert_eq!(files.metadata["title"], "Native: résumé & co");
    assert!(files.metadata.get("last_activated_at").is_some());
    assert!(files.metadata.get("created").is_none());
    assert_eq!(files.base_config, Some(json!({})));
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
    store.import(prepared, false, &mut |_| {}).expect("import");
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
        jpstore_engine::compaction::active_compactions(&conv.entries).len(),
        1
    );
    let report = store
        .fsck(jpstore_engine::fsck::FsckOptions::default(), &mut |_| {})
        .expect("fsck");
    assert!(report.is_clean(), "{:?}", report.findings);
    // And the file comes back as it was.
    let files = jp_files(&store, &conv).expect("export");
    assert_eq!(files.events, events);
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
