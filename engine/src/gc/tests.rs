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
