//! Tests of conversations through `Store`: the head cache, listing, and the
//! append checks.

use std::path::Path;

use serde_json::json;

use super::head::{self, head_path};
use super::read::read_state;
use super::ConversationId;
use crate::error::Error;
use crate::event::input::entries_at;
use crate::event::{ChatResponse, Entry, EventKind, Payload};
use crate::timestamp::Timestamp;
use crate::{NewConversation, Store, StoreOptions};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(&dir.path().join("s"), StoreOptions::default()).expect("init");
    (dir, store)
}

/// A store whose new conversations have version 1 logs (as an earlier build
/// wrote them).
fn store_v1() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions {
        new_log_framing: crate::log::Framing::V1,
        ..StoreOptions::default()
    };
    let store = Store::init_dir(&dir.path().join("s"), options).expect("init");
    (dir, store)
}

fn events(text: &str) -> Vec<Entry<Payload>> {
    entries_at(text, Timestamp::from_unix(1_780_000_000, 0).expect("time"))
}

fn new_conv(store: &Store, id: &str) -> ConversationId {
    let id = ConversationId::parse(id).expect("id");
    store
        .create(NewConversation {
            id: Some(id.clone()),
            title: Some(format!("title of {id}")),
            ..Default::default()
        })
        .expect("create");
    id
}

fn turn(i: u32) -> String {
    format!(
        "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"q{i}\"}}\n\
         {{\"type\":\"tool_call_request\",\"id\":\"c{i}\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"c{i}\",\"content\":\"file {i}\"}}\n"
    )
}

/// The state of `id` computed from the whole log, ignoring any cache.
fn full_state(store: &Store, id: &ConversationId) -> super::state::ConversationState {
    store.read(id).expect("read").state
}

#[test]
fn listing_uses_the_head_and_reads_only_the_tail() {
    let (_d, store) = store();
    let id = new_conv(&store, "a1");
    let mut w = store.writer(&id).expect("writer");
    for i in 0..3 {
        w.append(events(&turn(i))).expect("append");
    }
    w.close();
    let head = head::load(&**store.backend(), &id).expect("a trusted head after the writer closed");
    let log_len = store.backend().head(&id.log_path()).expect("stat").len;
    assert_eq!(head.log_end, log_len);
    assert_eq!(head.state, full_state(&store, &id));

    // A writer that never closes (dropped, or a crash) leaves the head
    // behind the log.
    let mut w = store.writer(&id).expect("writer");
    w.append(events(&turn(3))).expect("append");
    drop(w);
    let listed = store.list().expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, full_state(&store, &id));
    assert_eq!(listed[0].state.turns.turns(), 4);
    assert_eq!(listed[0].log_bytes, store.read(&id).expect("read").log_end);
    // A listing reads: the head is left as it was, behind the log, until
    // the next writer that appends closes.
    let after = head::load(&**store.backend(), &id).expect("head");
    assert_eq!(after, head);
    assert!(after.log_end < listed[0].log_bytes);
    let mut w = store.writer(&id).expect("writer");
    w.append(events(&turn(4))).expect("append");
    w.close();
    let fresh = head::load(&**store.backend(), &id).expect("head");
    assert_eq!(fresh.log_end, store.read(&id).expect("read").log_end);
    assert_eq!(fresh.state, full_state(&store, &id));
}

/// Every object of a store in memory, by key.
fn snapshot(
    memory: &jpstore_blobstore::backend::MemoryBackend,
) -> std::collections::BTreeMap<String, Vec<u8>> {
    memory
        .keys()
        .into_iter()
        .map(|k| {
            let bytes = memory.object(Path::new(&k)).unwrap_or_default();
            (k, bytes)
        })
        .collect()
}

/// A writer dropped without being closed writes nothing (no head: `Drop`
/// does no I/O) and releases the conversation's lock; `close` writes the
/// head that covers what it appended.
#[test]
fn a_dropped_writer_writes_nothing_and_a_closed_one_writes_the_head() {
    let memory = std::sync::Arc::new(jpstore_blobstore::backend::MemoryBackend::new());
    let store = Store::init(memory.clone(), StoreOptions::default()).expect("init");
    let id = new_conv(&store, "dropped");
    let created = head::load(&*memory, &id).expect("the head written at creation");
    let mut w = store.writer(&id).expect("writer");
    w.append(events(&turn(0))).expect("append");
    let appended = snapshot(&memory);
    drop(w);
    assert_eq!(snapshot(&memory), appended, "a drop writes nothing");
    assert_eq!(
        head::load(&*memory, &id),
        Some(created),
        "the head as it was"
    );
    // The lock is free: taken at once, not waited for.
    let lock = crate::log::try_lock(&*memory, &id.log_path())
        .expect("lock")
        .expect("released by the drop");
    drop(lock);

    let mut w = store.writer(&id).expect("writer");
    w.append(events(&turn(1))).expect("append");
    w.close();
    let head = head::load(&*memory, &id).expect("the head close wrote");
    let log_len = store.backend().head(&id.log_path()).expect("stat").len;
    assert_eq!(head.log_end, log_len);
    assert_eq!(head.state, full_state(&store, &id));
    assert!(crate::log::try_lock(&*memory, &id.log_path())
        .expect("lock")
        .is_some());
}

#[test]
fn a_damaged_or_foreign_head_is_ignored() {
    let (dir, store) = store();
    let a = new_conv(&store, "a");
    let b = new_conv(&store, "b");
    for (id, n) in [(&a, 2), (&b, 3)] {
        let mut w = store.writer(id).expect("writer");
        for i in 0..n {
            w.append(events(&turn(i))).expect("append");
        }
    }
    let root = dir.path().join("s");
    let head_a = root.join(head_path(&a));
    let head_b = root.join(head_path(&b));
    // A's head copied over B's: it describes another log.
    std::fs::copy(&head_a, &head_b).expect("copy");
    let (state, _) = read_state(&**store.backend(), &b, Default::default()).expect("state");
    assert_eq!(state, full_state(&store, &b));
    // A flipped byte in A's head.
    let mut bytes = std::fs::read(&head_a).expect("read head");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&head_a, &bytes).expect("write head");
    assert!(head::load(&**store.backend(), &a).is_none());
    let (state, _) = read_state(&**store.backend(), &a, Default::default()).expect("state");
    assert_eq!(state, full_state(&store, &a));
    // A writer opened over a damaged head still knows the current turn.
    let mut w = store.writer(&a).expect("writer");
    w.append(events(
        "{\"type\":\"tool_call_response\",\"id\":\"c1\",\"content\":\"again\"}",
    ))
    .expect("a response to the current turn's request is accepted");
}

#[test]
fn a_writer_finds_damage_in_the_middle_even_with_a_head() {
    let (dir, store) = store();
    let id = new_conv(&store, "d");
    let mut offsets = Vec::new();
    {
        let mut w = store.writer(&id).expect("writer");
        for i in 0..3 {
            offsets.push(w.append(events(&turn(i))).expect("append").offset);
        }
    }
    assert!(head::load(&**store.backend(), &id).is_some());
    let log = dir.path().join("s").join(id.log_path());
    let mut bytes = std::fs::read(&log).expect("read log");
    let at = offsets[1] as usize + 20;
    bytes[at] ^= 0x40;
    std::fs::write(&log, &bytes).expect("write log");
    let err = store.writer(&id).expect_err("damage must be found");
    let msg = err.to_string();
    assert!(msg.contains(&offsets[1].to_string()), "{msg}");
    assert!(msg.contains("events.log"), "{msg}");
    assert_eq!(
        std::fs::read(&log).expect("read log"),
        bytes,
        "the log was changed"
    );
}

#[test]
fn refused_batches_leave_the_log_as_it_was() {
    let (dir, store) = store();
    let id = new_conv(&store, "r");
    let mut w = store.writer(&id).expect("writer");
    w.append(events(&turn(0))).expect("append");
    let log = dir.path().join("s").join(id.log_path());
    let before = std::fs::read(&log).expect("read");
    let missing = jpstore_blobstore::BlobId::of(b"not stored").to_hex();
    let cases = [
        // Answers a request of the previous turn.
        "{\"type\":\"turn_start\"}\n{\"type\":\"chat_request\",\"content\":\"x\"}\n{\"type\":\"tool_call_response\",\"id\":\"c0\",\"content\":\"late\"}".to_string(),
        format!("{{\"type\":\"tool_call_response\",\"id\":\"c0\",\"content\":{{\"$blob\":\"{missing}\",\"size\":10}}}}"),
    ];
    for text in &cases {
        let err = w.append(events(text)).expect_err("refused");
        assert!(matches!(err, Error::BadEntry { .. }), "{err}");
        assert_eq!(std::fs::read(&log).expect("read"), before, "{text}");
    }
    // A reference to stored content with the wrong size.
    let stored = store.blobs().put(b"twelve bytes").expect("put");
    let text = format!(
        "{{\"type\":\"tool_call_response\",\"id\":\"c0\",\"content\":{{\"$blob\":\"{}\",\"size\":3}}}}",
        stored.id
    );
    let err = w.append(events(&text)).expect_err("refused");
    assert!(err.to_string().contains("has 12 bytes"), "{err}");
    // The right size is accepted, and the writer is still usable.
    let text = text.replace("\"size\":3", "\"size\":12");
    w.append(events(&text)).expect("accepted");
    assert_eq!(w.state().entries, 5);
}

#[test]
fn new_ids_follow_jp_and_skip_taken_ones() {
    let (_d, store) = store();
    let t = Timestamp::parse("2026-03-18 13:19:06.8").expect("time");
    let mk = || {
        store
            .create(NewConversation {
                created: Some(t),
                ..Default::default()
            })
            .expect("create")
            .id()
            .to_string()
    };
    assert_eq!(mk(), "17738399468");
    assert_eq!(mk(), "17738399469");
    let ids: Vec<String> = store
        .ids()
        .expect("ids")
        .iter()
        .map(|i| i.to_string())
        .collect();
    assert_eq!(ids, ["17738399468", "17738399469"]);
    // A directory without a log (an interrupted creation) is not listed.
    store
        .backend()
        .create_prefix(Path::new("conversations/17738399470"))
        .expect("mkdir");
    assert_eq!(store.ids().expect("ids").len(), 2);
    assert_eq!(mk(), "17738399470", "the empty directory is reused");
}

#[test]
fn metadata_and_config_come_from_the_log() {
    let (_d, store) = store();
    let base = json!({"conversation": {"compaction": {"keep_last": 3}}, "x": [1, 2]});
    let serde_json::Value::Object(base) = base else {
        unreachable!()
    };
    let id = ConversationId::parse("c").expect("id");
    let mut w = store
        .create(NewConversation {
            id: Some(id.clone()),
            title: Some("T".into()),
            labels: vec![("k".into(), "v".into())],
            base_config: Some(base.clone()),
            ..Default::default()
        })
        .expect("create");
    w.append(events(
        "{\"type\":\"config_delta\",\"delta\":{\"conversation\":{\"compaction\":{\"default_profile\":\"p\"}},\"x\":[3]}}\n{\"type\":\"turn_start\"}",
    ))
    .expect("append");
    drop(w);
    let conv = store.read(&id).expect("read");
    assert_eq!(conv.state.metadata.title(), Some("T"));
    assert_eq!(conv.state.metadata.labels(), vec![("k".into(), "v".into())]);
    assert_eq!(store.base_config(&conv).expect("base"), base);
    let at_end = store.config_at(&conv, conv.entries.len()).expect("config");
    assert_eq!(
        serde_json::Value::Object(at_end),
        json!({"conversation": {"compaction": {"keep_last": 3, "default_profile": "p"}}, "x": [3]})
    );
    assert_eq!(store.config_at(&conv, 0).expect("config"), base);
    // A second conversation with the same base config shares its blob.
    let w2 = store
        .create(NewConversation {
            id: Some(ConversationId::parse("c2").expect("id")),
            base_config: Some(base),
            ..Default::default()
        })
        .expect("create");
    assert_eq!(
        w2.state().metadata.base_config,
        conv.state.metadata.base_config
    );
}

#[test]
fn forks_share_content_and_start_where_asked() {
    let (_d, store) = store();
    let id = ConversationId::parse("src").expect("id");
    let base = json!({"a": 1});
    let serde_json::Value::Object(base) = base else {
        unreachable!()
    };
    let mut w = store
        .create(NewConversation {
            id: Some(id.clone()),
            title: Some("T".into()),
            base_config: Some(base),
            ..Default::default()
        })
        .expect("create");
    w.append(events(&turn(0))).expect("append");
    w.append(events("{\"type\":\"config_delta\",\"delta\":{\"b\":2}}\n{\"type\":\"compaction\",\"from_turn\":0,\"to_turn\":0,\"reasoning\":\"strip\"}")).expect("append");
    w.append(events(&turn(1))).expect("append");
    w.append(events(&turn(2))).expect("append");
    drop(w);
    let blobs_before = store.blobs().ids().expect("ids").len();
    let now = Timestamp::now();
    // The whole history: every entry, same base config.
    let whole = store
        .fork(
            &id,
            None,
            Some(ConversationId::parse("whole").expect("id")),
            now,
        )
        .expect("fork");
    let src = store.read(&id).expect("read");
    let copy = store.read(whole.id()).expect("read");
    assert_eq!(copy.entries, src.entries);
    assert_eq!(copy.state.metadata.title(), Some("T"));
    assert_eq!(copy.state.metadata.fields["forked_from"]["id"], "src");
    drop(whole);
    // The last 2 turns: the delta before them is in the base config, the
    // compaction is left out.
    let tail = store
        .fork(
            &id,
            Some(2),
            Some(ConversationId::parse("tail").expect("id")),
            now,
        )
        .expect("fork");
    let conv = store.read(tail.id()).expect("read");
    assert_eq!(conv.state.turns.turns(), 2);
    assert_eq!(conv.entries.len(), 8);
    assert!(conv.entries.iter().all(|e| !matches!(
        e.event().map(|e| &e.kind),
        Some(crate::event::EventKind::Compaction(_))
    )));
    let cfg = store.config_at(&conv, 0).expect("config");
    assert_eq!(serde_json::Value::Object(cfg), json!({"a": 1, "b": 2}));
    drop(tail);
    // Content is shared: only the forks' base configs are new blobs.
    assert!(store.blobs().ids().expect("ids").len() <= blobs_before + 1);
    assert!(store.fork(&id, Some(0), None, now).is_err());
    assert!(matches!(
        store.fork(
            &id,
            None,
            Some(ConversationId::parse("whole").expect("id")),
            now
        ),
        Err(Error::ConversationExists { .. })
    ));
}

#[test]
fn v1_a_long_log_decodes_on_all_cores_in_order_and_names_an_undecodable_record() {
    let (_dir, store) = store_v1();
    let id = new_conv(&store, "long");
    {
        let mut w = store.writer(&id).expect("writer");
        // About 600 KB of records that packing cannot shrink much: above
        // the threshold of a parallel decode.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..300 {
            let text: String = (0..2_000)
                .map(|_| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    char::from(b'a' + (x >> 59) as u8)
                })
                .collect();
            let batch = format!("{{\"type\":\"chat_request\",\"content\":\"{i} {text}\"}}\n");
            w.append(events(&batch)).expect("append");
        }
    }
    let conv = store.read(&id).expect("read");
    let mut sequential = super::state::ConversationState::default();
    let mut entries = Vec::new();
    let reader =
        super::read::open_reader(&**store.backend(), &id, Default::default()).expect("reader");
    let end = super::read::fold_records(
        &reader,
        crate::log::FIRST_RECORD,
        &mut sequential,
        &mut |e, _| entries.push(e),
    )
    .expect("fold");
    assert_eq!(conv.entries.len(), 300);
    assert!(
        conv.log_end > 256 * 1024,
        "{} bytes: too few to decode in parallel",
        conv.log_end
    );
    assert_eq!(conv.entries, entries);
    assert_eq!(conv.state, sequential);
    assert_eq!(conv.log_end, end.end);

    // A fork holds the same entries in one packed record, whose entries are
    // shared out among the threads after unpacking.
    let fork_id = ConversationId::parse("fork").expect("id");
    let now = Timestamp::from_unix(1_780_000_100, 0).expect("time");
    drop(
        store
            .fork(&id, None, Some(fork_id.clone()), now)
            .expect("fork"),
    );
    let fork = store.read(&fork_id).expect("read the fork");
    assert!(fork.log_end < conv.log_end, "the fork's record is packed");
    assert_eq!(
        fork.state.records, 2,
        "metadata, then one record of entries"
    );
    assert_eq!(fork.entries, conv.entries);

    // A record whose checksum matches but whose entry is not MessagePack.
    let bad_at = {
        let mut raw =
            crate::log::LogWriter::open(&**store.backend(), &id.log_path(), Default::default())
                .expect("raw writer");
        raw.append(&[[super::codec::KIND_EVENT, 0xc1]])
            .expect("append raw")
    };
    for err in [
        store.read(&id).expect_err("a reader decodes every record"),
        store
            .writer(&id)
            .expect_err("a writer decodes the records after its head"),
    ] {
        let msg = err.to_string();
        assert!(msg.contains(&bad_at.to_string()), "{msg}");
        assert!(msg.contains("decodable entry 0"), "{msg}");
    }
}

#[test]
fn v1_a_batch_packed_in_runs_reads_back_and_runs_may_not_exceed_the_record_limit_together() {
    let (dir, store) = store_v1();
    let id = new_conv(&store, "runs");
    let text: String = (0..9_000)
        .map(|i| {
            format!(
                "{{\"type\":\"chat_response\",\"message\":\"answer {i}: {}\"}}\n",
                "the timer may fire late; ".repeat(12)
            )
        })
        .collect();
    let batch = events(&text);
    store
        .writer(&id)
        .expect("writer")
        .append(batch.clone())
        .expect("append");
    let conv = store.read(&id).expect("read");
    assert_eq!(conv.entries.len(), 9_000);
    assert_eq!(conv.state.records, 2, "the create record and one batch");
    let messages = |entries: &[Entry]| -> Vec<String> {
        entries
            .iter()
            .map(|e| match e.event().map(|e| &e.kind) {
                Some(EventKind::ChatResponse(ChatResponse::Message(m))) => m.clone(),
                other => panic!("not a message: {other:?}"),
            })
            .collect()
    };
    let expected: Vec<String> = (0..9_000)
        .map(|i| format!("answer {i}: {}", "the timer may fire late; ".repeat(12)))
        .collect();
    assert_eq!(messages(&conv.entries), expected);
    let report = store.fsck(Default::default(), &mut |_| {}).expect("fsck");
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    // The same log read with a record limit below the batch's size: each
    // run fits, their sum does not, and the record is refused as damage.
    let log = dir.path().join("s").join(id.log_path());
    let len = std::fs::metadata(&log).expect("stat").len();
    let reader = crate::log::LogReader::open(
        &jpstore_blobstore::backend::FileBackend::new(std::sync::Arc::new(
            jpstore_blobstore::storage::LocalStorage::open(dir.path().join("s")).expect("storage"),
        )),
        &id.log_path(),
        crate::log::LogOptions {
            max_record_size: 2 << 20,
        },
    )
    .expect("reader");
    let mut state = crate::conversation::state::ConversationState::default();
    let err = crate::conversation::read::fold_records(
        &reader,
        crate::log::FIRST_RECORD,
        &mut state,
        &mut |_, _| {},
    )
    .expect_err("over the limit in all");
    assert!(
        err.to_string().contains("more than a record holds"),
        "{err} ({len} bytes of log)"
    );
    // fsck with that limit names the record instead of unpacking it.
    drop(store);
    let small = Store::open_dir(
        &dir.path().join("s"),
        StoreOptions {
            log: crate::log::LogOptions {
                max_record_size: 2 << 20,
            },
            ..StoreOptions::default()
        },
    )
    .expect("open with a smaller record limit");
    let report = small.fsck(Default::default(), &mut |_| {}).expect("fsck");
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.kind == "undecodable-entry" && f.message.contains("in all")),
        "{:?}",
        report.findings
    );
}

#[test]
fn v1_new_logs_pack_large_batches_and_read_them_back() {
    let (dir, store) = store_v1();
    let id = new_conv(&store, "packed");
    let answer = "The flaky test waits on a timer that the scheduler may delay; ".repeat(300);
    let small = "{\"type\":\"turn_start\"}\n{\"type\":\"chat_request\",\"content\":\"why?\"}\n";
    let large = format!("{{\"type\":\"chat_response\",\"message\":\"{answer}\"}}\n");
    {
        let mut w = store.writer(&id).expect("writer");
        w.append(events(small)).expect("append small");
        w.append(events(&large)).expect("append large");
    }
    let log = std::fs::read(dir.path().join("s").join(id.log_path())).expect("read log");
    assert_eq!(
        u16::from_le_bytes([log[10], log[11]]),
        crate::log::FLAG_PACKED,
        "a new log announces packed entries"
    );
    assert!(
        !log.windows(answer.len()).any(|w| w == answer.as_bytes()),
        "the large batch is stored packed"
    );
    assert!(
        log.windows(4).any(|w| w == b"why?"),
        "a small batch is stored plain"
    );
    assert!(log.len() < answer.len() / 4, "{} bytes of log", log.len());
    let conv = store.read(&id).expect("read");
    let back = crate::export::conversation_json(&store, &conv, crate::export::ContentMode::Inline)
        .expect("export");
    let events = back["events"].as_array().expect("events");
    assert_eq!(events.len(), 3);
    assert_eq!(events[2]["message"], answer.as_str());
    // The writer, the head cache and fsck read the packed record too.
    drop(store.writer(&id).expect("a writer reopens it"));
    let report = store.fsck(Default::default(), &mut |_| {}).expect("fsck");
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    assert_eq!(report.entries, 3);
}

#[test]
fn a_prepared_batch_checks_its_references_when_it_is_appended() {
    let (_dir, store) = store();
    let id = new_conv(&store, "prepared");
    let content = b"fn main() {}\n".to_vec();
    let r = crate::event::BlobRef {
        id: jpstore_blobstore::BlobId::of(&content),
        size: content.len() as u64,
    };
    let text = format!(
        "{{\"type\":\"chat_request\",\"content\":\"see\",\"resources\":[{{\"uri\":\"file:///m.rs\",\"text\":{{\"$blob\":\"{}\",\"size\":{}}}}}]}}\n",
        r.id, r.size
    );
    let entries: Vec<Entry> = events(&text)
        .into_iter()
        .map(|e| {
            e.try_map_content(&mut |p| match p {
                Payload::Ref(r) => Ok(r),
                Payload::Inline(_) => Err("inline content"),
            })
            .expect("references only")
        })
        .collect();
    let mut w = store.writer(&id).expect("writer");
    // Prepared before its blob exists: nothing is checked against the store yet.
    let early = w.prepare_stored(entries.clone()).expect("prepare");
    let err = w
        .append_prepared(early)
        .expect_err("the blob is not in the store");
    assert!(err.to_string().contains("is not in the store"), "{err}");
    assert_eq!(w.state().entries, 0, "nothing appended");
    store.blobs().put(&content).expect("put the blob");
    let prepared = w.prepare_stored(entries).expect("prepare");
    let offset = w.append_prepared(prepared).expect("append");
    drop(w);
    let conv = store.read(&id).expect("read");
    assert_eq!(conv.entries.len(), 1);
    assert_eq!(conv.entry_records, vec![offset]);
    let report = store.fsck(Default::default(), &mut |_| {}).expect("fsck");
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// A conversation read for a page of it (`Store::open_entries`, `serve`)
/// gives the state, the entries and the heads reading the whole log gives,
/// for logs of both versions, with metadata patches among its records.
#[test]
fn open_entries_reads_as_the_whole_log_reads() {
    for (_d, store) in [store(), store_v1()] {
        let id = new_conv(&store, "p1");
        {
            let mut w = store.writer(&id).expect("writer");
            for i in 0..3 {
                w.append(events(&turn(i))).expect("append");
            }
        }
        let whole = store.read(&id).expect("read");
        let entries = store.open_entries(&id).expect("open entries");
        let heads = entries.heads().expect("heads");
        assert_eq!(entries.len(), whole.entries.len());
        assert_eq!(heads.len(), whole.entries.len());
        assert_eq!(entries.state(&heads).expect("state"), whole.state);
        assert_eq!(
            entries.state(&heads).expect("state"),
            full_state(&store, &id)
        );
        for (i, e) in whole.entries.iter().enumerate() {
            assert_eq!(&entries.entry(i).expect("entry"), e);
            assert_eq!(heads[i], crate::event::head::EntryHead::of(e));
        }
        assert!(entries.entry(whole.entries.len()).is_err());
        assert_eq!(entries.log_end(), whole.log_end);
        assert_eq!(entries.torn_tail(), None);
        entries.settings(&heads).expect("settings");
    }
}

/// Entries and a metadata patch appended as one record (both durable or
/// neither) read back as the two appends would, on logs of both versions:
/// the entries, the metadata, the listing (from the head and from the
/// whole log), the entries' heads and a view; fsck with the data is clean.
#[test]
fn entries_and_a_metadata_patch_in_one_record_read_back_whole() {
    for (dir, store) in [store(), store_v1()] {
        let id = new_conv(&store, "both");
        let before = store.read(&id).expect("read").state.records;
        let mut w = store.writer(&id).expect("writer");
        let mut fields = crate::event::Object::new();
        fields.insert("title".into(), json!("a new title"));
        fields.insert("pinned".into(), json!(true));
        let out = w
            .append_imported_with(
                events(&turn(0)),
                Some(crate::conversation::meta::MetaPatch {
                    base_config: None,
                    fields,
                }),
            )
            .expect("one record");
        assert_eq!(out.entries, 4);
        drop(w);
        let conv = store.read(&id).expect("read");
        assert_eq!(conv.state.records, before + 1, "one record");
        assert_eq!(conv.entries.len(), 4);
        assert_eq!(conv.state.entries, 4);
        assert_eq!(conv.state.metadata.fields["title"], json!("a new title"));
        assert_eq!(conv.state.metadata.fields["pinned"], json!(true));
        assert_eq!(full_state(&store, &id), conv.state);
        let listed = store.list().expect("list");
        let row = listed.iter().find(|l| l.id == id).expect("listed");
        assert_eq!(row.state.metadata.fields["title"], json!("a new title"));
        let entries = store.open_entries(&id).expect("entries");
        assert_eq!(entries.len(), 4);
        assert_eq!(entries.heads().expect("heads").len(), 4);
        let view = store.open_view(&id).expect("view");
        assert_eq!(view.into_entries().expect("entries").len(), 4);
        let report = store
            .fsck(
                crate::fsck::FsckOptions {
                    read_data: true,
                    ..Default::default()
                },
                &mut |_| {},
            )
            .expect("fsck");
        assert!(report.is_clean(), "{report:?}");
        drop(dir);
    }
}

#[test]
fn a_writer_finds_the_config_deltas_of_records_whose_heads_are_compressed() {
    let (_d, store) = store();
    let id = new_conv(&store, "deltas");
    let mut w = store.writer(&id).expect("writer");
    let mut text = String::new();
    for i in 0..600 {
        text.push_str(&turn(i));
        if i % 100 == 50 {
            text.push_str(&format!(
                "{{\"type\":\"config_delta\",\"delta\":{{\"step\":{i}}}}}\n"
            ));
        }
    }
    w.append(events(&text)).expect("append");
    drop(w);
    // A fork publishes the history as a new log, its long record's entry
    // heads compressed.
    let fork = store
        .fork(
            &id,
            None,
            Some(ConversationId::parse("fork").expect("id")),
            Timestamp::now(),
        )
        .expect("fork");
    drop(fork);
    let fork = ConversationId::parse("fork").expect("id");
    let whole = |id: &ConversationId| {
        super::writer::config_deltas_of(store.read(id).expect("read").entries)
    };
    let mut w = store.writer(&fork).expect("writer");
    assert!(
        w.unread_delta_records() > 0,
        "the fork's record has compressed entry heads, not read at the open"
    );
    let deltas = w.config_deltas().expect("deltas");
    assert_eq!(deltas.len(), 6);
    assert_eq!(deltas, whole(&fork));
    // One appended since is known without a look.
    w.append(events(
        "{\"type\":\"config_delta\",\"delta\":{\"step\":\"last\"}}",
    ))
    .expect("append");
    let deltas = w.config_deltas().expect("deltas");
    assert_eq!(deltas.len(), 7);
    assert_eq!(deltas, whole(&fork));
    assert_eq!(deltas[6]["step"], "last");
}
