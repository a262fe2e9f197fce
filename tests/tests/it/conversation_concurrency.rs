//! Concurrent appends to one conversation: from several `jp-store append`
//! processes, and from several threads of one process through the library.
//! Afterwards every batch is there exactly once, whole and in one piece, and
//! each writer's batches are in the order it appended them.

use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use jpstore_tests::{events_of, run_jp_store, ts};
use serde_json::{json, Value};

const BATCHES: usize = 15;

/// Batch `b` of writer `w`: a turn_start, a chat_request naming both (with
/// an attachment all writers share and one of its own), a chat_response.
fn batch(w: usize, b: usize) -> Vec<Value> {
    let n = (w * 100 + b) as u64 * 3;
    vec![
        json!({"type": "turn_start", "timestamp": ts(n)}),
        json!({"type": "chat_request", "timestamp": ts(n + 1), "content": format!("writer {w} batch {b}"),
        "resources": [
            {"uri": "file:///shared.txt", "text": "an attachment every writer sends\n"},
            {"uri": format!("file:///w{w}/b{b}.txt"), "text": format!("private to writer {w}, batch {b}\n")}
        ]}),
        json!({"type": "chat_response", "timestamp": ts(n + 2), "message": format!("reply to {w}/{b}")}),
    ]
}

/// Checks that `events` holds every batch of `writers` writers exactly
/// once, whole and contiguous, each writer's in order.
fn check_batches(events: &[Value], writers: usize, what: &str) {
    assert_eq!(
        events.len(),
        writers * BATCHES * 3,
        "{what}: number of events"
    );
    let mut seen: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (i, chunk) in events.chunks(3).enumerate() {
        let content = chunk[1]["content"].as_str().unwrap_or_else(|| {
            panic!(
                "{what}: events {} to {} are not one batch: {chunk:#?}",
                3 * i,
                3 * i + 2
            )
        });
        let (w, b) = parse_name(content).unwrap_or_else(|| {
            panic!(
                "{what}: event {} is not a batch's request: {content:?}",
                3 * i + 1
            )
        });
        assert_eq!(
            chunk,
            &batch(w, b)[..],
            "{what}: batch {w}/{b} at event {} is not whole",
            3 * i
        );
        if let Some(first) = seen.insert((w, b), i) {
            panic!("{what}: batch {w}/{b} appears twice (batches {first} and {i})");
        }
    }
    for w in 0..writers {
        let order: Vec<usize> = (0..BATCHES)
            .map(|b| {
                *seen
                    .get(&(w, b))
                    .unwrap_or_else(|| panic!("{what}: batch {w}/{b} is missing"))
            })
            .collect();
        assert!(
            order.windows(2).all(|p| p[0] < p[1]),
            "{what}: writer {w}'s batches are out of order: {order:?}"
        );
    }
}

fn parse_name(content: &str) -> Option<(usize, usize)> {
    let rest = content.strip_prefix("writer ")?;
    let (w, b) = rest.split_once(" batch ")?;
    Some((w.parse().ok()?, b.parse().ok()?))
}

#[test]
fn four_processes_append_to_one_conversation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    run_jp_store(&root, &["new", "--id", "shared", "--title", "busy"], b"").ok("new");
    let writers = 4;
    std::thread::scope(|s| {
        for w in 0..writers {
            let root = &root;
            s.spawn(move || {
                for b in 0..BATCHES {
                    let input = serde_json::to_vec(&batch(w, b)).expect("serialize");
                    let out = run_jp_store(root, &["append", "shared"], &input);
                    out.ok(&format!("append of batch {w}/{b}"));
                }
            });
        }
    });
    let export = run_jp_store(&root, &["export", "shared"], b"").json("export");
    check_batches(&events_of(&export), writers, "after 4 processes");
    let ls = run_jp_store(&root, &["ls", "--json"], b"").json("ls");
    assert_eq!(ls[0]["events"], json!(writers * BATCHES * 3), "{ls}");
    assert_eq!(ls[0]["turns"], json!(writers * BATCHES), "{ls}");
    let stats = run_jp_store(&root, &["stats", "--json"], b"").json("stats");
    assert_eq!(stats["records"], json!(writers * BATCHES + 1), "{stats}");
    // The shared attachment is one blob: private ones, the shared one and
    // the base config.
    assert_eq!(
        stats["distinct_blobs_referenced"],
        json!(writers * BATCHES + 2),
        "{stats}"
    );
}

#[test]
fn threads_append_through_the_library_while_readers_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let id = ConversationId::parse("threads").expect("id");
    let creator = store
        .create(NewConversation {
            id: Some(id.clone()),
            ..Default::default()
        })
        .expect("create");
    drop(creator);
    let writers = 2;
    let done = AtomicBool::new(false);
    let reads = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (store, id) = (&store, &id);
                s.spawn(move || {
                    for b in 0..BATCHES {
                        let text = serde_json::to_string(&batch(w, b)).expect("serialize");
                        let entries = parse_input(
                            &text,
                            ParseMode::Strict {
                                now: jpstore_engine::timestamp::Timestamp::now(),
                            },
                        )
                        .expect("parse")
                        .entries;
                        // A writer per batch, so that the threads take turns.
                        let mut writer = store
                            .writer(id)
                            .unwrap_or_else(|e| panic!("writer {w}, batch {b}: {e}"));
                        writer
                            .append(entries)
                            .unwrap_or_else(|e| panic!("append {w}/{b}: {e}"));
                    }
                })
            })
            .collect();
        // A reader, lock-free, while the writers write: it sees whole
        // batches only.
        let reader = s.spawn(|| {
            let mut reads = 0;
            let mut last = 0;
            while !done.load(Ordering::Acquire) {
                let conv = store.read(&id).expect("read while writing");
                let n = conv.entries.len();
                assert_eq!(n % 3, 0, "a reader saw part of a batch: {n} events");
                assert!(n >= last, "a reader saw events disappear: {last} then {n}");
                last = n;
                reads += 1;
            }
            reads
        });
        for h in handles {
            h.join().expect("a writer thread panicked");
        }
        done.store(true, Ordering::Release);
        reader.join().expect("the reader thread panicked")
    });
    assert!(reads > 0);
    let conv = store.read(&id).expect("read");
    let doc = conversation_json(&store, &conv, ContentMode::Inline).expect("export");
    check_batches(&events_of(&doc), writers, "after 2 threads");
    assert_eq!(conv.state.records, (writers * BATCHES + 1) as u64);
}

#[test]
fn processes_creating_conversations_at_once_get_distinct_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    // JP's ids are deciseconds: creations within one decisecond must take
    // the next free number, never share one.
    let ids: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|w| {
                let root = &root;
                s.spawn(move || {
                    (0..5)
                        .map(|i| {
                            let title = format!("w{w} n{i}");
                            run_jp_store(root, &["new", "--title", &title], b"")
                                .ok(&format!("new {title}"))
                                .trim()
                                .to_string()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a thread panicked"))
            .collect()
    });
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 20, "ids given twice: {ids:?}");
    let ls = run_jp_store(&root, &["ls", "--json"], b"").json("ls");
    let listed: std::collections::BTreeSet<String> = ls
        .as_array()
        .expect("array")
        .iter()
        .map(|i| i["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(
        listed,
        distinct.into_iter().cloned().collect(),
        "listed ids"
    );
    let mut titles: Vec<String> = ls
        .as_array()
        .expect("array")
        .iter()
        .map(|i| i["title"].as_str().expect("title").to_string())
        .collect();
    titles.sort();
    let mut want: Vec<String> = (0..4)
        .flat_map(|w| (0..5).map(move |i| format!("w{w} n{i}")))
        .collect();
    want.sort();
    assert_eq!(titles, want, "each conversation has its own metadata");
}

#[test]
fn readers_never_fail_while_a_writer_cuts_torn_tails_and_appends_over_them() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let id = ConversationId::parse("cuts").expect("id");
    let creator = store
        .create(NewConversation {
            id: Some(id.clone()),
            ..Default::default()
        })
        .expect("create");
    drop(creator);
    let log = jpstore_tests::log_path(dir.path(), "cuts");
    let rounds = 100;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut last = 0;
            while !done.load(Ordering::Acquire) {
                // Bytes read while the writer cuts and writes over them look
                // like damage for a moment; the reader must look again, not
                // fail.
                let conv = store
                    .read(&id)
                    .unwrap_or_else(|e| panic!("read during cuts (after {last} events): {e}"));
                let n = conv.entries.len();
                assert_eq!(n % 2, 0, "a reader saw part of a batch: {n} events");
                assert!(n >= last, "events disappeared: {last} then {n}");
                last = n;
            }
        });
        for round in 0..rounds {
            // What a writer that crashed mid-append leaves: bytes that are
            // not a whole record.
            {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&log)
                    .expect("open the log");
                let junk: Vec<u8> = (0..200u32).map(|k| (k * 7 + round) as u8).collect();
                f.write_all(&junk).expect("write a torn tail");
            }
            let mut w = store.writer(&id).expect("writer");
            let cut = w.cut_tail().expect("the torn tail is cut");
            assert_eq!(cut.len, 200, "round {round}");
            let n = u64::from(round) * 2;
            let text = serde_json::to_string(&[
                json!({"type": "chat_request", "timestamp": ts(n), "content": "y".repeat(round as usize % 50)}),
                json!({"type": "chat_response", "timestamp": ts(n + 1), "message": format!("round {round}")}),
            ])
            .expect("serialize");
            let entries = parse_input(
                &text,
                ParseMode::Strict {
                    now: jpstore_engine::timestamp::Timestamp::now(),
                },
            )
            .expect("parse")
            .entries;
            w.append(entries)
                .unwrap_or_else(|e| panic!("append in round {round}: {e}"));
        }
        done.store(true, Ordering::Release);
        reader.join().expect("the reader panicked");
    });
    let conv = store.read(&id).expect("read");
    assert_eq!(conv.entries.len(), rounds as usize * 2);
}

#[test]
fn a_walk_started_before_a_cut_yields_every_record_below_the_cut() {
    use jpstore_engine::internal::log::{LogEnd, LogOptions, LogReader};
    use std::io::Write as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let id = ConversationId::parse("cut").expect("id");
    let mut w = store
        .create(NewConversation {
            id: Some(id.clone()),
            ..Default::default()
        })
        .expect("create");
    for b in 0..3 {
        let text = serde_json::to_string(&batch(0, b)).expect("serialize");
        let entries = parse_input(
            &text,
            ParseMode::Strict {
                now: jpstore_engine::timestamp::Timestamp::now(),
            },
        )
        .expect("parse")
        .entries;
        w.append(entries).expect("append");
    }
    drop(w);
    let log = jpstore_tests::log_path(dir.path(), "cut");
    let valid_end = std::fs::metadata(&log).expect("stat").len();
    // A crashed writer's torn tail.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("open the log")
        .write_all(&[7u8; 40])
        .expect("write a torn tail");

    // A reader starts a walk (it takes the length, torn tail included)...
    let reader = LogReader::open(&**store.backend(), &id.log_path(), LogOptions::default())
        .expect("open a reader");
    let mut walk = reader.records().expect("start a walk");
    // ...a writer takes the lock and cuts the torn tail...
    let w = store.writer(&id).expect("writer");
    assert_eq!(
        w.cut_tail().map(|c| (c.offset, c.len)),
        Some((valid_end, 40))
    );
    // ...and the walk goes on: every record below the cut is still there and
    // must be yielded (format-spec 3, "Reading").
    let offsets: Vec<u64> = walk.by_ref().map(|r| r.expect("a record").offset).collect();
    assert_eq!(
        offsets.len(),
        4,
        "records yielded: {offsets:?}, walk ended with {:?}",
        walk.end()
    );
    assert_eq!(walk.position(), valid_end);
    assert!(
        matches!(
            walk.end(),
            Some(LogEnd::Clean { .. } | LogEnd::TornTail { .. })
        ),
        "{:?}",
        walk.end()
    );
}
