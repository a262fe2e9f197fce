//! The whole engine on an object store's semantics (`MemoryBackend`:
//! objects created if absent, read by range, listed by prefix, replaced,
//! appended at their end only; no directories, links, inodes or fsync):
//! conversations are created, appended to, read, viewed, forked, compacted,
//! removed, checked and collected exactly as on a file system. What the
//! engine needs of its storage is what the seam offers.

use jpstore_engine::internal::StoreInterior as _;
use std::sync::Arc;
use std::time::Duration;

use jpstore_blobstore::backend::{Backend, MemoryBackend};
use jpstore_engine::compaction::{no_summarizer, CompactRequest};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{Entry, EventKind, Payload};
use jpstore_engine::export::ContentMode;
use jpstore_engine::fsck::FsckOptions;
use jpstore_engine::gc::GcOptions;
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use serde_json::{json, Value};

fn store(backend: &MemoryBackend) -> Store {
    let shared: Arc<dyn Backend> = Arc::new(backend.clone());
    Store::init(shared, StoreOptions::default()).expect("init")
}

fn entries(lines: &[Value]) -> Vec<Entry<Payload>> {
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    parse_input(
        &text.join("\n"),
        ParseMode::Strict {
            now: Timestamp::now(),
        },
    )
    .expect("input")
    .entries
}

/// A turn with a tool call whose result is `content`.
fn turn(i: usize, content: &str) -> Vec<Value> {
    vec![
        json!({"type": "turn_start"}),
        json!({"type": "chat_request", "content": format!("question {i}")}),
        json!({"type": "chat_response", "reasoning": format!("thinking {i}")}),
        json!({"type": "tool_call_request", "id": format!("c{i}"), "name": "fs_read_file",
               "arguments": {"path": "src/lib.rs"}}),
        json!({"type": "tool_call_response", "id": format!("c{i}"), "content": content}),
        json!({"type": "chat_response", "message": format!("answer {i}")}),
    ]
}

fn kinds(store: &Store, id: &ConversationId) -> Vec<&'static str> {
    store
        .read(id)
        .expect("read")
        .entries
        .iter()
        .filter_map(|e| e.event().map(|e| e.kind.type_name()))
        .collect()
}

#[test]
fn a_conversation_lives_its_whole_life_on_an_object_store() {
    let backend = MemoryBackend::new();
    let store = store(&backend);
    let id = ConversationId::parse("agent-1").expect("id");
    let mut writer = store
        .create(NewConversation {
            id: Some(id.clone()),
            title: Some("on objects".into()),
            ..Default::default()
        })
        .expect("create");
    let big = "fn main() { println!(\"hello\"); }\n".repeat(20);
    for i in 0..4 {
        writer.append(entries(&turn(i, &big))).expect("append");
    }
    drop(writer);
    // Nothing of a file system was needed, and no scratch object is left.
    assert!(
        !backend.keys().iter().any(|k| k.contains(".tmp")),
        "{:?}",
        backend.keys()
    );
    // A second handle (another process) reads it whole; the content is one
    // blob, referenced four times.
    let other = Store::open(Arc::new(backend.clone()), StoreOptions::default()).expect("open");
    let conv = other.read(&id).expect("read");
    assert_eq!(conv.entries.len(), 24);
    assert_eq!(conv.state.turns(), 4);
    let exported = conversation_json(&other, &conv, ContentMode::Inline).expect("export");
    assert_eq!(exported["metadata"]["title"], "on objects");
    assert!(
        exported["events"][4]["content"] == big.as_str(),
        "the tool output comes back from the blob store: {}",
        exported["events"][4]
    );
    let listed = other.list().expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state.entries, 24);

    // Compaction and its undo, a fork, the view.
    let out = other
        .compact(
            &id,
            &CompactRequest {
                keep_last: Some(1),
                ..Default::default()
            },
            Timestamp::now(),
            &mut no_summarizer,
        )
        .expect("compact");
    assert_eq!((out.compaction.from_turn, out.compaction.to_turn), (0, 2));
    let view = jpstore_engine::internal::export::view(&other, &other.read(&id).expect("read"))
        .expect("view");
    assert!(
        !view.iter().any(|e| matches!(
            e.event().map(|e| &e.kind),
            Some(EventKind::ChatResponse(jpstore_engine::event::ChatResponse::Reasoning(t))) if t == "thinking 0"
        )),
        "the default profile strips the reasoning of compacted turns"
    );
    other
        .undo_compaction(&id, None, Timestamp::now())
        .expect("undo");
    let fork = other
        .fork(&id, Some(2), None, Timestamp::now())
        .expect("fork")
        .id()
        .clone();
    assert_eq!(kinds(&other, &fork).len(), 12);

    // fsck finds nothing wrong; gc keeps what is referenced.
    let report =
        jpstore_engine::fsck::run(&other, FsckOptions::default(), &mut |_| {}).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.findings);
    let orphan = other.blobs().put(b"nobody refers to this").expect("put").id;
    backend.set_all_modified(std::time::SystemTime::now() - Duration::from_secs(7200));
    let gc = jpstore_engine::gc::run(
        &other,
        GcOptions {
            grace: Duration::from_secs(3600),
            ..Default::default()
        },
        &mut |_| {},
    )
    .expect("gc");
    assert_eq!(gc.loose_removed, 1);
    assert!(!other.blobs().exists(&orphan).expect("exists"));
    assert_eq!(
        other.read(&id).expect("read after gc").entries.len(),
        conv.entries.len() + 2
    );

    // Removal: gone from the listing, its objects deleted.
    other.remove(&fork).expect("rm");
    assert_eq!(other.ids().expect("ids"), vec![id.clone()]);
    assert!(
        !backend
            .keys()
            .iter()
            .any(|k| k.starts_with(&format!("conversations/{}", fork.as_str()))),
        "{:?}",
        backend.keys()
    );
}

#[test]
fn writers_on_threads_never_interleave_their_batches() {
    let backend = MemoryBackend::new();
    let store = store(&backend);
    let id = ConversationId::parse("shared").expect("id");
    drop(
        store
            .create(NewConversation {
                id: Some(id.clone()),
                ..Default::default()
            })
            .expect("create"),
    );
    std::thread::scope(|s| {
        for w in 0..4 {
            let (store, id) = (&store, &id);
            s.spawn(move || {
                for i in 0..10 {
                    let batch = entries(&[
                        json!({"type": "chat_request", "content": format!("w{w} b{i} first")}),
                        json!({"type": "chat_request", "content": format!("w{w} b{i} second")}),
                    ]);
                    store
                        .writer(id)
                        .expect("writer")
                        .append(batch)
                        .expect("append");
                }
            });
        }
    });
    let conv = store.read(&id).expect("read");
    let texts: Vec<String> = conv
        .entries
        .iter()
        .filter_map(|e| match e.event().map(|e| &e.kind) {
            Some(EventKind::ChatRequest(r)) => Some(r.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts.len(), 80);
    for pair in texts.chunks(2) {
        assert_eq!(
            pair[0].replace(" first", ""),
            pair[1].replace(" second", ""),
            "a batch was split: {pair:?}"
        );
    }
}
