//! The conversation handle: every use through one handle, what a drop and
//! a close leave on disk, and settings kept in memory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use jpstore_blobstore::backend::MemoryBackend;
use serde_json::json;

use crate::compaction::{no_summarizer, CompactRequest};
use crate::conversation::head;
use crate::event::{ChatRequest, ChatResponse, ConfigDelta, Entry, EventKind};
use crate::event::{ToolCallRequest, ToolCallResponse};
use crate::export::ContentMode;
use crate::{AutoCompaction, NewConversation, Store, StoreOptions};

fn memory_store() -> (Arc<MemoryBackend>, Store) {
    let memory = Arc::new(MemoryBackend::new());
    let store = Store::init(memory.clone(), StoreOptions::default()).expect("init");
    (memory, store)
}

/// Every object of a store in memory, by key.
fn snapshot(memory: &MemoryBackend) -> BTreeMap<String, Vec<u8>> {
    memory
        .keys()
        .into_iter()
        .map(|k| {
            let bytes = memory.object(Path::new(&k)).unwrap_or_default();
            (k, bytes)
        })
        .collect()
}

fn turn(i: usize) -> Vec<Entry<crate::event::Payload>> {
    let call = format!("c{i}");
    vec![
        Entry::now(EventKind::TurnStart),
        Entry::now(ChatRequest::text(format!(
            "question {i}: {}",
            "x".repeat(300)
        ))),
        Entry::now(
            ToolCallRequest::new(call.clone(), "fs_read_file", json!({"path": "a.rs"}))
                .expect("a request"),
        ),
        Entry::now(ToolCallResponse::text(call, format!("fn a{i}() {{}}"))),
        Entry::now(ChatResponse::message(format!("answer {i}"))),
    ]
}

/// One handle, every use: appends (one entry and a batch), a turn, the
/// view with references and inline, a compaction and its undo, a fork; the
/// handle's state follows, and close leaves the head of the whole log.
#[test]
fn one_handle_appends_views_compacts_undoes_and_forks() {
    let (memory, store) = memory_store();
    let mut conversation = store
        .create(NewConversation {
            title: Some("one handle".into()),
            ..Default::default()
        })
        .expect("create");
    let id = conversation.id().clone();
    // Appending through the handle that holds the lock: no wait on itself.
    conversation
        .append([Entry::now(EventKind::TurnStart)])
        .expect("one entry");
    conversation
        .append(turn(0).into_iter().skip(1))
        .expect("a batch");
    for i in 1..3 {
        let report = conversation
            .append_turn(turn(i), &mut no_summarizer)
            .expect("a turn");
        assert!(matches!(report.auto_compaction, AutoCompaction::NotDue));
        assert_eq!(report.append.entries, 5);
    }
    assert_eq!(conversation.state().turns(), 3);

    let refs = conversation
        .view()
        .expect("view")
        .render(ContentMode::Refs)
        .expect("refs");
    let refs: serde_json::Value = serde_json::from_slice(&refs).expect("json");
    assert_eq!(refs.as_array().map(Vec::len), Some(15));
    assert!(
        refs[3]["content"][0]["text"].get("$blob").is_some(),
        "{refs}"
    );
    let inline = conversation
        .view()
        .expect("view")
        .render(ContentMode::Inline)
        .expect("inline");
    let inline: serde_json::Value = serde_json::from_slice(&inline).expect("json");
    assert_eq!(inline[3]["content"][0]["text"], "fn a0() {}");

    let request = CompactRequest {
        to: Some(crate::compaction::Bound::FromEnd(1)),
        ..Default::default()
    };
    let compacted = conversation
        .compact(&request, &mut no_summarizer)
        .expect("compact");
    assert_eq!(
        (compacted.compaction.from_turn, compacted.compaction.to_turn),
        (0, 1)
    );
    assert!(compacted.offset.is_some());
    let view = |c: &mut crate::ConversationHandle<'_>| -> serde_json::Value {
        let json = c
            .view()
            .expect("view")
            .render(ContentMode::Refs)
            .expect("refs");
        serde_json::from_slice(&json).expect("json")
    };
    assert_ne!(
        view(&mut conversation),
        refs,
        "the compaction is in the view"
    );
    assert_eq!(conversation.undo_compaction(None).expect("undo"), 1);
    assert_eq!(view(&mut conversation), refs, "and undone");

    let fork = conversation.fork(Some(1), None).expect("fork");
    assert_ne!(fork.id(), &id);
    assert_eq!(fork.state().turns(), 1);
    fork.close();

    let end = conversation.log_end();
    conversation.close();
    let head = head::load(&*memory, &id).expect("the head close wrote");
    assert_eq!(head.log_end, end);
    assert_eq!(head.state, store.read(&id).expect("read").state);
}

/// A handle dropped without being closed writes nothing (the head stays
/// as the creation left it) and releases the lock; `close` writes the
/// head.
#[test]
fn a_dropped_handle_writes_nothing_and_a_closed_one_writes_the_head() {
    let (memory, store) = memory_store();
    let mut conversation = store.create(NewConversation::default()).expect("create");
    let id = conversation.id().clone();
    let created = head::load(&*memory, &id).expect("the creation's head");
    conversation.append(turn(0)).expect("append");
    let appended = snapshot(&memory);
    drop(conversation);
    assert_eq!(snapshot(&memory), appended, "a drop writes nothing");
    assert_eq!(head::load(&*memory, &id), Some(created));
    let lock = crate::log::try_lock(&*memory, &id.log_path())
        .expect("lock")
        .expect("released by the drop");
    drop(lock);

    let mut conversation = store.conversation(&id).expect("open");
    conversation.append(turn(1)).expect("append");
    conversation.close();
    let head = head::load(&*memory, &id).expect("the head close wrote");
    assert_eq!(head.state, store.read(&id).expect("read").state);
    assert_eq!(head.state.turns(), 2);
}

/// The settings a handle holds follow the config deltas appended through
/// it: automatic compaction turned on by a delta fires at the next turn of
/// the same handle. Settings it computed anew (config.toml changed since
/// the head cached them) are written with the head when it closes, so a
/// view by another store parses no config.
#[test]
fn a_handle_keeps_its_settings_current_and_caches_new_ones_on_close() {
    let (memory, store) = memory_store();
    let mut conversation = store.create(NewConversation::default()).expect("create");
    let id = conversation.id().clone();
    for i in 0..3 {
        conversation
            .append_turn(turn(i), &mut no_summarizer)
            .expect("turn");
    }
    assert_eq!(
        conversation
            .settings()
            .expect("settings")
            .end
            .conversation
            .compaction
            .auto
            .enabled,
        None
    );
    let delta = ConfigDelta::new(json!({"conversation": {"compaction": {"keep_last": 1,
        "auto": {"enabled": true, "context_window": 300, "min_turns": 2}}}}))
    .expect("delta");
    conversation.append([Entry::now(delta)]).expect("delta");
    let report = conversation
        .append_turn(turn(3), &mut no_summarizer)
        .expect("turn");
    let AutoCompaction::Made(out) = report.auto_compaction else {
        panic!("not compacted: {:?}", report.auto_compaction);
    };
    assert_eq!((out.compaction.from_turn, out.compaction.to_turn), (0, 2));
    conversation.close();

    // A new config.toml: the head's settings are not current.
    jpstore_blobstore::backend::Backend::replace(
        &*memory,
        Path::new(crate::store::CONFIG_FILE),
        b"[assistant]\nsystem_prompt = \"be brief\"\n",
        Path::new("config.toml.tmp"),
        jpstore_blobstore::backend::Expect::Any,
        true,
    )
    .expect("config.toml");
    let store = Store::open(memory.clone(), StoreOptions::default()).expect("open");
    let mut conversation = store.conversation(&id).expect("open");
    let settings = conversation.settings().expect("settings").clone();
    assert_eq!(
        settings.end.assistant.system_prompt.as_deref(),
        Some("be brief")
    );
    assert_eq!(
        settings.end.conversation.compaction.auto.enabled,
        Some(true)
    );
    conversation.append(turn(4)).expect("append");
    conversation.close();
    let cache = head::load(&*memory, &id)
        .and_then(|h| h.settings)
        .expect("a settings cache");
    assert_eq!(cache.settings, settings.base);
    let other = Store::open(memory.clone(), StoreOptions::default()).expect("open");
    assert_eq!(
        other.open_view(&id).expect("view").settings(),
        &settings,
        "the cached settings, the delta merged"
    );
}

/// Making a conversation while a handle is held of the one whose id the
/// time gives first does not wait for that handle's lock (the creation
/// waited for it before looking whether the log existed: forever, the
/// holder being the same thread): the next free id is taken.
#[test]
fn a_conversation_made_while_a_handle_is_held_takes_the_next_id_without_waiting() {
    let (_memory, store) = memory_store();
    let at = crate::timestamp::Timestamp::from_unix(1_780_000_000, 0).expect("time");
    let new = || NewConversation {
        created: Some(at),
        ..Default::default()
    };
    let held = store.create(new()).expect("create");
    let other = store.create(new()).expect("create another");
    assert_eq!(Some(other.id()), held.id().next_numeric().as_ref());
    let fork = held.fork(None, None).expect("fork");
    assert_ne!(fork.id(), held.id());
}
