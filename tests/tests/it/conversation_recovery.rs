//! Recovery of a conversation whose log was cut or damaged, on the real file
//! system: for every length of a truncated log, readers see exactly the
//! whole batches below it and a writer cuts the torn tail and appends; a
//! damaged earlier record is an error naming the file and offset, and
//! nothing is cut.

use jpstore_engine::internal::StoreInterior as _;
use std::path::Path;

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Error;
use jpstore_engine::event::{Entry, Object, Payload};
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use jpstore_tests::{events_of, log_path, ts};
use serde_json::{json, Value};

const ID: &str = "recover";

fn parse(batch: &[Value]) -> Vec<Entry<Payload>> {
    let text = serde_json::to_string(batch).expect("serialize batch");
    parse_input(
        &text,
        ParseMode::Strict {
            now: jpstore_engine::timestamp::Timestamp::now(),
        },
    )
    .unwrap_or_else(|e| panic!("batch does not parse: {e}"))
    .entries
}

/// Small batches (the test walks every byte of the log).
fn batches() -> Vec<Vec<Value>> {
    vec![
        vec![
            json!({"type": "turn_start", "timestamp": ts(1)}),
            json!({"type": "chat_request", "timestamp": ts(2), "content": "q1"}),
        ],
        vec![
            json!({"type": "tool_call_request", "timestamp": ts(3), "id": "c1", "name": "ls", "arguments": {}}),
            json!({"type": "tool_call_response", "timestamp": ts(4), "id": "c1", "content": "a.txt", "is_error": false}),
        ],
        vec![json!({"type": "chat_response", "timestamp": ts(5), "message": "ok"})],
        vec![
            json!({"type": "turn_start", "timestamp": ts(6)}),
            json!({"type": "chat_request", "timestamp": ts(7), "content": "q2"}),
            json!({"type": "config_delta", "timestamp": ts(8), "delta": {"k": 1}}),
        ],
        vec![json!({"type": "chat_response", "timestamp": ts(9), "reasoning": "r"})],
    ]
}

/// The batch appended after recovery.
fn after_batch() -> Vec<Value> {
    vec![
        json!({"type": "tool_call_request", "timestamp": ts(20), "id": "after", "name": "cat", "arguments": {}}),
        json!({"type": "tool_call_response", "timestamp": ts(21), "id": "after", "content": "after recovery", "is_error": false}),
    ]
}

struct Built {
    /// The whole log.
    bytes: Vec<u8>,
    /// Record boundaries: the metadata record's offset (16), each batch's
    /// offset, and the end of the log.
    bounds: Vec<u64>,
}

/// Creates the conversation in a new store at `root` and appends the
/// batches, recording where each record starts.
fn build(root: &Path) -> Built {
    let store = Store::init_dir(root, StoreOptions::default()).expect("init");
    let mut w = store
        .create(NewConversation {
            id: Some(ConversationId::parse(ID).expect("id")),
            title: Some("Recovery".into()),
            base_config: Some(Object::new()),
            ..Default::default()
        })
        .expect("create");
    let mut bounds = vec![16];
    for (i, b) in batches().iter().enumerate() {
        let out = w
            .append(parse(b))
            .unwrap_or_else(|e| panic!("append {i}: {e}"));
        bounds.push(out.offset);
    }
    // The head then covers every record.
    w.close();
    let bytes = std::fs::read(log_path(root, ID)).expect("read log");
    bounds.push(bytes.len() as u64);
    for pair in bounds.windows(2) {
        assert!(pair[0] < pair[1], "record boundaries increase: {bounds:?}");
    }
    Built { bytes, bounds }
}

fn id() -> ConversationId {
    ConversationId::parse(ID).expect("id")
}

fn events(store: &Store, what: &str) -> Vec<Value> {
    let conv = store
        .read(&id())
        .unwrap_or_else(|e| panic!("{what}: read failed: {e}"));
    let doc = conversation_json(store, &conv, ContentMode::Inline)
        .unwrap_or_else(|e| panic!("{what}: export failed: {e}"));
    events_of(&doc)
}

#[test]
fn every_truncation_length_reads_whole_batches_and_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let built = build(&root);
    let batches = batches();
    let log = log_path(&root, ID);
    let full = built.bytes.len() as u64;
    let mut cuts = 0;
    for len in 0..=full {
        let what = format!(
            "log cut to {len} of {full} bytes (records at {:?})",
            built.bounds
        );
        let prefix = &built.bytes[..len as usize];
        std::fs::write(&log, prefix).expect("write truncated log");
        // The bytes alone decide here: without the head cache nothing proves
        // a record whole (with it, a truncation of covered records is
        // damage: `a_truncation_of_records_the_head_covers_is_damage`).
        let _ = std::fs::remove_file(head_path(&root));
        let store = Store::open_dir(&root, StoreOptions::default()).expect("open store");

        if len < 16 {
            // Inside the file header: an error, never a panic, and the file
            // is left alone.
            let err = store
                .read(&id())
                .expect_err(&format!("{what}: read of a cut header succeeded"));
            assert!(err.is_corruption(), "{what}: read: {err}");
            let err = store
                .writer(&id())
                .expect_err(&format!("{what}: writer on a cut header opened"));
            assert!(err.is_corruption(), "{what}: writer: {err}");
            assert_eq!(
                std::fs::read(&log).expect("read log"),
                prefix,
                "{what}: the file changed"
            );
            continue;
        }

        // The last record boundary at or below the length.
        let boundary = *built
            .bounds
            .iter()
            .rev()
            .find(|&&b| b <= len)
            .expect("16 is a boundary");
        // Batch i is record i + 1; it is whole when its end is within `len`.
        let whole: Vec<Value> = batches
            .iter()
            .enumerate()
            .filter(|(i, _)| built.bounds[i + 2] <= len)
            .flat_map(|(_, b)| b.iter().cloned())
            .collect();
        let meta_whole = built.bounds[1] <= len;

        // (a) A reader sees exactly the whole batches.
        let conv = store
            .read(&id())
            .unwrap_or_else(|e| panic!("{what}: read failed: {e}"));
        assert_eq!(conv.log_end, boundary, "{what}: end of the records read");
        assert_eq!(
            conv.state.metadata.title(),
            meta_whole.then_some("Recovery"),
            "{what}: metadata"
        );
        assert_eq!(events(&store, &what), whole, "{what}: events read");
        // The reader changed nothing.
        assert_eq!(
            std::fs::read(&log).expect("read log"),
            prefix,
            "{what}: a reader changed the file"
        );

        // (b) A writer cuts the torn tail, reports it, and appends.
        let mut w = store
            .writer(&id())
            .unwrap_or_else(|e| panic!("{what}: writer failed: {e}"));
        let want_cut = (boundary < len).then_some((boundary, len - boundary));
        assert_eq!(
            w.cut_tail().map(|c| (c.offset, c.len)),
            want_cut,
            "{what}: reported cut"
        );
        if let Some(c) = w.cut_tail() {
            assert_eq!(
                std::fs::read(root.join(&c.copy)).expect("the copy of the cut bytes"),
                &prefix[boundary as usize..],
                "{what}: the copy of the cut bytes"
            );
        }
        if want_cut.is_some() {
            cuts += 1;
        }
        assert_eq!(
            std::fs::metadata(&log).expect("stat log").len(),
            boundary,
            "{what}: length after recovery"
        );
        assert_eq!(
            w.state().entries,
            whole.len() as u64,
            "{what}: writer's state"
        );
        let out = w
            .append(parse(&after_batch()))
            .unwrap_or_else(|e| panic!("{what}: append after recovery failed: {e}"));
        assert_eq!(out.offset, boundary, "{what}: offset of the new record");
        drop(w);
        let mut want = whole;
        want.extend(after_batch());
        assert_eq!(
            events(&store, &what),
            want,
            "{what}: events after the append"
        );
    }
    assert!(cuts > 100, "only {cuts} lengths had a torn tail");
}

fn contains_all(err: &Error, words: &[&str]) -> bool {
    let msg = err.to_string();
    words.iter().all(|w| msg.contains(w))
}

#[test]
fn damage_in_an_earlier_record_is_reported_and_never_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let built = build(&root);
    let log = log_path(&root, ID);
    let log_name = log.display().to_string();
    let records = built.bounds.len() - 1;
    let mut checked = 0;
    // Every record but the last (a damaged last record looks torn).
    for r in 0..records - 1 {
        let (start, end) = (built.bounds[r] as usize, built.bounds[r + 1] as usize);
        // Bytes of the length, both checksums, the first, a middle and the
        // last payload byte.
        for pos in [
            start,
            start + 5,
            start + 9,
            start + 12,
            (start + end) / 2,
            end - 1,
        ] {
            for mask in [0x01u8, 0x80] {
                let what = format!("record {r} at {start}: byte {pos} ^ {mask:#x}");
                let mut damaged = built.bytes.clone();
                damaged[pos] ^= mask;
                std::fs::write(&log, &damaged).expect("write damaged log");
                let store = Store::open_dir(&root, StoreOptions::default()).expect("open store");
                let offset = format!("offset {start}");

                let err = store
                    .read(&id())
                    .expect_err(&format!("{what}: read succeeded"));
                assert!(err.is_corruption(), "{what}: read: {err}");
                assert!(
                    contains_all(&err, &[&log_name, &offset]),
                    "{what}: read error does not name {log_name} and {offset}: {err}"
                );
                let err = store
                    .writer(&id())
                    .expect_err(&format!("{what}: writer opened"));
                assert!(err.is_corruption(), "{what}: writer: {err}");
                assert!(
                    contains_all(&err, &[&log_name, &offset]),
                    "{what}: writer error does not name {log_name} and {offset}: {err}"
                );
                // A listing is served from the head cache and decodes only
                // records after it (format-spec.md 4.6): it does not re-check
                // old records, but it never changes the log either.
                let _ = store.list();
                assert_eq!(
                    std::fs::read(&log).expect("read log"),
                    damaged,
                    "{what}: the damaged log was changed"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, (records - 1) * 12);
}

#[test]
fn damage_in_the_file_header_is_reported_and_never_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let built = build(&root);
    let log = log_path(&root, ID);
    let log_name = log.display().to_string();
    for pos in 0..16 {
        let what = format!("file header byte {pos} flipped");
        let mut damaged = built.bytes.clone();
        damaged[pos] ^= 0x10;
        std::fs::write(&log, &damaged).expect("write damaged log");
        let store = Store::open_dir(&root, StoreOptions::default()).expect("open store");
        let err = store.read(&id()).expect_err(&what);
        assert!(err.to_string().contains(&log_name), "{what}: read: {err}");
        let err = store.writer(&id()).expect_err(&what);
        assert!(err.to_string().contains(&log_name), "{what}: writer: {err}");
        assert_eq!(
            std::fs::read(&log).expect("read log"),
            damaged,
            "{what}: the log was changed"
        );
    }
}

fn head_path(root: &Path) -> std::path::PathBuf {
    root.join("conversations").join(ID).join("head")
}

#[test]
fn a_truncation_of_records_the_head_covers_is_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let built = build(&root);
    let log = log_path(&root, ID);
    let head = std::fs::read(head_path(&root)).expect("the writer left a head");
    for &len in &built.bounds[1..built.bounds.len() - 1] {
        for len in [len, len + 5] {
            let what = format!("log cut to {len} with the head");
            std::fs::write(&log, &built.bytes[..len as usize]).expect("write");
            std::fs::write(head_path(&root), &head).expect("head");
            let store = Store::open_dir(&root, StoreOptions::default()).expect("open store");
            let err = store.read(&id()).expect_err(&what);
            assert!(err.is_corruption(), "{what}: read: {err}");
            let err = store.writer(&id()).expect_err(&what);
            assert!(
                err.to_string().contains("fsck --repair"),
                "{what}: writer: {err}"
            );
            assert_eq!(
                std::fs::read(&log).expect("read"),
                &built.bytes[..len as usize],
                "{what}: the log changed"
            );
        }
    }
}

#[test]
fn a_damaged_last_record_is_damage_when_proven_and_cut_with_a_copy_otherwise() {
    // format-spec 3, "Recovery and classification": the head covers the
    // last record, so it was whole: damage, refused, nothing cut. Without
    // the head the bytes cannot tell it from a torn write: it is cut, never
    // silently and never without a copy.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let built = build(&root);
    let log = log_path(&root, ID);
    let last = built.bounds[built.bounds.len() - 2];
    let full = built.bytes.len() as u64;
    let mut damaged = built.bytes.clone();
    damaged[(last + 14) as usize] ^= 0x40;
    std::fs::write(&log, &damaged).expect("write damaged log");
    let store = Store::open_dir(&root, StoreOptions::default()).expect("open store");
    let batches = batches();
    let before_last: Vec<Value> = batches[..batches.len() - 1]
        .iter()
        .flatten()
        .cloned()
        .collect();
    let err = store
        .read(&id())
        .expect_err("read over a proven-whole damaged record");
    assert!(err.to_string().contains(&format!("offset {last}")), "{err}");
    let err = store
        .writer(&id())
        .expect_err("writer over a damaged record");
    assert!(err.to_string().contains("fsck --repair"), "{err}");
    assert_eq!(std::fs::read(&log).expect("read"), damaged, "nothing cut");

    std::fs::remove_file(head_path(&root)).expect("remove the head");
    assert_eq!(events(&store, "reader"), before_last);
    let w = store.writer(&id()).expect("writer");
    assert_eq!(
        w.cut_tail().map(|c| (c.offset, c.len)),
        Some((last, full - last))
    );
    let copy = w.cut_tail().map(|c| root.join(&c.copy)).expect("cut");
    assert_eq!(
        std::fs::read(copy).expect("copy"),
        &damaged[last as usize..],
        "the cut bytes are kept"
    );
}
