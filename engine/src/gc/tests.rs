//! Tests of gc: what it removes and keeps, and safety against concurrent
//! writers that reuse blobs already present.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::*;
use crate::conversation::ConversationId;
use crate::event::input::parse_input;
use crate::event::json::ParseMode;
use crate::export::{conversation_json, ContentMode};
use crate::timestamp::Timestamp;
use crate::{NewConversation, StoreOptions};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(&dir.path().join("s"), StoreOptions::default()).expect("init");
    (dir, store)
}

fn now_grace() -> GcOptions {
    GcOptions {
        grace: Duration::ZERO,
        ..GcOptions::default()
    }
}

fn append(store: &Store, id: &ConversationId, text: &str) {
    let mut w = store.writer(id).expect("writer");
    let entries = parse_input(
        text,
        ParseMode::Strict {
            now: Timestamp::now(),
        },
    )
    .expect("input")
    .entries;
    w.append(entries).expect("append");
}

fn conv(store: &Store, name: &str) -> ConversationId {
    let id = ConversationId::parse(name).expect("id");
    store
        .create(NewConversation {
            id: Some(id.clone()),
            ..Default::default()
        })
        .expect("create");
    id
}

fn response(call: &str, content: &str) -> String {
    format!(
        "{{\"type\":\"turn_start\"}}\n{{\"type\":\"tool_call_request\",\"id\":\"{call}\",\"name\":\"t\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"{call}\",\"content\":\"{content}\"}}"
    )
}

#[test]
fn referenced_blobs_stay_and_the_rest_goes_after_the_grace_period() {
    let (_d, store) = store();
    let id = conv(&store, "a");
    append(&store, &id, &response("c1", "kept content"));
    let orphan = store.blobs().put(b"nobody refers to this").expect("put").id;
    // Within the default grace period nothing goes.
    let r = store.gc(GcOptions::default(), &mut |_| {}).expect("gc");
    assert_eq!((r.loose_removed, r.kept_unreferenced), (0, 1));
    // A dry run reports without deleting.
    let r = store
        .gc(
            GcOptions {
                dry_run: true,
                ..now_grace()
            },
            &mut |_| {},
        )
        .expect("gc");
    assert_eq!(r.loose_removed, 1);
    assert!(store.blobs().exists(&orphan).expect("exists"));
    let r = store.gc(now_grace(), &mut |_| {}).expect("gc");
    assert_eq!(r.loose_removed, 1);
    assert!(r.loose_bytes > 0);
    assert_eq!(r.referenced, 2, "the content and the base config");
    assert!(!store.blobs().exists(&orphan).expect("exists"));
    let back = conversation_json(&store, &store.read(&id).expect("read"), ContentMode::Inline)
        .expect("export");
    assert_eq!(back["events"][2]["content"], "kept content");
    assert!(store
        .blobs()
        .verify_all(&mut |_| {})
        .expect("verify")
        .is_clean());
}

#[test]
fn packs_are_rewritten_or_removed_by_their_live_share() {
    // Writers that do not merge, so that the three packs stay apart until
    // gc sweeps them.
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions {
        blobs: jpstore_blobstore::Options {
            small_pack_bytes: 0,
            ..jpstore_blobstore::Options::default()
        },
        ..StoreOptions::default()
    };
    let store = Store::init_dir(&dir.path().join("s"), options).expect("init");
    let id = conv(&store, "p");
    let items: Vec<Vec<u8>> = (0..10)
        .map(|i| format!("packed item {i} with some bytes").into_bytes())
        .collect();
    let mostly_dead = store
        .blobs()
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let dead: Vec<Vec<u8>> = (0..5)
        .map(|i| format!("all dead {i}").into_bytes())
        .collect();
    store
        .blobs()
        .put_batch(dead.len(), |i| Ok(dead[i].clone()), &mut |_| {})
        .expect("batch");
    let live: Vec<Vec<u8>> = (0..4)
        .map(|i| format!("mostly live {i}").into_bytes())
        .collect();
    let mostly_live = store
        .blobs()
        .put_batch(live.len(), |i| Ok(live[i].clone()), &mut |_| {})
        .expect("batch");
    // Reference 2 of the first pack and 3 of the last by their ids.
    let mut text = String::from("{\"type\":\"turn_start\"}\n");
    for (n, (id, size)) in mostly_dead
        .ids
        .iter()
        .zip(&mostly_dead.sizes)
        .take(2)
        .chain(mostly_live.ids.iter().zip(&mostly_live.sizes).take(3))
        .enumerate()
    {
        text.push_str(&format!(
            "{{\"type\":\"tool_call_request\",\"id\":\"c{n}\",\"name\":\"t\",\"arguments\":{{}}}}\n\
             {{\"type\":\"tool_call_response\",\"id\":\"c{n}\",\"content\":{{\"$blob\":\"{id}\",\"size\":{size}}}}}\n"
        ));
    }
    append(&store, &id, &text);
    let r = store.gc(now_grace(), &mut |_| {}).expect("gc");
    assert_eq!((r.packs_rewritten, r.packs_removed), (1, 1), "{r:?}");
    assert_eq!(r.packed_removed, 8 + 5);
    assert_eq!(
        r.kept_unreferenced, 1,
        "one dead object in a pack that is mostly live"
    );
    assert!(r.pack_bytes > 0);
    // The rewritten pack and the mostly live one, of like sizes, merged.
    assert_eq!(r.packs_merged, 2, "{r:?}");
    assert_eq!(store.blobs().packs().expect("packs").len(), 1);
    for (i, rid) in mostly_dead.ids.iter().take(2).enumerate() {
        assert_eq!(store.blobs().get(rid).expect("live blob"), items[i]);
    }
    assert!(store
        .blobs()
        .verify_all(&mut |_| {})
        .expect("verify")
        .is_clean());
}

#[test]
fn writers_reusing_present_blobs_never_lose_them_to_a_concurrent_gc() {
    let (_d, store) = store();
    let ids: Vec<ConversationId> = (0..3).map(|i| conv(&store, &format!("w{i}"))).collect();
    let stop = AtomicBool::new(false);
    let shared = "shared content that every writer refers to";
    std::thread::scope(|s| {
        let gc = s.spawn(|| {
            let mut runs = 0;
            while !stop.load(Ordering::Acquire) {
                store.gc(now_grace(), &mut |_| {}).expect("gc");
                runs += 1;
            }
            runs
        });
        let writers: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(w, id)| {
                let store = &store;
                s.spawn(move || {
                    for i in 0..40 {
                        // Content another writer may have stored a moment ago
                        // (found present, not written), and content that was
                        // unreferenced until now.
                        let text = format!(
                            "{}\n{}",
                            response(&format!("a{i}"), shared),
                            response(&format!("b{i}"), &format!("item {} of writer {w}", i % 5))
                                .replacen("{\"type\":\"turn_start\"}\n", "", 1)
                        );
                        append(store, id, &text);
                    }
                })
            })
            .collect();
        // Stop gc whatever happened to the writers, then report them.
        let results: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        stop.store(true, Ordering::Release);
        let runs = gc.join();
        for r in results {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
        assert!(runs.expect("gc thread") > 0);
    });
    store.gc(now_grace(), &mut |_| {}).expect("final gc");
    assert!(store
        .blobs()
        .verify_all(&mut |_| {})
        .expect("verify")
        .is_clean());
    for (w, id) in ids.iter().enumerate() {
        let doc = conversation_json(&store, &store.read(id).expect("read"), ContentMode::Inline)
            .expect("every referenced blob is there");
        let events = doc["events"].as_array().expect("events");
        assert_eq!(events.len(), 40 * 5);
        assert_eq!(events[2]["content"], shared);
        assert_eq!(events[4]["content"], format!("item 0 of writer {w}"));
    }
}

/// Sets the modification time of `path` to two hours ago: older than
/// gc's default grace period.
fn age(path: &std::path::Path) {
    let old = std::time::SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(old))
        .unwrap_or_else(|e| panic!("age {}: {e}", path.display()));
}

#[test]
fn leftovers_of_stopped_writers_are_reported_by_fsck_and_removed_by_gc_once_old() {
    let (dir, store) = store();
    let root = dir.path().join("s");
    let live = conv(&store, "live");
    append(&store, &live, &response("c1", "kept"));
    let conversations = root.join("conversations");
    let files =
        |list: &[&str]| -> Vec<std::path::PathBuf> { list.iter().map(|p| root.join(p)).collect() };
    // What stopped writers leave, each aged past the grace period.
    std::fs::create_dir_all(conversations.join("17000000001")).expect("dir");
    std::fs::create_dir_all(conversations.join(".removed-gone-12-34")).expect("dir");
    std::fs::create_dir_all(root.join("quarantine/conversations/live.1-2")).expect("dir");
    let old = files(&[
        "conversations/17000000001/events.log.lock",
        "conversations/17000000001/head",
        "conversations/.removed-gone-12-34/events.log",
        "conversations/.removed-gone-12-34/events.log.lock",
        "conversations/live/events.log.tmp.99.123.0",
        "conversations/live/head.tmp.99.created",
        "quarantine/conversations/live.tail-16.1-2.tmp.99.1.0",
        "quarantine/conversations/live.1-2/NOTE.tmp.99",
        "config.toml.tmp.99",
    ]);
    for f in &old {
        std::fs::write(f, b"left over").expect("write");
        age(f);
    }
    // A young temp file, and an old directory whose lock a creation holds.
    let young = conversations.join("live/head.tmp.98.1");
    std::fs::write(&young, b"young").expect("write");
    std::fs::create_dir_all(conversations.join("17000000002")).expect("dir");
    let busy = std::path::Path::new("conversations/17000000002/events.log");
    let held = crate::log::try_lock(&**store.backend(), busy)
        .expect("lock")
        .expect("free");
    age(&conversations.join("17000000002/events.log.lock"));

    let report = store
        .fsck(crate::fsck::FsckOptions::default(), &mut |_| {})
        .expect("fsck");
    assert!(report.is_clean(), "{:?}", report.findings);
    let mut reported: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.kind == "leftover")
        .map(|f| {
            assert_eq!(f.severity, crate::fsck::Severity::Info);
            f.path.clone().expect("a path")
        })
        .collect();
    reported.sort();
    let mut want: Vec<_> = files(&[
        "conversations/17000000001",
        "conversations/.removed-gone-12-34",
        "conversations/live/events.log.tmp.99.123.0",
        "conversations/live/head.tmp.99.created",
        "conversations/live/head.tmp.98.1",
        "quarantine/conversations/live.tail-16.1-2.tmp.99.1.0",
        "quarantine/conversations/live.1-2/NOTE.tmp.99",
        "config.toml.tmp.99",
        "conversations/17000000002",
    ]);
    want.sort();
    assert_eq!(reported, want);

    let dry = store
        .gc(
            GcOptions {
                dry_run: true,
                ..GcOptions::default()
            },
            &mut |_| {},
        )
        .expect("dry gc");
    // All old ones are counted; the held directory is found busy only
    // when it is removed.
    assert_eq!(dry.leftovers_removed, 8, "{dry:?}");
    assert!(
        old.iter().all(|f| f.exists()),
        "a dry run removed something"
    );

    let report = store.gc(GcOptions::default(), &mut |_| {}).expect("gc");
    assert_eq!(report.leftovers_removed, 7, "{report:?}");
    for f in &old {
        assert!(!f.exists(), "{} was left", f.display());
    }
    for gone in ["17000000001", ".removed-gone-12-34"] {
        assert!(!conversations.join(gone).exists(), "{gone} was left");
    }
    assert!(
        young.exists(),
        "a temp file younger than the grace period was removed"
    );
    assert!(
        conversations.join("17000000002/events.log.lock").exists(),
        "a directory whose lock is held was removed"
    );
    drop(held);
    // The live conversation, and what it references, are untouched.
    let conversation = store.read(&live).expect("read live");
    let json = conversation_json(&store, &conversation, ContentMode::Inline).expect("live");
    assert!(json.to_string().contains("kept"), "{json}");
    let again = store.gc(GcOptions::default(), &mut |_| {}).expect("gc");
    assert_eq!(again.leftovers_removed, 1, "the directory no longer held");
    assert!(!conversations.join("17000000002").exists());
}

#[test]
fn a_creation_waiting_on_a_leftover_directory_gc_removes_makes_it_again() {
    let (dir, store) = store();
    let conversations = dir.path().join("s/conversations");
    std::fs::create_dir_all(conversations.join("again")).expect("dir");
    let backend = store.backend().clone();
    let log = std::path::Path::new("conversations/again/events.log");
    let held = crate::log::try_lock(&*backend, log)
        .expect("lock")
        .expect("free");
    // A creation of that id starts and waits for the lock gc holds.
    let creating = std::thread::spawn({
        let root = dir.path().join("s");
        move || {
            let store = Store::open_dir(&root, StoreOptions::default()).expect("open");
            store
                .create(NewConversation {
                    id: Some(ConversationId::parse("again").expect("id")),
                    ..Default::default()
                })
                .map(drop)
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    // gc's removal of the directory, under the lock, as `remove` does it.
    let removed = crate::conversation::clear_locked_dir(
        &*backend,
        std::path::Path::new("conversations/again"),
        log,
    )
    .expect("clear");
    assert!(removed);
    drop(held);
    creating
        .join()
        .expect("creation thread")
        .expect("the creation failed after its directory was removed");
    assert!(conversations.join("again/events.log").is_file());
}
